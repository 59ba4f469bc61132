"""The hybrid assignment under a memory budget (asepr.pipeline.assign.hybrid, asepr.pipeline.assign.expansion)."""

from __future__ import annotations

import math
from pathlib import Path

import fsspec
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from asepr.pipeline.assign import (
    AssignState,
    EdgePartSink,
    KernelSettings,
    edge_parts_path,
    stream_assign,
)
from asepr.pipeline.assign.hybrid import choose_threshold, held_bytes, hybrid_stream_assign
from asepr.pipeline.assign.kernel import MODES
from asepr.pipeline.stream import iter_edge_batches
from asepr.storage.errors import InputError
from asepr.storage.locations.fs import Shard


def write_shards(root: Path, src: np.ndarray, dst: np.ndarray, shard_rows: int) -> list[Shard]:
    root.mkdir(parents=True, exist_ok=True)
    fs = fsspec.filesystem("file")
    shards = []
    for i, lo in enumerate(range(0, len(src), shard_rows)):
        path = root / f"part-{i:05d}.parquet"
        pq.write_table(pa.table({"src": src[lo:lo + shard_rows], "dst": dst[lo:lo + shard_rows]}), path)
        shards.append(Shard(fs, str(path), str(path), path.stat().st_size))
    return shards


def kernel_settings(mode: str, num_edges: int, k: int, beta: float = 0.0) -> KernelSettings:
    return KernelSettings(mode=MODES[mode], use_partial=mode == "all" and beta == 0.0, alpha=0.0, beta=beta,
                          lam=1.0, seed=0, epsilon=0.05, keep_attr_together=False,
                          cap=math.ceil(1.05 * num_edges / k))


