"""The streaming validator: valid inputs in every layout, and malformed inputs."""

from __future__ import annotations

import shutil
from pathlib import Path

import fsspec
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from asepr.storage import (
    AseprError,
    InputError,
    InputNotFoundError,
    SchemaError,
    validate_input,
)
from tests.storage.helpers import claim_rows, edge_table, node_table, write_input
from asepr.workflows.cli import main


def _expected_duplicates(src, dst, undirected):
    seen, dups = set(), 0
    for u, v in zip(src.tolist(), dst.tolist()):
        key = (min(u, v), max(u, v)) if undirected else (u, v)
        dups += key in seen
        seen.add(key)
    return dups


@pytest.mark.parametrize("layout", ["fixed", "list", "columns"])
@pytest.mark.parametrize("undirected", [False, True])
def test_valid_input_counts(tmp_path, layout, undirected):
    data = write_input(tmp_path / "in", layout=layout)
    report = validate_input(tmp_path / "in", undirected=undirected, batch_rows=17)
    assert report.num_nodes == 60 and report.num_edges == 300 and report.feat_dim == 5
    assert report.feature_layout == layout
    assert report.self_loops == int(np.count_nonzero(data["src"] == data["dst"]))
    assert report.duplicate_edges == _expected_duplicates(data["src"], data["dst"], undirected)
    labels = data["label"]
    assert report.labelled_nodes == int(np.count_nonzero(labels >= 0))
    assert report.label_counts == np.bincount(labels[labels >= 0]).tolist()
    assert report.split_counts["train"] == int(np.count_nonzero(data["split"] == 0))
    assert report.split_counts["none"] == int(np.count_nonzero(data["split"] == -1))
    degree = np.bincount(data["src"], minlength=60) + np.bincount(data["dst"], minlength=60)
    assert report.isolated_nodes == int(np.count_nonzero(degree == 0))
    assert report.max_degree == int(degree.max())
    assert len(report.edge_shards) == 3 and sum(s.rows for s in report.edge_shards) == 300
    assert len({s.sha256 for s in report.edge_shards + report.node_shards}) == 5


def test_duplicate_counter_spills_many_buckets(tmp_path, monkeypatch):
    data = write_input(tmp_path / "in", num_nodes=30, num_edges=2000)
    from asepr.storage.inputs import dedup
    original = dedup.EdgeDedup.__init__

    def small_buckets(self, *args, **kwargs):
        kwargs["bucket_rows"] = 64
        original(self, *args, **kwargs)

    monkeypatch.setattr(dedup.EdgeDedup, "__init__", small_buckets)
    report = validate_input(tmp_path / "in", batch_rows=100)
    assert report.duplicate_edges == _expected_duplicates(data["src"], data["dst"], False)


def test_fsspec_urls_glob_and_memory(tmp_path):
    write_input(tmp_path / "in")
    by_url = validate_input(f"file://{tmp_path / 'in'}")
    by_glob = validate_input(
        edges=str(tmp_path / "in" / "edges" / "part-*.parquet"), nodes=str(tmp_path / "in" / "nodes")
    )
    assert by_url.num_edges == by_glob.num_edges == 300
    fs = fsspec.filesystem("memory")
    for sub in ("edges", "nodes"):
        for f in sorted((tmp_path / "in" / sub).iterdir()):
            fs.pipe(f"/vt/in/{sub}/{f.name}", f.read_bytes())
    in_memory = validate_input("memory://vt/in")
    assert in_memory.num_edges == 300 and in_memory.duplicate_edges == by_url.duplicate_edges
    assert in_memory.edge_shards[0].url.startswith("memory://")
    fs.rm("/vt", recursive=True)


def test_empty_shard_is_reported_not_fatal(tmp_path):
    write_input(tmp_path / "in")
    pq.write_table(edge_table([], []), tmp_path / "in" / "edges" / "part-00009.parquet")
    report = validate_input(tmp_path / "in")
    assert report.num_edges == 300
    assert any("part-00009.parquet" in w and "empty" in w for w in report.warnings)


