"""`asepr import ogb`: small datasets written in OGB's exact raw layout, checked against
the ``ogb`` package's own loaders on the same folder (no download)."""

from __future__ import annotations

import gzip
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch

from asepr.storage.errors import InputError, InputNotFoundError, SchemaError
from asepr.storage.importers import import_dataset
from asepr.storage.inputs.schema import SPLIT_NONE, SPLIT_TEST, SPLIT_TRAIN, SPLIT_VAL
from asepr.workflows.cli import main as cli_main

ogb_node = pytest.importorskip("ogb.nodeproppred", reason="needs the ogb package (asepr[test] has it)")
ogb_link = pytest.importorskip("ogb.linkproppred", reason="needs the ogb package (asepr[test] has it)")


def _csv_gz(path: Path, rows: np.ndarray, fmt: str = "%d") -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    rows = np.asarray(rows)
    lines = [",".join(fmt % v if not (isinstance(v, float) and np.isnan(v)) else "" for v in np.atleast_1d(r))
             for r in rows]
    with gzip.open(path, "wt") as fh:
        fh.write("".join(line + "\n" for line in lines))


def _graph(folder: Path, n: int, m: int, d: int, rng, with_year: bool = False) -> dict:
    raw = folder / "raw"
    edges = rng.integers(0, n, (m, 2))
    feat = rng.normal(size=(n, d)).astype(np.float32)
    _csv_gz(raw / "edge.csv.gz", edges)
    _csv_gz(raw / "num-node-list.csv.gz", np.array([n]))
    _csv_gz(raw / "num-edge-list.csv.gz", np.array([m]))
    _csv_gz(raw / "node-feat.csv.gz", feat, "%.9g")
    if with_year:
        _csv_gz(raw / "node_year.csv.gz", rng.integers(1990, 2020, n))
    (folder / "RELEASE_v1.txt").write_text("fixture\n")
    (folder / "processed").mkdir()
    return {"edges": edges, "feat": feat}


