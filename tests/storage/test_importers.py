"""Importers: the nine shared datasets, small edge lists, and the error paths.

Each shared dataset is imported once per module (``imported``) and checked against the
published figures (the ``README.md`` of the ``$ASEPR_DATASETS`` folder) and against its source file,
read here independently of the importer.
"""

from __future__ import annotations

import csv
import gzip
import json
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from asepr.storage.errors import (
    AseprError,
    InputError,
    InputNotFoundError,
    SchemaError,
    StoreError,
)
from asepr.storage.importers import FORMATS, import_dataset
from asepr.workflows.demo import bundled_cora


@dataclass(frozen=True)
class Case:
    folder: str
    fmt: str
    nodes: int
    edges: int
    dim: int
    classes: int
    isolated: int | None = None  # where the datasets README states it

    def __str__(self) -> str:
        return self.folder


#: The bundled Cora (the same file as the published one): tests that only need Cora read it.
CORA = bundled_cora()

CASES = [
    Case("cora", "gnn-npz", 2_708, 5_278, 1_433, 7),
    Case("amazon-photo", "gnn-npz", 7_650, 119_081, 745, 8, isolated=115),
    Case("amazon-computers", "gnn-npz", 13_752, 245_861, 767, 10, isolated=281),
    Case("coauthor-cs", "gnn-npz", 18_333, 81_894, 6_805, 15),
    Case("coauthor-physics", "gnn-npz", 34_493, 247_962, 8_415, 5),
    Case("tolokers", "hetero-npz", 11_758, 519_000, 10, 2),
    Case("squirrel", "hetero-npz", 5_201, 198_353, 2_089, 5),
    Case("facebook-pagepage", "musae", 22_470, 170_823, 4_714, 4),
    Case("twitch-de", "musae", 9_498, 153_138, 3_170, 2),
]
# The three largest imports run with the slow tests; every format keeps a default case.
PARAMS = [pytest.param(c, marks=pytest.mark.slow) if c.folder in {"coauthor-cs", "coauthor-physics", "facebook-pagepage"}
          else c for c in CASES]


# -- helpers -----------------------------------------------------------------------------
def read_edges(out: Path) -> pa.Table:
    return pq.read_table(out / "edges")


def read_nodes(out: Path, columns=("id", "label", "split")) -> pa.Table:
    return pq.read_table(out / "nodes", columns=list(columns))


def feat_dim(out: Path) -> int:
    first = min((out / "nodes").glob("part-*.parquet"))
    return pq.read_schema(first).field("feat").type.list_size


def edge_rows(out: Path) -> tuple[np.ndarray, np.ndarray]:
    table = read_edges(out)
    return table.column("src").to_numpy(), table.column("dst").to_numpy()


