"""Stage ②: exact degrees by a Dask map + tree-sum over edge shards."""

from __future__ import annotations

import itertools
import tempfile
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from asepr.pipeline.dask_ops import tree_reduce
from asepr.pipeline.stages.degrees import Degrees, compute_degrees
from asepr.storage.errors import InputError
from asepr.storage.locations.fs import discover_shards
from tests.storage.helpers import edge_table, write_input


def _reference(src: np.ndarray, dst: np.ndarray, num_nodes: int) -> np.ndarray:
    return np.bincount(np.concatenate([src, dst]), minlength=num_nodes).astype(np.int64)


def _write_edges(root: Path, src, dst, cuts: list[int]) -> list:
    (root / "edges").mkdir(parents=True)
    bounds = [0, *cuts, len(src)]
    for i, (a, b) in enumerate(itertools.pairwise(bounds)):
        pq.write_table(edge_table(src[a:b], dst[a:b]), root / "edges" / f"part-{i:05d}.parquet")
    return discover_shards(root / "edges")


@pytest.mark.parametrize("num_shards", [1, 8])
@pytest.mark.parametrize("batch_rows", [1 << 20, 7])
def test_degrees_match_bincount(tmp_path, num_shards, batch_rows):
    arrays = write_input(tmp_path, num_nodes=80, num_edges=500, edge_shards=num_shards)
    shards = discover_shards(tmp_path / "edges")
    assert len(shards) == num_shards
    result = compute_degrees(shards, 80, batch_rows=batch_rows)
    assert isinstance(result, Degrees)
    assert result.num_nodes == 80 and result.num_edges == 500
    assert result.degree.dtype == np.int64 and result.degree.shape == (80,)
    np.testing.assert_array_equal(result.degree, _reference(arrays["src"], arrays["dst"], 80))
    assert result.degree.sum() == 2 * 500


def test_self_loop_counts_two_and_isolated_nodes_zero(tmp_path):
    shards = _write_edges(tmp_path, np.array([0, 1, 3]), np.array([0, 2, 3]), [1])
    result = compute_degrees(shards, 6)
    np.testing.assert_array_equal(result.degree, [2, 1, 1, 2, 0, 0])
    assert result.num_edges == 3


def test_distributed_client_gives_the_same_degrees(tmp_path, client):
    arrays = write_input(tmp_path, num_nodes=100, num_edges=1000, edge_shards=5)
    shards = discover_shards(tmp_path / "edges")
    local = compute_degrees(shards, 100)
    remote = compute_degrees(shards, 100, client=client)
    np.testing.assert_array_equal(remote.degree, local.degree)
    assert remote.num_edges == local.num_edges == 1000
    np.testing.assert_array_equal(remote.degree, _reference(arrays["src"], arrays["dst"], 100))


def test_no_shards_and_empty_shards(tmp_path):
    assert compute_degrees([], 4).degree.tolist() == [0, 0, 0, 0]
    shards = _write_edges(tmp_path, np.array([1, 2]), np.array([2, 3]), [0, 0, 2])
    result = compute_degrees(shards, 4)
    assert result.degree.tolist() == [0, 1, 2, 1] and result.num_edges == 2


def test_out_of_range_id_names_the_file(tmp_path):
    shards = _write_edges(tmp_path, np.array([0, 1]), np.array([1, 9]), [1])
    with pytest.raises(InputError, match=r"part-00001\.parquet.*'dst'.*\[0, 5\)"):
        compute_degrees(shards, 5)


def test_bad_arguments():
    with pytest.raises(InputError, match="num_nodes"):
        compute_degrees([], -1)
    with pytest.raises(InputError, match="batch_rows"):
        compute_degrees([], 3, batch_rows=0)


def test_tree_reduce_is_pairwise_and_ordered():
    import dask

    calls = []

    def combine(a, b):
        calls.append((a, b))
        return a + b

    parts = [dask.delayed(x) for x in ["a", "b", "c", "d", "e"]]
    (result,) = dask.compute(tree_reduce(parts, combine, "t"), scheduler="sync")
    assert result == "abcde"
    assert max(len(a) + len(b) for a, b in calls) == 5
    assert len(calls) == 4


@settings(deadline=None, max_examples=25)
@given(
    num_nodes=st.integers(1, 40),
    data=st.data(),
)
def test_degrees_property(num_nodes, data):
    num_edges = data.draw(st.integers(0, 120))
    src = np.array(
        data.draw(st.lists(st.integers(0, num_nodes - 1), min_size=num_edges, max_size=num_edges)),
        dtype=np.int64,
    )
    dst = np.array(
        data.draw(st.lists(st.integers(0, num_nodes - 1), min_size=num_edges, max_size=num_edges)),
        dtype=np.int64,
    )
    cuts = sorted(data.draw(st.lists(st.integers(0, num_edges), max_size=6)))
    batch_rows = data.draw(st.integers(1, 64))
    with tempfile.TemporaryDirectory() as tmp:
        shards = _write_edges(Path(tmp), src, dst, cuts)
        result = compute_degrees(shards, num_nodes, batch_rows=batch_rows)
    np.testing.assert_array_equal(result.degree, _reference(src, dst, num_nodes))
    assert result.num_edges == num_edges


def test_the_validators_degrees_are_the_stages_and_stay_out_of_the_json(tmp_path):
    """partition() reuses the validator's count instead of a second pass: same rule, same vector."""
    import json

    from asepr.storage.integrity.validate import validate_input

    write_input(tmp_path, num_nodes=90, num_edges=700, edge_shards=3)
    report = validate_input(tmp_path, check_duplicates=False)
    stage = compute_degrees(discover_shards(tmp_path / "edges"), 90)
    assert report.degree is not None and report.degree.dtype == np.int64
    np.testing.assert_array_equal(report.degree, stage.degree)
    assert "degree" not in report.to_dict()
    json.dumps(report.to_dict())