def ogbn_arxiv_like(root: Path, n: int = 300, m: int = 1_500, d: int = 8, seed: int = 0) -> dict:
    """``root/ogbn_arxiv``: OGB's node-property layout under the catalogue name ogbn-arxiv."""
    rng = np.random.default_rng(seed)
    folder = root / "ogbn_arxiv"
    arrays = _graph(folder, n, m, d, rng, with_year=True)
    labels = rng.integers(0, 40, n)
    _csv_gz(folder / "raw" / "node-label.csv.gz", labels)
    perm = rng.permutation(n)
    idx = {"train": np.sort(perm[: n // 2]), "valid": perm[n // 2: 3 * n // 4], "test": perm[3 * n // 4: n - 10]}
    for name, ids in idx.items():
        _csv_gz(folder / "split" / "time" / f"{name}.csv.gz", ids)
    return {**arrays, "labels": labels, "idx": idx, "folder": folder}


def ogbl_link_like(root: Path, name: str, n: int = 200, m: int = 900, d: int = 4, seed: int = 1) -> dict:
    """``root/<name>``: OGB's link-property layout (ogbl-ppa: edge/edge_neg, ogbl-citation2:
    source_node/target_node/target_node_neg)."""
    rng = np.random.default_rng(seed)
    folder = root / name.replace("-", "_")
    arrays = _graph(folder, n, m, d, rng, with_year=name == "ogbl-citation2")
    split = folder / "split" / ("throughput" if name == "ogbl-ppa" else "time")
    split.mkdir(parents=True)
    sets = {}
    for part, k in (("train", m), ("valid", 40), ("test", 50)):
        pos = torch.from_numpy(arrays["edges"] if part == "train" else rng.integers(0, n, (k, 2)))
        if name == "ogbl-ppa":
            d_ = {"edge": pos}
            if part != "train":
                d_["edge_neg"] = torch.from_numpy(rng.integers(0, n, (3 * k, 2)))
        else:
            d_ = {"source_node": pos[:, 0].clone(), "target_node": pos[:, 1].clone()}
            if part != "train":
                d_["target_node_neg"] = torch.from_numpy(rng.integers(0, n, (k, 20)))
        torch.save(d_, split / f"{part}.pt")
        sets[part] = d_
    return {**arrays, "sets": sets, "folder": folder}


def _read(out: Path, what: str) -> pa.Table:
    return pa.concat_tables([pq.read_table(p) for p in sorted((out / what).glob("part-*.parquet"))])


def test_node_property_import_equals_ogbs_loader(tmp_path):
    fx = ogbn_arxiv_like(tmp_path / "ogb")
    out = tmp_path / "in"
    meta = import_dataset("ogb", fx["folder"], out, shard_rows=100)  # several edge and node shards
    dataset = ogb_node.NodePropPredDataset("ogbn-arxiv", root=str(tmp_path / "ogb"))
    graph, labels = dataset[0]
    split = dataset.get_idx_split()
    edges, nodes = _read(out, "edges"), _read(out, "nodes")
    assert len(list((out / "edges").glob("part-*.parquet"))) > 1
    # Edge for edge, row for row.
    assert np.array_equal(np.stack([edges["src"].to_numpy(), edges["dst"].to_numpy()]), graph["edge_index"])
    assert np.array_equal(nodes["id"].to_numpy(), np.arange(graph["num_nodes"]))
    feat = np.stack(nodes["feat"].to_numpy(zero_copy_only=False))
    assert feat.dtype == graph["node_feat"].dtype and np.array_equal(feat, graph["node_feat"])
    assert np.array_equal(nodes["label"].to_numpy(), labels[:, 0])
    ours = nodes["split"].to_numpy()
    for name, code in (("train", SPLIT_TRAIN), ("valid", SPLIT_VAL), ("test", SPLIT_TEST)):
        assert np.array_equal(np.flatnonzero(ours == code), np.sort(split[name]))
    assert (ours == SPLIT_NONE).sum() == 10
    assert meta["undirected"] is False and meta["num_classes"] == int(labels.max()) + 1
    assert meta["ogb"] == {"name": "ogbn-arxiv", "task": "node", "scheme": "time", "eval_metric": "acc",
                           "eval_tables": []}
    assert meta["split"] == {"kind": "published", "scheme": "time"}


@pytest.mark.parametrize("name", ["ogbl-ppa", "ogbl-citation2"])
def test_link_property_import_equals_ogbs_loader(tmp_path, name):
    fx = ogbl_link_like(tmp_path / "ogb", name)
    out = tmp_path / "in"
    meta = import_dataset("ogb", fx["folder"], out, shard_rows=250)
    dataset = ogb_link.LinkPropPredDataset(name, root=str(tmp_path / "ogb"))
    graph = dataset[0]
    split_edge = dataset.get_edge_split()
    edges, nodes = _read(out, "edges"), _read(out, "nodes")
    ours = np.stack([edges["src"].to_numpy(), edges["dst"].to_numpy()])
    if name == "ogbl-ppa":  # undirected: OGB's loader follows each edge with its reverse
        assert np.array_equal(graph["edge_index"][:, ::2], ours)
        assert np.array_equal(graph["edge_index"][:, 1::2], ours[::-1])
    else:
        assert np.array_equal(graph["edge_index"], ours)
    assert np.array_equal(np.stack(nodes["feat"].to_numpy(zero_copy_only=False)), graph["node_feat"])
    assert (nodes["label"].to_numpy() == -1).all() and (nodes["split"].to_numpy() == SPLIT_NONE).all()
    assert meta["undirected"] is (name == "ogbl-ppa") and meta["ogb"]["task"] == "link"
    for part in ("valid", "test"):
        table = pq.read_table(out / f"ogb-{part}.parquet")
        ref = split_edge[part]
        if name == "ogbl-ppa":
            assert np.array_equal(np.stack([table["src"].to_numpy(), table["dst"].to_numpy()], 1), ref["edge"].numpy())
            neg = pq.read_table(out / f"ogb-{part}-neg.parquet")
            assert np.array_equal(np.stack([neg["src"].to_numpy(), neg["dst"].to_numpy()], 1), ref["edge_neg"].numpy())
        else:
            assert np.array_equal(table["src"].to_numpy(), ref["source_node"].numpy())
            assert np.array_equal(table["dst"].to_numpy(), ref["target_node"].numpy())
            assert np.array_equal(np.stack(table["dst_neg"].to_numpy(zero_copy_only=False)),
                                  ref["target_node_neg"].numpy())
    expected = ["ogb-test-neg.parquet", "ogb-test.parquet", "ogb-valid-neg.parquet", "ogb-valid.parquet"]
    assert meta["ogb"]["eval_tables"] == (expected if name == "ogbl-ppa" else ["ogb-test.parquet", "ogb-valid.parquet"])


def test_the_cli_imports_ogb(tmp_path, capsys):
    fx = ogbn_arxiv_like(tmp_path / "ogb", n=50, m=120)
    assert cli_main(["import", "ogb", str(fx["folder"]), str(tmp_path / "in"), "--split-scheme", "time"]) == 0
    assert "50 nodes" in capsys.readouterr().out


def test_bad_ogb_folders_are_refused_by_name(tmp_path):
    fx = ogbn_arxiv_like(tmp_path / "ogb", n=40, m=100)
    folder = fx["folder"]
    with pytest.raises(InputNotFoundError, match="split/random"):
        import_dataset("ogb", folder, tmp_path / "a", split_scheme="random")
    _csv_gz(folder / "raw" / "num-edge-list.csv.gz", np.array([101]))
    with pytest.raises(SchemaError, match=r"edge.csv.gz.*101 edges"):
        import_dataset("ogb", folder, tmp_path / "b")
    assert not (tmp_path / "b").exists()
    _csv_gz(folder / "raw" / "num-edge-list.csv.gz", np.array([100]))
    _csv_gz(folder / "raw" / "edge.csv.gz", np.concatenate([fx["edges"][:99], [[3, 40]]]))
    with pytest.raises(InputError, match=r"node ids in \[0, 40\).*row 100"):
        import_dataset("ogb", folder, tmp_path / "c")
    _csv_gz(folder / "raw" / "edge.csv.gz", fx["edges"])
    _csv_gz(folder / "raw" / "node-label.csv.gz", np.stack([fx["labels"], fx["labels"]], 1))
    with pytest.raises(SchemaError, match="single task"):
        import_dataset("ogb", folder, tmp_path / "d")
    (folder / "raw" / "node-label.csv.gz").write_bytes(b"not gzip")
    with pytest.raises(InputError, match="node-label.csv.gz"):
        import_dataset("ogb", folder, tmp_path / "e")


def test_unlabelled_nodes_read_as_unknown(tmp_path):
    fx = ogbn_arxiv_like(tmp_path / "ogb", n=30, m=60)
    labels = fx["labels"].astype(float)
    labels[[2, 5]] = np.nan
    _csv_gz(fx["folder"] / "raw" / "node-label.csv.gz", labels, "%d")
    import_dataset("ogb", fx["folder"], tmp_path / "in")
    got = _read(tmp_path / "in", "nodes")["label"].to_numpy()
    assert got[2] == got[5] == -1 and np.array_equal(np.delete(got, [2, 5]), np.delete(fx["labels"], [2, 5]))