def test_decoded_writer_round_trips_many_blocks_in_stream_order(tmp_path):
    # Shards of many 4 KiB blocks and unaligned tails, empty shards between them, read
    # back in batches that cut across blocks; batches out of stream order are refused.
    from asepr.storage.inputs.decoded import DecodedWriter, decoded_shards, read_decoded
    from asepr.storage.locations.fs import Shard

    rng = np.random.default_rng(0)
    sizes = [10_007, 0, 3, 4096, 0]
    columns = [(rng.integers(0, 1 << 30, m), rng.integers(0, 1 << 30, m)) for m in sizes]
    writer = DecodedWriter(tmp_path, len(sizes), num_nodes=1 << 30)
    for index, (src, dst) in enumerate(columns):
        for lo in range(0, len(src), 999):
            writer.add(index, src[lo:lo + 999], dst[lo:lo + 999])
    with pytest.raises(ValueError, match="out of stream order"):
        writer.add(1, columns[1][0], columns[1][1])
    writer.close()
    shards = decoded_shards([Shard(fs=None, path=f"e{i}", url=f"e{i}", size=0) for i in range(len(sizes))],
                            sizes, tmp_path, num_nodes=1 << 30)
    for shard, (src, dst) in zip(shards, columns):
        batches = list(read_decoded(shard, batch_rows=1500))
        assert [b[0] for b in batches] == list(range(0, len(src), 1500))
        got_src = np.concatenate([b[1] for b in batches]) if batches else np.zeros(0, np.int64)
        got_dst = np.concatenate([b[2] for b in batches]) if batches else np.zeros(0, np.int64)
        assert got_src.dtype == np.int64
        np.testing.assert_array_equal(got_src, src)
        np.testing.assert_array_equal(got_dst, dst)


# --- malformed inputs -------------------------------------------------------------
# Each case corrupts a valid input and names what the message must mention.

def _replace_edges(root: Path, table: pa.Table, name="part-00001.parquet"):
    pq.write_table(table, root / "edges" / name)


def _replace_nodes(root: Path, table: pa.Table, name="part-00001.parquet"):
    pq.write_table(table, root / "nodes" / name)


def _wrong_dtype(root):
    _replace_edges(root, pa.table({"src": pa.array([0.0, 1.0]), "dst": pa.array([1, 2])}))
    return SchemaError, ["edges/part-00001.parquet", "'src'", "int64", "double"]


def _negative_id(root):
    _replace_edges(root, edge_table([0, -4, 3], [1, 2, 3]))
    return InputError, ["edges/part-00001.parquet", "'src'", "row 1", "-4"]


def _id_too_large(root):
    _replace_edges(root, edge_table([0, 1, 3], [1, 60, 3]))
    return InputError, ["edges/part-00001.parquet", "'dst'", "60", "[0, 60)"]


def _nan_feature(root):
    feat = np.ones((30, 5), np.float32)
    feat[4, 2] = np.nan
    _replace_nodes(root, node_table(np.arange(30, 60), feat, np.zeros(30), np.zeros(30)))
    return InputError, ["nodes/part-00001.parquet", "NaN", "row 4", "node id 34"]


def _width_changes(root):
    _replace_nodes(root, node_table(np.arange(30, 60), np.ones((30, 6)), np.zeros(30), np.zeros(30)))
    return InputError, ["nodes/part-00001.parquet", "width 5", "width 6"]


def _label_out_of_range(root):
    label = np.zeros(30)
    label[7] = 3
    _replace_nodes(root, node_table(np.arange(30, 60), np.ones((30, 5)), label, np.zeros(30)))
    return InputError, ["nodes/part-00001.parquet", "'label'", "[-1, 3)", "row 7"]


def _missing_column(root):
    _replace_edges(root, pa.table({"src": pa.array([0, 1], pa.int64())}))
    return SchemaError, ["edges/part-00001.parquet", "'dst'"]


def _truncated_parquet(root):
    path = root / "edges" / "part-00001.parquet"
    path.write_bytes(path.read_bytes()[:-40])
    return InputError, ["edges/part-00001.parquet", "Parquet", "truncated"]


def _empty_directory(root):
    shutil.rmtree(root / "edges")
    (root / "edges").mkdir()
    return InputNotFoundError, ["edges", "empty directory"]


def _missing_path(root):
    shutil.rmtree(root / "nodes")
    return InputNotFoundError, ["nodes", "nothing at that path"]


