"""The validator's decoded node table (asepr.storage.inputs.node_table)."""

from __future__ import annotations

import numpy as np
import pyarrow.parquet as pq
import pytest

import asepr.storage.inputs.node_table as node_table_module
from asepr.storage import StoreError
from asepr.storage.inputs.decoded_copy import validate_and_copy
from asepr.storage.inputs.directory import open_input
from asepr.storage.inputs.node_table import NodeTable, node_table_bytes
from tests.storage.helpers import node_table, write_input


def _shuffled_input(root, n=257, d=6, seed=3):
    """A valid input whose node shards list the ids in a random order, with labels and splits."""
    arrays = write_input(root, num_nodes=n, dim=d, node_shards=1, seed=seed)
    order = np.random.default_rng(seed).permutation(n)
    for f in (root / "nodes").iterdir():
        f.unlink()
    for i, idx in enumerate(np.array_split(order, 3)):
        pq.write_table(node_table(idx, arrays["feat"][idx], arrays["label"][idx], arrays["split"][idx]),
                       root / "nodes" / f"part-{i:05d}.parquet")
    return arrays, order


@pytest.mark.parametrize("shuffled", [False, True])
def test_table_holds_every_checked_row_by_id(tmp_path, monkeypatch, shuffled):
    # Row i of the table is node i whatever order the shards list the ids in; the row
    # order is kept (as ids) only when it is not 0..N-1; gathers of any ids, in any
    # order and across many small windows, give the input's rows.
    n, d = 257, 6
    if shuffled:
        arrays, order = _shuffled_input(tmp_path / "in", n, d)
    else:
        arrays, order = write_input(tmp_path / "in", num_nodes=n, dim=d, node_shards=3), np.arange(n)
    (tmp_path / "copy").mkdir()
    report = validate_and_copy(open_input(tmp_path / "in"), tmp_path / "copy")
    table = NodeTable(tmp_path / "copy", report.num_nodes, report.feat_dim)
    assert table.has_order == shuffled
    assert sum(f.stat().st_size for f in (tmp_path / "copy").glob("nodes.*")) == (
        node_table_bytes(n, d) + (8 * n if shuffled else 0))
    np.testing.assert_array_equal(table.rows(0, n), arrays["feat"])
    np.testing.assert_array_equal(table.rows(100, 120), arrays["feat"][100:120])
    np.testing.assert_array_equal(table.column("y"), arrays["label"])
    np.testing.assert_array_equal(table.column("split"), arrays["split"])
    np.testing.assert_array_equal(table.ids_of_rows(np.array([0, 5, 256])), order[[0, 5, 256]])
    monkeypatch.setattr(node_table_module, "WINDOW_BYTES", 3 * 4 * d)  # 3 rows of x per window
    ids = np.random.default_rng(0).choice(n, 90, replace=False)
    for pick in (np.sort(ids), ids, np.zeros(0, np.int64)):
        x, y, split = table.gather(pick)
        np.testing.assert_array_equal(x, arrays["feat"][pick])
        np.testing.assert_array_equal(y, arrays["label"][pick])
        np.testing.assert_array_equal(split, arrays["split"][pick])


def test_table_without_labels_or_splits_and_checked_sizes(tmp_path):
    # Absent label and split columns read as -1; a truncated file is refused by name;
    # an existing table is never overwritten.
    feat = np.arange(40, dtype=np.float32).reshape(10, 4)
    write_input(tmp_path / "in", num_nodes=10, dim=4)
    for f in (tmp_path / "in" / "nodes").iterdir():
        f.unlink()
    pq.write_table(node_table(np.arange(10), feat), tmp_path / "in" / "nodes" / "part-00000.parquet")
    (tmp_path / "copy").mkdir()
    report = validate_and_copy(open_input(tmp_path / "in"), tmp_path / "copy")
    table = NodeTable(tmp_path / "copy", 10, report.feat_dim)
    assert (table.column("y") == -1).all() and (table.column("split") == -1).all()
    np.testing.assert_array_equal(table.gather(np.array([9, 2]))[0], feat[[9, 2]])
    x_path = tmp_path / "copy" / "nodes.x"
    x_path.write_bytes(x_path.read_bytes()[:-4])
    with pytest.raises(StoreError, match=r"nodes\.x.*160 bytes"):
        NodeTable(tmp_path / "copy", 10, 4)
    with pytest.raises(FileExistsError):
        validate_and_copy(open_input(tmp_path / "in"), tmp_path / "copy")


def test_table_switches_from_direct_writes_to_page_cache_writes(tmp_path):
    # In-order runs are appended with O_DIRECT (asepr.storage.locations.direct_io); a run that does not
    # continue where the last one ended, then shuffled ids, go through the page cache.
    # The table is the same: row i is node i, whole blocks and unaligned tails alike.
    n, d = 257, 64  # x rows of 256 B: several 4 KiB blocks per shard
    arrays = write_input(tmp_path / "in", num_nodes=n, dim=d, node_shards=1, seed=5)
    for f in (tmp_path / "in" / "nodes").iterdir():
        f.unlink()
    # The first run ends on a block boundary for x (128 rows of 256 B), not for y and split.
    shuffled = np.random.default_rng(5).permutation(np.arange(128, 150))
    for i, idx in enumerate((np.arange(0, 128), np.arange(150, n), shuffled)):
        pq.write_table(node_table(idx, arrays["feat"][idx], arrays["label"][idx], arrays["split"][idx]),
                       tmp_path / "in" / "nodes" / f"part-{i:05d}.parquet")
    (tmp_path / "copy").mkdir()
    report = validate_and_copy(open_input(tmp_path / "in"), tmp_path / "copy")
    table = NodeTable(tmp_path / "copy", n, report.feat_dim)
    np.testing.assert_array_equal(table.rows(0, n), arrays["feat"])
    np.testing.assert_array_equal(table.column("y"), arrays["label"])
    np.testing.assert_array_equal(table.column("split"), arrays["split"])
    np.testing.assert_array_equal(table.ids_of_rows(np.arange(n)),
                                  np.concatenate([np.arange(0, 128), np.arange(150, n), shuffled]))