def community_graph(seed: int, n: int = 600, m: int = 5000, groups: int = 8, inside: float = 0.9):
    """A power-law-ish graph with ``groups`` planted communities (ids contiguous per group)."""
    rng = np.random.default_rng(seed)
    weight = 1.0 / (1 + np.arange(n)) ** 0.6
    rng.shuffle(weight)
    group = np.arange(n) * groups // n
    src = rng.choice(n, size=m, p=weight / weight.sum())
    same = rng.random(m) < inside
    dst = np.where(same, group[src] * (n // groups) + rng.integers(0, n // groups, m), rng.integers(0, n, m))
    keep = src != dst
    return src[keep].astype(np.int64), dst[keep].astype(np.int64), group


def run_hybrid(tmp: Path, src, dst, n, k, budget, *, mode="all", beta=0.0, home=None, shard_rows=700,
               prefer="attr", attr_ids=None, mixed=True):
    shards = write_shards(tmp / "edges", src, dst, shard_rows)
    degree = np.bincount(src, minlength=n) + np.bincount(dst, minlength=n)
    state = AssignState(k, degree, np.arange(n) % k, degree, home)
    kernel = kernel_settings(mode, len(src), k, beta)
    rows = [len(src[lo:lo + shard_rows]) for lo in range(0, len(src), shard_rows)]
    (tmp / "parts").mkdir(exist_ok=True)
    info = hybrid_stream_assign(state, shards, degree, kernel, EdgePartSink(tmp / "parts", rows),
                                budget_bytes=budget, attr_ids=attr_ids, batch_rows=300, prefer=prefer,
                                mixed=mixed)
    parts = np.concatenate([np.load(edge_parts_path(tmp / "parts", i)) for i in range(len(rows))])
    return state, info, parts, kernel, shards, degree


def check_invariants(state, info, parts, kernel, src, dst, n, k):
    assert len(parts) == len(src)
    assert parts.min() >= 0 and parts.max() < k
    loads = np.bincount(parts, minlength=k)
    assert loads.tolist() == state.loads.tolist()
    assert loads.max() <= kernel.cap
    assert info.held_bytes <= info.budget_bytes
    assert info.held_edges + info.streamed_edges == len(src)
    expected = np.zeros((n, (k + 63) // 64), dtype=np.uint64)
    bits = np.left_shift(np.uint64(1), (parts % 64).astype(np.uint64))
    np.bitwise_or.at(expected, (src, parts // 64), bits)
    np.bitwise_or.at(expected, (dst, parts // 64), bits)
    assert np.array_equal(state.replicas, expected)


def rf(state, degree) -> float:
    ones = np.unpackbits(state.replicas.view(np.uint8), axis=1).sum()
    return ones / np.count_nonzero(degree)


@pytest.mark.parametrize("mode", ["all", "candidates"])
def test_budget_zero_is_pure_streaming(tmp_path, mode):
    src, dst, _ = community_graph(1)
    n, k = 600, 8
    state, info, parts, kernel, shards, degree = run_hybrid(tmp_path / "h", src, dst, n, k, 0, mode=mode)
    assert info.held_edges == 0 and info.held_bytes == 0 and info.threshold == -1
    ref_state = AssignState(k, degree, np.arange(n) % k, degree)
    rows = [len(src[lo:lo + 700]) for lo in range(0, len(src), 700)]
    (tmp_path / "ref").mkdir()
    stream_assign(ref_state, lambda: iter_edge_batches(shards, 300), kernel, EdgePartSink(tmp_path / "ref", rows))
    expected = np.concatenate([np.load(edge_parts_path(tmp_path / "ref", i)) for i in range(len(rows))])
    assert parts.tolist() == expected.tolist()
    assert np.array_equal(state.vstate, ref_state.vstate)
    assert state.loads.tolist() == ref_state.loads.tolist()


@pytest.mark.parametrize("mixed", [True, False])
@pytest.mark.parametrize("share", [0.2, 0.6, 1.0])
@pytest.mark.parametrize("k", [3, 8, 70])
def test_invariants_at_every_budget(tmp_path, share, k, mixed):
    src, dst, group = community_graph(2)
    n = 600
    degree = np.bincount(src, minlength=n) + np.bincount(dst, minlength=n)
    whole = held_bytes(n, int(np.count_nonzero(degree)), int(degree.sum()), k)
    budget = int(share * whole)
    state, info, parts, kernel, _, _ = run_hybrid(tmp_path, src, dst, n, k, budget, attr_ids=group, mixed=mixed)
    check_invariants(state, info, parts, kernel, src, dst, n, k)
    assert info.held_edges > 0
    if share < 1.0:
        assert info.streamed_edges > 0 and info.threshold < degree.max()
    else:
        assert info.streamed_edges == 0


graphs = st.integers(2, 40).flatmap(
    lambda n: st.tuples(
        st.just(n),
        st.lists(st.tuples(st.integers(0, n - 1), st.integers(0, n - 1)), min_size=1, max_size=150),
        st.integers(1, 9),
    )
)


@settings(deadline=None, max_examples=40)
@given(graph=graphs, share=st.floats(0.0, 1.2), mode=st.sampled_from(["all", "candidates"]),
       shard_rows=st.integers(1, 60), prefer=st.sampled_from(["attr", "community", "none"]), mixed=st.booleans())
def test_invariants_on_any_graph_with_duplicates_and_self_loops(tmp_path_factory, graph, share, mode,
                                                                 shard_rows, prefer, mixed):
    n, edges, k = graph
    src = np.array([e[0] for e in edges], dtype=np.int64)
    dst = np.array([e[1] for e in edges], dtype=np.int64)
    degree = np.bincount(src, minlength=n) + np.bincount(dst, minlength=n)
    budget = int(share * held_bytes(n, int(np.count_nonzero(degree)), int(degree.sum()), k))
    home = np.arange(n) % (k + 1) - 1
    tmp = tmp_path_factory.mktemp("h")
    state, info, parts, kernel, _, _ = run_hybrid(tmp, src, dst, n, k, budget, mode=mode, beta=0.5, home=home,
                                                  shard_rows=shard_rows, prefer=prefer, mixed=mixed)
    check_invariants(state, info, parts, kernel, src, dst, n, k)
    # Partial degrees: every edge counted once per distinct endpoint, as the kernel does.
    assert state.pdeg.tolist() == (np.bincount(src, minlength=n)
                                   + np.bincount(dst[src != dst], minlength=n)).tolist()


def test_expansion_finds_disjoint_cliques(tmp_path):
    k, size = 6, 9
    pairs = [(c * size + i, c * size + j) for c in range(k) for i in range(size) for j in range(i + 1, size)]
    rng = np.random.default_rng(0)
    rng.shuffle(pairs)
    src = np.array([p[0] for p in pairs], dtype=np.int64)
    dst = np.array([p[1] for p in pairs], dtype=np.int64)
    n = k * size
    degree = np.bincount(src, minlength=n) + np.bincount(dst, minlength=n)
    whole = held_bytes(n, n, int(degree.sum()), k)
    for prefer in ("attr", "community", "none"):
        state, info, parts, kernel, _, _ = run_hybrid(tmp_path / str(prefer), src, dst, n, k, whole,
                                                      prefer=prefer, attr_ids=np.arange(n) // size)
        check_invariants(state, info, parts, kernel, src, dst, n, k)
        assert info.streamed_edges == 0
        assert rf(state, degree) == 1.0
        assert state.loads.tolist() == [size * (size - 1) // 2] * k


def test_whole_graph_budget_beats_streaming(tmp_path):
    src, dst, group = community_graph(3, n=2000, m=20000, groups=16)
    n, k = 2000, 8
    degree = np.bincount(src, minlength=n) + np.bincount(dst, minlength=n)
    whole = held_bytes(n, int(np.count_nonzero(degree)), int(degree.sum()), k)
    streamed, *_ = run_hybrid(tmp_path / "s", src, dst, n, k, 0)
    hybrid, info, *_ = run_hybrid(tmp_path / "w", src, dst, n, k, whole, attr_ids=group)
    assert info.streamed_edges == 0
    assert rf(hybrid, degree) < 0.9 * rf(streamed, degree)


def test_threshold_is_the_largest_that_fits():
    degree = np.array([0, 1, 1, 2, 3, 3, 3, 10], dtype=np.int64)
    n, k = len(degree), 4
    for budget in range(0, held_bytes(n, 7, int(degree.sum()), k) + 50, 7):
        threshold, low, entries = choose_threshold(degree, k, budget)
        if threshold < 0:
            assert held_bytes(n, 2, 2, k) > budget
            continue
        assert low == int(((degree > 0) & (degree <= threshold)).sum())
        assert entries == int(degree[degree <= threshold].sum())
        assert held_bytes(n, low, entries, k) <= budget
        bigger = degree[degree > threshold]
        if len(bigger):
            t2 = bigger.min()
            assert held_bytes(n, int(((degree > 0) & (degree <= t2)).sum()),
                              int(degree[degree <= t2].sum()), k) > budget


def test_two_phase_modes_and_bad_degrees_are_refused(tmp_path):
    src, dst, _ = community_graph(4, n=100, m=400)
    n, k = 100, 4
    shards = write_shards(tmp_path / "e", src, dst, 1000)
    degree = np.bincount(src, minlength=n) + np.bincount(dst, minlength=n)
    sink = EdgePartSink(tmp_path, [len(src)])
    with pytest.raises(InputError, match="two-phase"):
        hybrid_stream_assign(AssignState(k, degree), shards, degree, kernel_settings("2ps-hdrf", len(src), k),
                             sink, budget_bytes=10**6)
    wrong = degree.copy()
    wrong[src[0]] -= 1
    with pytest.raises(InputError, match="degree"):
        hybrid_stream_assign(AssignState(k, wrong), shards, wrong, kernel_settings("all", len(src), k),
                             sink, budget_bytes=10**6)


def test_unmixed_threshold_counts_the_low_low_edges(tmp_path):
    from asepr.pipeline.assign.expansion import pair_histogram

    src, dst, _ = community_graph(5, n=300, m=2500)
    n, k = 300, 4
    degree = np.bincount(src, minlength=n) + np.bincount(dst, minlength=n)
    hist = np.zeros(degree.max() + 1, dtype=np.int64)
    pair_histogram(src, dst, degree, hist)
    budget = held_bytes(n, n, int(degree.sum()), k) // 2
    threshold, low, entries = choose_threshold(degree, k, budget, hist)
    both_low = (degree[src] <= threshold) & (degree[dst] <= threshold)
    assert entries == 2 * int(both_low.sum())
    assert held_bytes(n, low, entries, k) <= budget
    state, info, parts, kernel, _, _ = run_hybrid(tmp_path, src, dst, n, k, budget, mixed=False)
    check_invariants(state, info, parts, kernel, src, dst, n, k)
    assert info.threshold == threshold and info.held_edges == int(both_low.sum())