def _duplicate_shard(root):
    shutil.copy(root / "edges" / "part-00001.parquet", root / "edges" / "part-00005.parquet")
    return InputError, ["part-00005.parquet", "part-00001.parquet", "same content"]


def _node_missing(root):
    # Node 45 has no row; a surplus id 60 takes its place so the row count stays N.
    ids = np.arange(30, 60)
    ids[15] = 61
    _replace_nodes(root, node_table(ids, np.ones((30, 5)), np.zeros(30), np.zeros(30)))
    return InputError, ["nodes/part-00001.parquet", "'id'", "61", "dense"]


def _node_row_dropped(root):
    ids = np.delete(np.arange(30, 60), 3)
    _replace_nodes(root, node_table(ids, np.ones((29, 5)), np.zeros(29), np.zeros(29)))
    return InputError, ["meta.json", "num_nodes", "60", "59"]


def _duplicate_node_id(root):
    ids = np.arange(30, 60)
    ids[9] = 31
    _replace_nodes(root, node_table(ids, np.ones((30, 5)), np.zeros(30), np.zeros(30)))
    return InputError, ["nodes/part-00001.parquet", "'id'", "exactly once", "31"]


def _bad_split(root):
    split = np.zeros(30)
    split[2] = 5
    _replace_nodes(root, node_table(np.arange(30, 60), np.ones((30, 5)), np.zeros(30), split))
    return InputError, ["nodes/part-00001.parquet", "'split'", "row 2", "5"]


def _null_id(root):
    _replace_edges(root, pa.table({"src": pa.array([0, None, 2], pa.int64()), "dst": pa.array([1, 2, 3], pa.int64())}))
    return InputError, ["edges/part-00001.parquet", "'src'", "null"]


def _inf_weight(root):
    for name in ("part-00000.parquet", "part-00002.parquet"):
        _replace_edges(root, edge_table([0], [int(name[-9]) + 1], weight=np.array([1.0], np.float32)), name)
    _replace_edges(root, edge_table([0, 1], [1, 2], weight=np.array([1.0, np.inf], np.float32)))
    return InputError, ["edges/part-00001.parquet", "'weight'", "finite", "row 1"]


def _varying_list_lengths(root):
    feat = pa.array([[1.0] * 5] * 29 + [[1.0] * 4], type=pa.list_(pa.float32()))
    table = pa.table({"id": pa.array(np.arange(30, 60)), "feat": feat})
    _replace_nodes(root, table)
    return InputError, ["nodes/part-00001.parquet", "'feat'", "vary from 4 to 5"]


def _feature_column_gap(root):
    table = pa.table({"id": pa.array(np.arange(30, 60)), "f0": pa.array(np.ones(30, np.float32)),
                      "f2": pa.array(np.ones(30, np.float32))})
    _replace_nodes(root, table)
    return SchemaError, ["nodes/part-00001.parquet", "f1"]


def _edge_node_without_row(root):
    # Node table of 59 rows (ids 0..58) without meta: an edge naming 59 has no row.
    ids = np.arange(30, 59)
    _replace_nodes(root, node_table(ids, np.ones((29, 5)), np.zeros(29), np.zeros(29)))
    for name in ("part-00000.parquet", "part-00002.parquet"):
        _replace_edges(root, edge_table([0], [int(name[-9]) + 1]), name)
    _replace_edges(root, edge_table([0, 59], [1, 2]))
    return InputError, ["edges/part-00001.parquet", "'src'", "59", "node row"]


MALFORMED = {
    "wrong-dtype": (_wrong_dtype, False),
    "negative-id": (_negative_id, False),
    "id-too-large": (_id_too_large, False),
    "nan-feature": (_nan_feature, False),
    "width-changes": (_width_changes, False),
    "label-out-of-range": (_label_out_of_range, True),
    "missing-column": (_missing_column, False),
    "truncated-parquet": (_truncated_parquet, False),
    "empty-directory": (_empty_directory, False),
    "missing-path": (_missing_path, False),
    "duplicate-shard": (_duplicate_shard, False),
    "node-missing": (_node_missing, False),
    "node-row-dropped": (_node_row_dropped, True),
    "duplicate-node-id": (_duplicate_node_id, False),
    "bad-split": (_bad_split, False),
    "null-id": (_null_id, False),
    "inf-weight": (_inf_weight, False),
    "varying-list-lengths": (_varying_list_lengths, False),
    "feature-column-gap": (_feature_column_gap, False),
    "edge-node-without-row": (_edge_node_without_row, False),
}


