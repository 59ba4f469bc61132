"""Checks of parallel.py (W simulated assignment streams merged every B edges).

The simulation is a results script, not part of the package, so its checks are not
in the default suite: ``python -m pytest docs/results/parallel-streams/test_parallel.py``
from the project root.
"""

from __future__ import annotations

import math
import tempfile
from pathlib import Path

import fsspec
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from parallel import (
    iter_epochs,
    iter_share,
    replay_state,
    simulate_parallel_streams,
    stream_shares,
)

from asepr.pipeline import PartitionConfig, partition, replica_sets
from asepr.pipeline.assign import MODES, AssignState, KernelSettings, assign_batch
from asepr.pipeline.assign.kernel import KernelArgs
from asepr.pipeline.assign.state import PDEG
from asepr.pipeline.stream import iter_edge_batches
from asepr.storage import InputError
from asepr.storage.inputs.directory import open_input
from asepr.storage.locations.fs import Shard
from tests.pipeline.conftest import SYNTH_EDGES as M  # the `inputs` fixture's graph
from tests.pipeline.conftest import SYNTH_NODES as N


def _run(edge_shards, state, kernel, streams, sync_edges, batch_rows=256):
    """Simulate; returns the result and the partition of every edge in stream order (-1: none)."""
    rows = [pq.ParquetFile(s.open()).metadata.num_rows for s in edge_shards]
    offsets = np.concatenate([[0], np.cumsum(rows)])
    parts = np.full(offsets[-1], -1, dtype=np.int64)
    hits = np.zeros(offsets[-1], dtype=np.int64)
    owner = np.full(offsets[-1], -1, dtype=np.int64)

    def observe(stream, piece, out):
        lo = offsets[piece.shard_index] + piece.row0
        parts[lo : lo + len(out)] = out
        hits[lo : lo + len(out)] += 1
        owner[lo : lo + len(out)] = stream

    result = simulate_parallel_streams(edge_shards, state, kernel, streams, sync_edges, batch_rows=batch_rows,
                                       observe=observe)
    assert hits.tolist() == [1] * len(hits), "every edge assigned exactly once"
    return result, parts, owner


def open_edge_shards(path):
    return open_input(path).edge_shards


def _stream_edges(edge_shards):
    batches = list(iter_edge_batches(edge_shards, 1 << 20))
    return (np.concatenate([b.src for b in batches]).astype(np.int64),
            np.concatenate([b.dst for b in batches]).astype(np.int64))


def _check_merged_state(result, src, dst, parts, num_nodes, k):
    """Merged loads are the per-partition counts; A(v) is where v's edges went."""
    assert parts.min() >= 0 and parts.max() < k
    assert result.loads.tolist() == np.bincount(parts, minlength=k).tolist()
    holders = [set() for _ in range(num_nodes)]
    for u, v, p in zip(src.tolist(), dst.tolist(), parts.tolist()):
        holders[u].add(p)
        holders[v].add(p)
    for v in range(num_nodes):
        assert set(replica_sets(result.replicas, v)) == holders[v]
    non_isolated = sum(1 for h in holders if h)
    assert result.replication_factor == pytest.approx(sum(len(h) for h in holders) / non_isolated)


@pytest.mark.parametrize("shards", [1, 8])
@pytest.mark.parametrize("algo", ["asep", "hdrf"])
@pytest.mark.parametrize("sync_edges", [1, 97, 10**6])
def test_one_stream_is_the_sequential_assignment(inputs, shards, algo, sync_edges):
    # ASEP's own stream: the simulation replays one-pass streams (no two-phase fallback).
    with partition(inputs[shards], config=PartitionConfig(num_parts=4, algo=algo, two_phase_fallback=False)) as a:
        expected = np.concatenate([np.asarray(a.edge_parts(i)) for i in range(len(a.edge_shards))])
        state, kernel = replay_state(a)
        result, parts, _ = _run(a.edge_shards, state, kernel, 1, sync_edges)
        assert parts.tolist() == expected.tolist()
        assert result.loads.tolist() == a.loads.tolist()
        assert np.array_equal(result.replicas, a.replicas)
        assert result.replication_factor == pytest.approx(a.metrics["replication_factor"])