def some_feature_rows(out: Path) -> tuple[np.ndarray, np.ndarray]:
    """``(ids, feat)`` of a few nodes from the first and last node shards, read one row
    group at a time (the whole feature matrix of coauthor-physics is over a gigabyte)."""
    shards = sorted((out / "nodes").glob("part-*.parquet"))
    ids, feats = [], []
    for shard in dict.fromkeys([shards[0], shards[-1]]):
        pf = pq.ParquetFile(shard)
        for rg in dict.fromkeys([0, pf.num_row_groups - 1]):
            table = pf.read_row_group(rg, columns=["id", "feat"])
            rows = sorted({0, 1, table.num_rows // 2, table.num_rows - 1})
            table = table.take(rows)
            ids.append(table.column("id").to_numpy())
            flat = table.column("feat").combine_chunks().flatten().to_numpy()
            feats.append(flat.reshape(table.num_rows, -1))
    return np.concatenate(ids), np.concatenate(feats)


def source_file(datasets_dir: Path, case: Case) -> Path:
    return next((datasets_dir / case.folder).glob("*.npz"))


def source_canonical_edges(datasets_dir: Path, case: Case) -> np.ndarray:
    """Sorted unique ``min * N + max`` keys of the source's non-loop edges."""
    n = case.nodes
    if case.fmt == "gnn-npz":
        with np.load(source_file(datasets_dir, case)) as z:
            indptr, indices = z["adj_indptr"], z["adj_indices"]
        src = np.repeat(np.arange(n), np.diff(indptr))
        dst = indices
    elif case.fmt == "hetero-npz":
        with np.load(source_file(datasets_dir, case)) as z:
            src, dst = z["edges"][:, 0], z["edges"][:, 1]
    else:
        path = next((datasets_dir / case.folder).glob("*_edges.csv"))
        with open(path, newline="") as fh:
            rows = np.array([[int(a), int(b)] for a, b in list(csv.reader(fh))[1:]])
        src, dst = rows[:, 0], rows[:, 1]
    src, dst = src.astype(np.int64), dst.astype(np.int64)
    keep = src != dst
    lo, hi = np.minimum(src, dst)[keep], np.maximum(src, dst)[keep]
    return np.unique(lo * n + hi)


def source_features(datasets_dir: Path, case: Case, ids: np.ndarray) -> np.ndarray:
    """Dense source features of nodes ``ids``, built without the importer's code."""
    out = np.zeros((len(ids), case.dim), dtype=np.float64)
    if case.fmt == "gnn-npz":
        with np.load(source_file(datasets_dir, case)) as z:
            indptr, indices, data = z["attr_indptr"], z["attr_indices"], z["attr_data"]
        for i, v in enumerate(ids):
            for j in range(indptr[v], indptr[v + 1]):
                out[i, indices[j]] += data[j]
    elif case.fmt == "hetero-npz":
        with np.load(source_file(datasets_dir, case)) as z:
            out[:] = z["node_features"][ids]
    else:
        with open(next((datasets_dir / case.folder).glob("*.json"))) as fh:
            doc = json.load(fh)
        for i, v in enumerate(ids):
            out[i, doc[str(int(v))]] = 1.0
    return out


def assert_no_output(out: Path) -> None:
    assert not out.exists()
    leftovers = [p.name for p in out.parent.iterdir() if p.name.startswith(f".{out.name}.")]
    assert leftovers == []


# -- the shared datasets -----------------------------------------------------------------
@pytest.fixture(scope="module")
def imported(tmp_path_factory, datasets_dir):
    """``imported(case)`` -> ``(out, meta)``, importing each dataset once per module."""
    cache: dict[str, tuple[Path, dict]] = {}
    root = tmp_path_factory.mktemp("imported")

    def get(case: Case) -> tuple[Path, dict]:
        if case.folder not in cache:
            out = root / case.folder
            meta = import_dataset(case.fmt, datasets_dir / case.folder, out, seed=0)
            cache[case.folder] = (out, meta)
        return cache[case.folder]

    return get


@pytest.mark.parametrize("case", PARAMS, ids=str)
def test_counts_match_published_figures(imported, case):
    out, meta = imported(case)
    src, dst = edge_rows(out)
    nodes = read_nodes(out)
    labels = nodes.column("label").to_numpy()
    assert nodes.num_rows == case.nodes
    assert len(src) == case.edges
    assert feat_dim(out) == case.dim
    assert len(np.unique(labels[labels >= 0])) == case.classes
    assert (meta["num_nodes"], meta["num_edges"], meta["feat_dim"], meta["num_classes"]) == (
        case.nodes, case.edges, case.dim, case.classes
    )
    if case.isolated is not None:
        assert case.nodes - len(np.unique(np.concatenate([src, dst]))) == case.isolated
    assert meta["undirected"] is True
    assert meta["source"]["format"] == case.fmt
    assert meta["name"]


@pytest.mark.parametrize("case", PARAMS, ids=str)
def test_edges_are_canonical_and_match_source(imported, datasets_dir, case):
    out, meta = imported(case)
    src, dst = edge_rows(out)
    assert (src < dst).all()  # oriented, and so no self-loops
    keys = src * case.nodes + dst
    assert len(np.unique(keys)) == len(keys)
    np.testing.assert_array_equal(np.sort(keys), source_canonical_edges(datasets_dir, case))
    counts = meta["counts"]
    assert counts["raw_entries"] - counts["self_loops_dropped"] - counts["duplicates_dropped"] == case.edges


@pytest.mark.parametrize("case", PARAMS, ids=str)
def test_ids_dense_and_features_match_source(imported, datasets_dir, case):
    out, _ = imported(case)
    ids = read_nodes(out, ["id"]).column("id").to_numpy()
    np.testing.assert_array_equal(ids, np.arange(case.nodes))
    some_ids, feat = some_feature_rows(out)
    assert feat.dtype == np.float32 and feat.shape[1] == case.dim
    np.testing.assert_array_equal(feat, source_features(datasets_dir, case, some_ids))


@pytest.mark.parametrize("case", PARAMS, ids=str)
def test_labels_match_source(imported, datasets_dir, case):
    out, meta = imported(case)
    labels = read_nodes(out, ["label"]).column("label").to_numpy()
    assert labels.dtype == np.int64
    if case.fmt == "gnn-npz":
        with np.load(source_file(datasets_dir, case)) as z:
            np.testing.assert_array_equal(labels, z["labels"])
    elif case.fmt == "hetero-npz":
        with np.load(source_file(datasets_dir, case)) as z:
            np.testing.assert_array_equal(labels, z["node_labels"])
    else:
        label_map = json.loads((out / "label_map.json").read_text())
        column = label_map["column"]
        assert column == meta["label_column"] == {"facebook-pagepage": "page_type", "twitch-de": "mature"}[case.folder]
        with open(next((datasets_dir / case.folder).glob("*_target.csv")), newline="") as fh:
            rows = list(csv.DictReader(fh))
        id_column = "new_id" if "new_id" in rows[0] else "id"
        for row in rows:
            assert str(label_map["classes"][labels[int(row[id_column])]]) == row[column]


@pytest.mark.parametrize("case", PARAMS, ids=str)
def test_split_and_layout(imported, datasets_dir, case):
    out, meta = imported(case)
    nodes = read_nodes(out)
    labels, split = nodes.column("label").to_numpy(), nodes.column("split").to_numpy()
    assert split.dtype == np.int8
    if case.fmt == "hetero-npz":
        assert meta["split"] == {"kind": "published", "index": 0, "num_published": 10}
        with np.load(source_file(datasets_dir, case)) as z:
            expected = np.full(case.nodes, -1)
            for code, key in enumerate(("train_masks", "val_masks", "test_masks")):
                expected[z[key][0]] = code
        np.testing.assert_array_equal(split, expected)
    else:
        assert meta["split"] == {"kind": "stratified", "fractions": [0.6, 0.2, 0.2], "seed": 0}
        for c in range(case.classes):
            in_class = split[labels == c]
            assert (in_class == 0).any() and (in_class == 2).any()
            assert abs((in_class == 0).mean() - 0.6) < 0.05
        assert (split[labels < 0] == -1).all()
    side = {"label_map.json"} if case.fmt == "musae" else set()
    assert {p.name for p in out.iterdir()} == {"edges", "nodes", "meta.json"} | side


def test_split_reproducible_with_seed(tmp_path):
    import_dataset("gnn-npz", CORA.parent, tmp_path / "first", seed=0)  # the folder that holds it
    split0 = read_nodes(tmp_path / "first").column("split").to_numpy()
    import_dataset("gnn-npz", CORA, tmp_path / "again", seed=0)
    import_dataset("gnn-npz", CORA, tmp_path / "other", seed=1)
    np.testing.assert_array_equal(read_nodes(tmp_path / "again").column("split").to_numpy(), split0)
    other = read_nodes(tmp_path / "other").column("split").to_numpy()
    assert (other != split0).any()
    assert json.loads((tmp_path / "other" / "meta.json").read_text())["split"]["seed"] == 1


def test_split_index_picks_another_published_split(imported, datasets_dir, tmp_path):
    case = next(c for c in CASES if c.folder == "squirrel")
    out0, _ = imported(case)
    meta = import_dataset("hetero-npz", datasets_dir / "squirrel", tmp_path / "s3", split_index=3)
    assert meta["split"]["index"] == 3
    split3 = read_nodes(tmp_path / "s3").column("split").to_numpy()
    with np.load(source_file(datasets_dir, case)) as z:
        assert (split3 == 0).sum() == z["train_masks"][3].sum()
        np.testing.assert_array_equal(split3 == 0, z["train_masks"][3])
        np.testing.assert_array_equal(split3 == 1, z["val_masks"][3])
    assert (split3 != read_nodes(out0).column("split").to_numpy()).any()


# -- edge lists --------------------------------------------------------------------------
EDGES = [(3, 7), (7, 5), (5, 3), (3, 3), (9, 7)]  # sparse int ids, one self-loop


def write_lines(path: Path, lines: list[str], newline: str = "\n") -> Path:
    path.write_text(newline.join(lines) + newline)
    return path


def import_edgelist(src, out, **options) -> dict:
    return import_dataset("edgelist", src, out, **options)


def original_edges(out: Path, meta: dict) -> list[tuple]:
    """The imported edges mapped back to the original ids through id_map.parquet."""
    src, dst = edge_rows(out)
    if not meta["remapped"]:
        return list(zip(src.tolist(), dst.tolist()))
    id_map = pq.read_table(out / "id_map.parquet")
    np.testing.assert_array_equal(id_map.column("global_nid").to_numpy(), np.arange(meta["num_nodes"]))
    original = id_map.column("original_id").to_pylist()
    return [(original[s], original[d]) for s, d in zip(src, dst)]


@pytest.mark.parametrize("delimiter", [",", "\t", " "], ids=["comma", "tab", "space"])
@pytest.mark.parametrize("header", [True, False], ids=["header", "no-header"])
def test_edgelist_delimiters_headers_comments(tmp_path, delimiter, header):
    lines = ["# written by hand", "% another comment", ""]
    if header:
        lines.append(delimiter.join(["source", "target"]))
    lines += [delimiter.join(map(str, e)) for e in EDGES]
    src = write_lines(tmp_path / "g.txt", lines)
    meta = import_edgelist(src, tmp_path / "out")
    assert meta["source"]["header"] == [header]
    assert meta["source"]["delimiter"] == [delimiter]
    assert meta["num_edges"] == len(EDGES) and meta["num_nodes"] == 4
    assert meta["remapped"] is True and meta["id_type"] == "int64"
    assert original_edges(tmp_path / "out", meta) == EDGES
    assert meta["counts"]["self_loops"] == 1 and meta["counts"]["self_loops_dropped"] == 0
    assert meta["features"] == "constant" and meta["split"] == {"kind": "none"}
    assert meta["undirected"] is False and meta["num_classes"] is None
    nodes = pq.read_table(tmp_path / "out" / "nodes").to_pydict()
    assert nodes["id"] == [0, 1, 2, 3]
    assert nodes["feat"] == [[1.0]] * 4
    assert nodes["label"] == [-1] * 4 and nodes["split"] == [-1] * 4


def test_edgelist_ragged_blanks_and_crlf(tmp_path):
    lines = ["  3   7 ", "7\t5", "5 \t 3", "", "3 3", "9      7"]
    src = write_lines(tmp_path / "g.edges", lines, newline="\r\n")
    meta = import_edgelist(src, tmp_path / "out")
    assert original_edges(tmp_path / "out", meta) == EDGES


def test_edgelist_blank_runs_across_read_chunks(tmp_path):
    # Over 1 MiB of ragged blank-separated text: runs of blanks straddle read chunks.
    rng = np.random.default_rng(7)
    edges = rng.integers(0, 5_000, size=(120_000, 2)) * 3
    pad = rng.integers(1, 4, size=(len(edges), 3))
    lines = [f"{' ' * a}{s}{' ' * b}{d}{chr(9) * c}" for (s, d), (a, b, c) in zip(edges.tolist(), pad.tolist())]
    src = write_lines(tmp_path / "big.txt", lines)
    assert src.stat().st_size > 1.5 * (1 << 20)
    meta = import_edgelist(src, tmp_path / "out", block_size=1 << 16)
    assert meta["num_edges"] == len(edges)
    id_map = pq.read_table(tmp_path / "out" / "id_map.parquet").column("original_id").to_numpy()
    src_nid, dst_nid = edge_rows(tmp_path / "out")
    np.testing.assert_array_equal(np.stack([id_map[src_nid], id_map[dst_nid]], axis=1), edges)


def test_edgelist_empty_files_are_skipped(tmp_path):
    folder = tmp_path / "parts"
    folder.mkdir()
    write_lines(folder / "a.csv", ["src,dst"])
    write_lines(folder / "b.csv", ["# nothing here"])
    write_lines(folder / "c.csv", ["src,dst", "0,1"])
    meta = import_edgelist(folder, tmp_path / "out")
    assert meta["num_edges"] == 1 and meta["num_nodes"] == 2
    with pytest.raises(InputError, match="no rows"):
        import_edgelist(folder / "b.csv", tmp_path / "out2")
    assert_no_output(tmp_path / "out2")


def test_edgelist_dense_ids_need_no_map(tmp_path):
    src = write_lines(tmp_path / "g.csv", ["0,1", "1,2", "2,0", "3,3"])
    meta = import_edgelist(src, tmp_path / "out", drop_self_loops=True, undirected=True)
    assert meta["remapped"] is False and "id_map" not in meta
    assert not (tmp_path / "out" / "id_map.parquet").exists()
    assert original_edges(tmp_path / "out", meta) == [(0, 1), (1, 2), (2, 0)]
    assert meta["num_nodes"] == 4  # node 3 only had a self-loop: still a node
    assert meta["counts"]["self_loops_dropped"] == 1 and meta["undirected"] is True


def test_edgelist_string_ids_remapped(tmp_path):
    src = write_lines(tmp_path / "g.csv", ["from,to", "alice,bob", "bob,carol", '"dave, jr",alice'])
    meta = import_edgelist(src, tmp_path / "out")
    assert meta["id_type"] == "string" and meta["remapped"] is True
    id_map = pq.read_table(tmp_path / "out" / "id_map.parquet")
    assert id_map.schema.field("global_nid").type == pa.int64()
    assert id_map.column("original_id").to_pylist() == ["alice", "bob", "carol", "dave, jr"]
    assert original_edges(tmp_path / "out", meta) == [
        ("alice", "bob"), ("bob", "carol"), ("dave, jr", "alice")
    ]


def test_edgelist_strings_after_integers_in_a_later_block(tmp_path):
    lines = [f"{i},{i + 1}" for i in range(200)] + ["x,0"]
    src = write_lines(tmp_path / "g.csv", lines)
    meta = import_edgelist(src, tmp_path / "out", block_size=256)
    assert meta["id_type"] == "string" and meta["num_edges"] == 201
    edges = original_edges(tmp_path / "out", meta)
    assert edges[0] == ("0", "1") and edges[-1] == ("x", "0")


def test_edgelist_weight_and_timestamp_columns(tmp_path):
    src = write_lines(tmp_path / "g.tsv", ["src\tdst\tweight\ttime", "0\t1\t0.5\t100", "1\t2\t2\t101"])
    meta = import_edgelist(src, tmp_path / "out")
    table = read_edges(tmp_path / "out")
    assert table.schema.field("weight").type == pa.float32()
    assert table.schema.field("ts").type == pa.int64()
    assert table.column("weight").to_pylist() == [0.5, 2.0]
    assert table.column("ts").to_pylist() == [100, 101]
    assert meta["remapped"] is False

    plain = write_lines(tmp_path / "h.txt", ["5 6 0.25", "6 7 1.5e0"])
    import_edgelist(plain, tmp_path / "out2")
    assert read_edges(tmp_path / "out2").column("weight").to_pylist() == [0.25, 1.5]


def test_edgelist_directory_glob_and_gzip(tmp_path):
    folder = tmp_path / "parts"
    folder.mkdir()
    write_lines(folder / "part-2.csv", ["src,dst", "3,4"])
    write_lines(folder / "part-10.csv", ["src,dst", "5,3"])
    with gzip.open(folder / "part-1.csv.gz", "wt") as fh:
        fh.write("src,dst\n1,2\n")
    (folder / "README.md").write_text("not an edge list\n")
    meta = import_edgelist(folder, tmp_path / "out")
    assert original_edges(tmp_path / "out", meta) == [(1, 2), (3, 4), (5, 3)]
    meta = import_edgelist(str(folder / "part-*.csv"), tmp_path / "out2")
    assert original_edges(tmp_path / "out2", meta) == [(3, 4), (5, 3)]
    assert meta["name"] == "parts"


def test_edgelist_node_table(tmp_path):
    src = write_lines(tmp_path / "g.csv", ["src,dst", "b,a", "a,c"])
    table = write_lines(tmp_path / "nodes.csv", [
        "id,kind,x,y,colour",
        "c,human,1.5,0,red",
        "a,bot,2,1,blue",
        "d,,3,4,",  # only in the table; no label
        "b,human,5,6,red",
    ])
    meta = import_edgelist(src, tmp_path / "out", node_table=table, label_column="kind", seed=3)
    assert meta["num_nodes"] == 4 and meta["num_edges"] == 2
    assert meta["features"] == "node_table" and meta["feature_columns"] == ["x", "y"]
    assert meta["counts"]["nodes_only_in_node_table"] == 1
    assert meta["num_classes"] == 2 and meta["categorical_columns"] == ["colour"]
    assert original_edges(tmp_path / "out", meta) == [("b", "a"), ("a", "c")]
    nodes = pq.read_table(tmp_path / "out" / "nodes").to_pydict()
    assert nodes["id"] == [0, 1, 2, 3]  # a, b, c, d
    assert nodes["feat"] == [[2.0, 1.0], [5.0, 6.0], [1.5, 0.0], [3.0, 4.0]]
    label_map = json.loads((tmp_path / "out" / "label_map.json").read_text())
    assert label_map["classes"] == ["bot", "human"]
    assert nodes["label"] == [0, 1, 1, -1]
    assert nodes["split"][3] == -1
    assert nodes["colour"] == ["blue", "red", "red", None]
    assert {p.name for p in (tmp_path / "out").iterdir()} == {
        "edges", "nodes", "meta.json", "id_map.parquet", "label_map.json"
    }


def test_edgelist_node_table_parquet_with_integer_ids(tmp_path):
    src = write_lines(tmp_path / "g.txt", ["1 2", "2 0"])
    pq.write_table(
        pa.table({"id": [2, 0, 1, 3], "label": [1, 0, 1, 0], "split": ["train", "val", "test", ""],
                  "f": [0.5, 1.5, 2.5, 3.5]}),
        tmp_path / "nodes.parquet",
    )
    meta = import_edgelist(src, tmp_path / "out", node_table=tmp_path / "nodes.parquet")
    assert meta["remapped"] is False and meta["split"] == {"kind": "column", "column": "split"}
    nodes = pq.read_table(tmp_path / "out" / "nodes").to_pydict()
    assert nodes["feat"] == [[1.5], [2.5], [0.5], [3.5]]
    assert nodes["label"] == [0, 1, 1, 0] and nodes["split"] == [1, 2, 0, -1]


def test_edgelist_node_missing_from_table(tmp_path):
    src = write_lines(tmp_path / "g.csv", ["src,dst", "a,b", "b,zed"])
    table = write_lines(tmp_path / "nodes.csv", ["id,f", "a,1", "b,2"])
    with pytest.raises(InputError) as info:
        import_edgelist(src, tmp_path / "out", node_table=table)
    message = str(info.value)
    assert "g.csv" in message and "'zed'" in message and "data row 2" in message
    assert_no_output(tmp_path / "out")


@pytest.mark.parametrize(
    "lines, expected",
    [
        (["src,dst", "1,2", "3"], "g.csv"),
        (["src,dst,weight", "1,2,0.5", "2,3,nan"], "weight"),
        (["src,dst", "1,", "2,3"], "empty field"),
        (["just-one-column"], "at least two columns"),
    ],
    ids=["short-row", "nan-weight", "empty-id", "one-column"],
)
def test_edgelist_bad_rows(tmp_path, lines, expected):
    src = write_lines(tmp_path / "g.csv", lines)
    with pytest.raises(InputError, match=expected):
        import_edgelist(src, tmp_path / "out")
    assert_no_output(tmp_path / "out")


# -- a small MUSAE directory and a small heterophilous npz --------------------------------
def test_musae_small_directory(tmp_path):
    folder = tmp_path / "toy"
    folder.mkdir()
    write_lines(folder / "toy_edges.csv", ["from,to", "0,1", "1,0", "1,2", "2,2"])
    write_lines(folder / "toy_target.csv", ["id,colour,target", "2,red,1", "0,blue,0", "1,red,1"])
    (folder / "toy.json").write_text(json.dumps({"0": [0, 3, 3], "1": [], "2": [1]}))
    meta = import_dataset("musae", folder, tmp_path / "out", label_column="colour")
    assert (meta["num_nodes"], meta["num_edges"], meta["feat_dim"], meta["num_classes"]) == (3, 2, 4, 2)
    assert meta["counts"]["self_loops_dropped"] == 1 and meta["counts"]["duplicates_dropped"] == 1
    assert meta["counts"]["feature_repeats_ignored"] == 1
    nodes = pq.read_table(tmp_path / "out" / "nodes").to_pydict()
    assert nodes["feat"] == [[1, 0, 0, 1], [0, 0, 0, 0], [0, 1, 0, 0]]
    assert nodes["label"] == [0, 1, 1]
    assert json.loads((folder.parent / "out" / "label_map.json").read_text())["classes"] == ["blue", "red"]
    # integer labels are kept as they are, with no label map
    meta = import_dataset("musae", folder, tmp_path / "out2")
    assert meta["label_column"] == "target" and "label_map" not in meta
    assert not (tmp_path / "out2" / "label_map.json").exists()


def write_hetero(path: Path, *, overlap: bool = False, nan: bool = False) -> Path:
    n = 6
    train = np.zeros((2, n), bool)
    val = np.zeros((2, n), bool)
    test = np.zeros((2, n), bool)
    train[:, :2], val[:, 2:4], test[:, 4:] = True, True, True
    if overlap:
        val[1, 0] = True
    feat = np.eye(n, dtype=np.float32)
    if nan:
        feat[4, 2] = np.nan
    np.savez(
        path, node_features=feat, node_labels=np.array([0, 1, 0, 1, 0, 1]),
        edges=np.array([[0, 1], [1, 0], [2, 2], [3, 4]]), train_masks=train, val_masks=val, test_masks=test,
    )
    return path


def test_hetero_small_file_dedupes_and_checks_masks(tmp_path):
    src = write_hetero(tmp_path / "toy.npz", overlap=True)
    meta = import_dataset("hetero-npz", src, tmp_path / "out")
    assert meta["num_edges"] == 2
    assert meta["counts"]["self_loops_dropped"] == 1 and meta["counts"]["duplicates_dropped"] == 1
    with pytest.raises(InputError, match=r"toy\.npz.*split 1.*'train_masks' and 'val_masks'.*node 0"):
        import_dataset("hetero-npz", src, tmp_path / "out1", split_index=1)
    assert_no_output(tmp_path / "out1")
    with pytest.raises(InputError, match=r"bad\.npz, array 'node_features'.*first node 4"):
        import_dataset("hetero-npz", write_hetero(tmp_path / "bad.npz", nan=True), tmp_path / "out2")
    assert_no_output(tmp_path / "out2")


def test_musae_ids_must_be_dense(tmp_path):
    folder = tmp_path / "toy"
    folder.mkdir()
    write_lines(folder / "toy_edges.csv", ["id_1,id_2", "0,1"])
    write_lines(folder / "toy_target.csv", ["id,page_type", "0,a", "5,b"])
    (folder / "toy.json").write_text(json.dumps({"0": [0], "1": [1]}))
    with pytest.raises(InputError, match=r"toy_target\.csv, column 'id'.*id 5 at data row 2"):
        import_dataset("musae", folder, tmp_path / "out")
    assert_no_output(tmp_path / "out")


# -- errors ------------------------------------------------------------------------------
@pytest.mark.parametrize("fmt", sorted(FORMATS))
def test_missing_source(tmp_path, fmt):
    with pytest.raises(InputNotFoundError, match="no-such-dataset"):
        import_dataset(fmt, tmp_path / "no-such-dataset", tmp_path / "out")
    assert_no_output(tmp_path / "out")


def test_unknown_format_and_option(tmp_path):
    with pytest.raises(InputError) as info:
        import_dataset("x", CORA, tmp_path / "out")
    assert str(info.value) == (
        'Unsupported format "x". Valid choices are "gnn-npz", "hetero-npz", "musae", "edgelist", "ogb".'
    )
    with pytest.raises(InputError, match='"split_index"'):
        import_dataset("gnn-npz", CORA, tmp_path / "out", split_index=1)
    with pytest.raises(InputError, match="undirected"):
        import_dataset("gnn-npz", CORA, tmp_path / "out", undirected=False)
    assert_no_output(tmp_path / "out")


@pytest.mark.parametrize("split_index", [10, -1, "2"])
def test_bad_split_index(tmp_path, datasets_dir, split_index):
    with pytest.raises(InputError, match="split_index") as info:
        import_dataset("hetero-npz", datasets_dir / "tolokers", tmp_path / "out", split_index=split_index)
    if isinstance(split_index, int):
        assert "tolokers.npz" in str(info.value) and "0..9" in str(info.value)
    assert_no_output(tmp_path / "out")


@pytest.mark.parametrize("keep", [12, 0.5], ids=["header-only", "half"])
def test_truncated_npz(tmp_path, keep):
    data = CORA.read_bytes()
    cut = keep if isinstance(keep, int) else int(len(data) * keep)
    (tmp_path / "cora.npz").write_bytes(data[:cut])
    with pytest.raises(AseprError, match="cora.npz"):
        import_dataset("gnn-npz", tmp_path / "cora.npz", tmp_path / "out")
    assert_no_output(tmp_path / "out")


def test_wrong_format_for_file(tmp_path, datasets_dir):
    with pytest.raises(SchemaError, match="adj_"):
        import_dataset("gnn-npz", datasets_dir / "squirrel", tmp_path / "out")
    assert_no_output(tmp_path / "out")


def test_existing_output_needs_overwrite(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (out / "keep.txt").write_text("mine")
    with pytest.raises(StoreError, match="--overwrite"):
        import_dataset("gnn-npz", CORA, out)
    assert (out / "keep.txt").read_text() == "mine"
    meta = import_dataset("gnn-npz", CORA, out, overwrite=True)
    assert meta["num_nodes"] == 2_708 and not (out / "keep.txt").exists()
    assert sorted(os.listdir(tmp_path)) == ["out"]