def test_a_node_error_wins_over_an_edge_error_found_beside_it(tmp_path):
    # The node and edge passes run side by side; with a bad node row and a bad edge, the
    # node problem is reported, as when the passes ran one after the other; the edge
    # problem alone is reported too.
    root = tmp_path / "in"
    write_input(root)
    _, edge_needles = _id_too_large(root)
    with pytest.raises(InputError) as err:
        validate_input(root)
    assert all(n in str(err.value) for n in edge_needles)
    _, node_needles = _nan_feature(root)
    with pytest.raises(InputError) as err:
        validate_input(root)
    assert all(n in str(err.value) for n in node_needles) and "'dst'" not in str(err.value)


@pytest.mark.parametrize("case", sorted(MALFORMED))
def test_malformed_input_is_rejected(tmp_path, case, capsys):
    corrupt, with_meta = MALFORMED[case]
    root = tmp_path / "in"
    write_input(root, meta={"num_nodes": 60} if with_meta else None)
    error, needles = corrupt(root)
    with pytest.raises(error) as info:
        validate_input(root)
    assert isinstance(info.value, AseprError)
    for needle in needles:
        assert needle in str(info.value), (needle, str(info.value))

    # The CLI exits non-zero with the same message on stderr.
    assert main(["validate", str(root)]) == 1
    err = capsys.readouterr().err
    assert needles[0] in err and "error" in err


def test_error_classes_derive_from_builtins():
    assert issubclass(SchemaError, ValueError)
    assert issubclass(InputError, ValueError)
    assert issubclass(InputNotFoundError, FileNotFoundError)
    with pytest.raises(FileNotFoundError):
        validate_input("/nonexistent/asepr/input")


def test_identical_empty_shards_are_legal(tmp_path):
    write_input(tmp_path / "in")
    for name in ("part-00007.parquet", "part-00008.parquet"):
        pq.write_table(edge_table([], []), tmp_path / "in" / "edges" / name)
    report = validate_input(tmp_path / "in")
    assert report.num_edges == 300
    assert sum("empty shard" in w for w in report.warnings) == 2


def test_two_zero_byte_files_are_truncated_not_copies(tmp_path):
    write_input(tmp_path / "in")
    for name in ("part-00007.parquet", "part-00008.parquet"):
        (tmp_path / "in" / "edges" / name).write_bytes(b"")
    with pytest.raises(InputError, match="truncated"):
        validate_input(tmp_path / "in")


def test_a_footer_that_claims_more_rows_than_its_row_groups_is_refused(tmp_path, capsys):
    # A footer claiming 2**40 rows over one row group of 100 once passed validation and
    # made ingest size its output by the claim.
    write_input(tmp_path / "in")
    shard = tmp_path / "in" / "edges" / "part-00001.parquet"
    claim_rows(shard, 1 << 40)
    expected = [str(shard), "1,099,511,627,776", "100 rows in its 1 row group(s)", "re-export"]
    with pytest.raises(InputError) as info:
        validate_input(tmp_path / "in")
    assert all(s in str(info.value) for s in expected)
    assert main(["validate", str(tmp_path / "in")]) == 1
    err = capsys.readouterr().err
    assert all(s in err for s in expected) and "Traceback" not in err

    from asepr.storage.integrity.validate_increment import validate_increment
    from asepr.storage.locations.fs import discover_shards

    with pytest.raises(InputError, match=r"1,099,511,627,776.*100 rows in its 1 row group"):
        validate_increment(discover_shards(str(shard)), [], num_nodes=60, feat_dim=5)


def test_a_footer_whose_row_group_claims_rows_the_pages_lack_is_refused(tmp_path):
    write_input(tmp_path / "in")
    shard = tmp_path / "in" / "nodes" / "part-00000.parquet"
    claim_rows(shard, 31, row_group_too=True)  # the pages hold 30 rows
    with pytest.raises(InputError, match=rf"{shard}, Parquet footer.*\(31\).*30 rows decoded.*re-export"):
        validate_input(tmp_path / "in")
