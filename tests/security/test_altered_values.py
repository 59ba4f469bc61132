"""A chunk rewritten with a valid CRC is still refused by every reader when it breaks the
layout: an edge to a node the store does not hold, a CSR whose offsets run backwards, a
split or feature the format excludes.

Each test rewrites one value through zarr itself, so zarr's crc32c codec stores the CRC
of the new chunk and the chunk reads back as sound; only the store's content digests
(which ``asepr verify`` checks, and a reader does not) still know better.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest
import zarr

from asepr.pipeline.config import PartitionConfig
from asepr.pipeline.partition_run import partition_to_store
from asepr.pipeline.verify import verify_output
from asepr.storage.errors import StoreError
from asepr.storage.partitions.output_stores import open_partition
from asepr.storage.partitions.store import open_store
from asepr.training.graph.data import load_local_graph

torch = pytest.importorskip("torch")


@pytest.fixture(scope="module")
def committed(synth_input, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("altered") / "out"
    partition_to_store(synth_input, out, PartitionConfig(num_parts=2, algo="dbh"))
    return out


@pytest.fixture
def out(committed, tmp_path) -> Path:
    path = tmp_path / "out"
    shutil.copytree(committed, path)
    return path


def _rewrite(out: Path, name: str, row: int, value) -> None:
    """Set one value of partition 0's array ``name`` through zarr (its chunk's CRC recomputed)."""
    group = zarr.open_group(str(out / "part-00000.zarr"), mode="r+")
    array = group[name]
    if array.ndim == 2:
        array[row, 0] = value
    else:
        array[row] = value


def _middle_row(out: Path, name: str) -> int:
    return len(open_store(out / "part-00000.zarr")[name]) // 2


CASES = {
    "an edge to node 10^9": ("edges/indices", 10**9, "destination rows (part-local node ids) in [0,"),
    "a negative edge id": ("edges/indices", -3, "destination rows (part-local node ids) in [0,"),
    "offsets that run backwards": ("edges/indptr", 0, "row offsets that never decrease"),
    "an infinite feature": ("nodes/x", np.inf, "finite features"),
    "a NaN feature": ("nodes/x", np.nan, "finite features"),
    "a split of 7": ("nodes/split", 7, "a split of -1 (none)"),
    "a label of -5": ("nodes/y", -5, "labels >= -1"),
    "node ids out of order": ("nodes/global_nid", 0, "node ids in strictly increasing order"),
}


@pytest.mark.parametrize("case", list(CASES))
def test_a_value_the_layout_excludes_is_refused_by_the_readers(out, case):
    name, value, expected = CASES[case]
    row = _middle_row(out, name)
    _rewrite(out, name, row, value)
    store = open_partition(out, 0)  # the chunk's CRC matches: opening succeeds
    with pytest.raises(StoreError) as read:
        store.to_numpy()
    message = str(read.value)
    assert f"partition 0 ({out / 'part-00000.zarr'}), array {name}" in message
    assert f"row {row}" in message and expected in message and "asepr verify" in message
    with pytest.raises(StoreError, match=f"array {name}"):
        load_local_graph(out, [0])
    assert open_partition(out, 1).to_numpy()  # the other partition is untouched
    report = verify_output(out)
    assert not report.ok and f"checksum mismatch: array {name} has content sha256" in report.summary()


def test_the_pyg_adapter_refuses_an_altered_chunk(out):
    pyg_store = pytest.importorskip("asepr.training.graph.pyg_store")
    row = _middle_row(out, "edges/indices")
    _rewrite(out, "edges/indices", row, 10**9)
    _rewrite(out, "nodes/x", 3, np.inf)
    features, graph = pyg_store.open_pyg_stores(out, 0)
    with pytest.raises(StoreError, match="finite features"):
        features["x", torch.arange(8)]
    with pytest.raises(StoreError, match=f"array edges/indices, .*row {row}"):
        graph.get_edge_index(layout="coo")


def test_offsets_that_do_not_end_at_the_edge_count_are_refused(out):
    indptr = open_store(out / "part-00000.zarr")["edges/indptr"]
    last = len(indptr) - 1
    _rewrite(out, "edges/indptr", last, int(np.asarray(indptr)[last]) - 1)
    with pytest.raises(StoreError, match=f"row {last}: expected row offsets that end at the edge count"):
        open_partition(out, 0).indptr[...]


def test_a_node_id_beyond_the_output_is_refused(out):
    gid = open_store(out / "part-00000.zarr")["nodes/global_nid"]
    last = len(gid) - 1
    _rewrite(out, "nodes/global_nid", last, 10**12)
    with pytest.raises(StoreError, match=r"node ids in \[0, 2000\)"):
        open_partition(out, 0).global_nid[...]


def test_an_array_with_a_row_too_many_is_refused_when_opened(out):
    group = zarr.open_group(str(out / "part-00000.zarr"), mode="r+")
    split = group["nodes/split"]
    split.resize((split.shape[0] + 1,))
    with pytest.raises(StoreError, match=r"array nodes/split: expected \d+ rows"):
        open_partition(out, 0)
