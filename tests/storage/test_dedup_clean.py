"""Out-of-core duplicate detection and the clean step."""

from __future__ import annotations

import json

import numpy as np
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from asepr.storage import EdgeDedup, InputError, validate_input
from asepr.storage.inputs.clean import clean_input
from tests.storage.helpers import write_input
from asepr.workflows.cli import main


def _reference_duplicate_positions(src, dst, undirected):
    seen, out = set(), []
    for i, (u, v) in enumerate(zip(src.tolist(), dst.tolist())):
        key = (min(u, v), max(u, v)) if undirected else (u, v)
        if key in seen:
            out.append(i)
        seen.add(key)
    return out


@settings(deadline=None, max_examples=60)
@given(
    edges=st.lists(st.tuples(st.integers(0, 12), st.integers(0, 12)), max_size=300),
    undirected=st.booleans(),
    bucket_rows=st.integers(1, 64),
    batch=st.integers(1, 50),
)
def test_duplicate_positions_match_reference(edges, undirected, bucket_rows, batch):
    src = np.array([e[0] for e in edges], dtype=np.int64)
    dst = np.array([e[1] for e in edges], dtype=np.int64)
    with EdgeDedup(13, len(edges), undirected=undirected, bucket_rows=bucket_rows) as dedup:
        for lo in range(0, len(edges), batch):
            hi = min(lo + batch, len(edges))
            dedup.add(src[lo:hi], dst[lo:hi], np.arange(lo, hi))
        found = sorted(np.concatenate(list(dedup.duplicate_positions()) or [np.zeros(0, int)]).tolist())
    assert found == _reference_duplicate_positions(src, dst, undirected)


@pytest.mark.parametrize("undirected", [False, True])
def test_clean_drops_exactly_loops_and_duplicates_in_order(tmp_path, undirected):
    data = write_input(tmp_path / "in", num_nodes=25, num_edges=400, meta={"undirected": undirected})
    meta = clean_input(tmp_path / "in", tmp_path / "out")
    src, dst = data["src"], data["dst"]
    dup = set(_reference_duplicate_positions(src, dst, undirected))
    keep = [i for i in range(len(src)) if i not in dup and src[i] != dst[i]]
    table = pq.read_table(tmp_path / "out" / "edges")
    assert table["src"].to_numpy().tolist() == src[keep].tolist()
    assert table["dst"].to_numpy().tolist() == dst[keep].tolist()
    assert meta["clean"]["duplicates_dropped"] == len(dup)
    assert meta["clean"]["self_loops_dropped"] == len(src) - len(dup) - len(keep)
    report = validate_input(tmp_path / "out")
    assert report.self_loops == 0 and report.duplicate_edges == 0
    assert report.num_nodes == 25
    nodes_in = pq.read_table(tmp_path / "in" / "nodes").sort_by("id")
    nodes_out = pq.read_table(tmp_path / "out" / "nodes").sort_by("id")
    assert nodes_in.equals(nodes_out)
    assert json.loads((tmp_path / "out" / "meta.json").read_text())["num_edges"] == len(keep)


def test_clean_only_self_loops_keeps_duplicates(tmp_path):
    data = write_input(tmp_path / "in", num_nodes=10, num_edges=200)
    meta = clean_input(tmp_path / "in", tmp_path / "out", drop_duplicates=False)
    assert meta["num_edges"] == int(np.count_nonzero(data["src"] != data["dst"]))
    assert validate_input(tmp_path / "out").duplicate_edges > 0


def test_clean_refuses_bad_input_and_leaves_no_output(tmp_path, capsys):
    write_input(tmp_path / "in")
    (tmp_path / "in" / "edges" / "part-00001.parquet").write_bytes(b"PAR1 not really")
    assert main(["clean", str(tmp_path / "in"), str(tmp_path / "out"), "--drop-duplicates"]) == 1
    assert "part-00001.parquet" in capsys.readouterr().err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in"]


def test_clean_needs_something_to_drop(tmp_path):
    write_input(tmp_path / "in")
    with pytest.raises(InputError, match="nothing to do"):
        clean_input(tmp_path / "in", tmp_path / "out", drop_self_loops=False, drop_duplicates=False)


def test_clean_that_empties_shards_still_commits(tmp_path):
    # Shards 1 and 2 only repeat shard 0's edge (undirected): both end up empty.
    import pyarrow.parquet as pq

    from tests.storage.helpers import edge_table, node_table

    root = tmp_path / "in"
    (root / "edges").mkdir(parents=True)
    (root / "nodes").mkdir()
    pq.write_table(edge_table([0, 1], [1, 2]), root / "edges" / "part-00000.parquet")
    pq.write_table(edge_table([1], [0]), root / "edges" / "part-00001.parquet")
    pq.write_table(edge_table([2, 1], [1, 0]), root / "edges" / "part-00002.parquet")
    pq.write_table(node_table(np.arange(3), np.ones((3, 2)), np.zeros(3), np.zeros(3)),
                   root / "nodes" / "part-00000.parquet")
    (root / "meta.json").write_text(json.dumps({"undirected": True, "num_classes": 1}))
    meta = clean_input(root, tmp_path / "out")
    assert meta["num_edges"] == 2 and meta["clean"]["duplicates_dropped"] == 3