@pytest.mark.parametrize("algo", ["asep", "hdrf", "greedy"])
@pytest.mark.parametrize("k", [4, 70])
@pytest.mark.parametrize(("streams", "sync_edges"), [(2, 1), (3, 50), (8, 7), (8, 10**6)])
def test_parallel_streams_keep_the_invariants(inputs, algo, k, streams, sync_edges):
    src, dst = _stream_edges(open_edge_shards(inputs[8]))
    config = PartitionConfig(num_parts=k, algo=algo, num_attr_clusters=8, two_phase_fallback=False)
    with partition(inputs[8], config=config) as a:
        state, kernel = replay_state(a)
        result, parts, owner = _run(a.edge_shards, state, kernel, streams, sync_edges)
    _check_merged_state(result, src, dst, parts, N, k)
    # The shares are contiguous, in stream order, of near-equal size.
    assert (np.diff(owner) >= 0).all() and owner[0] == 0 and owner[-1] == streams - 1
    assert np.bincount(owner, minlength=streams).tolist() == result.share_edges
    assert max(result.share_edges) - min(result.share_edges) <= 1
    assert result.epochs == math.ceil(max(result.share_edges) / sync_edges)
    # Each stream keeps the cap on its own view; the others' edges of the same epoch
    # can push a partition past it by at most (W - 1) B (see the module docstring).
    assert result.loads.max() <= result.cap + (streams - 1) * sync_edges


def test_one_merge_counts_each_streams_changed_words(inputs):
    # With B past every share there is one merge: from empty bitsets, stream w sends the
    # words its own edges set, and the merge changes every word set at the end.
    edge_shards = open_edge_shards(inputs[8])
    src, dst = _stream_edges(edge_shards)
    with partition(inputs[8], config=PartitionConfig(num_parts=70, two_phase_fallback=False)) as a:
        state, kernel = replay_state(a)
        result, parts, owner = _run(a.edge_shards, state, kernel, 4, 10**6)
    assert result.traffic.merges == 1
    sent = 0
    for w in range(4):
        mine = owner == w
        words = {(int(x), int(p) >> 6) for x, p in zip(src[mine], parts[mine])}
        words |= {(int(x), int(p) >> 6) for x, p in zip(dst[mine], parts[mine])}
        sent += len(words)
    assert result.traffic.changed_words_up == sent
    assert result.traffic.changed_words_down == int(np.count_nonzero(result.replicas))
    assert result.traffic.touched_vertices == int(np.count_nonzero(result.replicas.any(axis=1)))
    assert result.traffic.full_bytes == 2 * 4 * (N * 2 * 8 + 70 * 8)  # asep reads no partial degrees


def test_the_kernel_writes_only_replica_words_and_partial_degrees(rng):
    # The merge folds back the replica words and the partial degrees only.
    k, n = 70, 60
    degree = rng.integers(1, 9, n)
    state = AssignState(k, degree, rng.integers(0, k, n), rng.integers(1, 50, n), rng.integers(-1, k, n))
    before = state.vstate.copy()
    src, dst = rng.integers(0, n, 500), rng.integers(0, n, 500)
    for mode in ("candidates", "all", "greedy", "dbh", "hash"):
        assign_batch(src, dst, np.empty(500, np.int16), state.vstate, state.words, state.loads,
                     KernelArgs(MODES[mode], False, 1.0, 1.0, 10**6, 0))
    changed = np.flatnonzero((state.vstate != before).any(axis=0))
    assert set(changed.tolist()) <= set(range(state.words)) | {state.words + PDEG}


def test_shares_cut_the_stream_into_contiguous_ranges():
    shares = stream_shares([5, 0, 7, 3], 4)
    flat = [(s.shard_index, r) for share in shares for s in share for r in range(s.row_start, s.row_stop)]
    assert flat == [(i, r) for i, rows in enumerate([5, 0, 7, 3]) for r in range(rows)]
    assert [sum(s.row_stop - s.row_start for s in share) for share in shares] == [3, 4, 4, 4]
    assert stream_shares([2], 4)[0] == [] and sum(len(s) for s in stream_shares([2], 4)) == 2
    with pytest.raises(InputError, match="W >= 1"):
        stream_shares([5], 0)


def test_epochs_slice_batches_without_losing_edges(inputs):
    edge_shards = open_edge_shards(inputs[8])
    share = stream_shares([pq.ParquetFile(s.open()).metadata.num_rows for s in edge_shards], 3)[1]
    epochs = list(iter_epochs(iter_share(edge_shards, share, batch_rows=100), 333))
    sizes = [sum(len(p.src) for p in e) for e in epochs]
    assert sizes[:-1] == [333] * (len(sizes) - 1) and 0 < sizes[-1] <= 333 and sum(sizes) == 1000
    src, _ = _stream_edges(edge_shards)
    got = np.concatenate([p.src for e in epochs for p in e])
    assert got.tolist() == src[1000:2000].tolist()
    with pytest.raises(InputError, match="B >= 1"):
        next(iter_epochs(iter([]), 0))


def test_two_phase_baselines_are_refused(inputs):
    with partition(inputs[1], 4, algo="2ps-l") as a:
        with pytest.raises(InputError, match="one-pass"):
            replay_state(a)


graphs = st.integers(2, 30).flatmap(
    lambda n: st.tuples(
        st.just(n),
        st.lists(st.tuples(st.integers(0, n - 1), st.integers(0, n - 1)), min_size=1, max_size=150),
        st.integers(1, 80),
    )
)


@settings(deadline=None, max_examples=40)
@given(graph=graphs, mode=st.sampled_from(["candidates", "all", "greedy"]), streams=st.integers(1, 6),
       sync_edges=st.integers(1, 40), shard_rows=st.integers(1, 60), seed=st.integers(0, 3))
def test_invariants_hold_on_any_graph(graph, mode, streams, sync_edges, shard_rows, seed):
    n, edges, k = graph
    src = np.array([e[0] for e in edges], dtype=np.int64)
    dst = np.array([e[1] for e in edges], dtype=np.int64)
    rng = np.random.default_rng(seed)
    degree = np.bincount(src, minlength=n) + np.bincount(dst, minlength=n)
    cap = math.ceil(1.05 * len(src) / k)
    with tempfile.TemporaryDirectory() as tmp:
        fs = fsspec.filesystem("file")
        shards = []
        for i, lo in enumerate(range(0, len(src), shard_rows)):
            path = Path(tmp) / f"part-{i:05d}.parquet"
            pq.write_table(pa.table({"src": src[lo:lo + shard_rows], "dst": dst[lo:lo + shard_rows]}), path)
            shards.append(Shard(fs, str(path), str(path), path.stat().st_size))
        state = AssignState(k, degree, rng.integers(0, k, n), rng.integers(1, 50, n), rng.integers(-1, k, n))
        kernel = KernelSettings(mode=MODES[mode], use_partial=mode == "all" and seed % 2 == 0, alpha=0.5,
                                beta=float(seed % 2), lam=1.0, seed=seed, epsilon=0.05, keep_attr_together=True,
                                cap=cap)
        result, parts, _ = _run(shards, state, kernel, streams, sync_edges, batch_rows=16)
    _check_merged_state(result, src, dst, parts, n, k)
    # The merged partial degrees are the exact degrees once every edge is seen.
    assert state.pdeg.tolist() == [d - int(((src == v) & (dst == v)).sum()) for v, d in enumerate(degree)]
    assert result.loads.max() <= cap + (streams - 1) * sync_edges
    if streams == 1:
        assert result.loads.max() <= cap
