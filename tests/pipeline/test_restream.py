"""ASEP's restreaming (asepr.pipeline.assign.restream): the passes, their rules and their files."""

from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from asepr.pipeline import PartitionConfig, partition
from asepr.pipeline.assign import MODES, AssignState, EdgePartSink, KernelSettings, assign_edges, edge_parts_path
from asepr.pipeline.assign.restream import PASS_DIR, restream_assign
from asepr.pipeline.stages.masters import choose_masters, count_edges_per_replica, replica_offsets, replica_rows
from asepr.pipeline.stream import EdgeBatch
from tests.pipeline.test_two_phase import planted_graph

N, K, M = 600, 8, 6000


def _graph():
    src, dst = planted_graph(3, N, M, 16, 0.85)
    degree = np.bincount(src, minlength=N) + np.bincount(dst, minlength=N)
    # Communities that only roughly follow the planted groups, and attribute homes.
    rng = np.random.default_rng(5)
    part = np.where(rng.random(N) < 0.7, np.arange(N) % 16 % K, rng.integers(0, K, N))
    home = (np.arange(N) % 16 // 2) % K
    return src, dst, degree, part, home


def _settings(mode="all", epsilon=0.05):
    return KernelSettings(mode=MODES[mode], use_partial=False, alpha=0.5, beta=0.5, lam=1.0, seed=0,
                          epsilon=epsilon, keep_attr_together=True, cap=math.ceil((1 + epsilon) * M / K))


def _batches(src, dst):
    return [EdgeBatch(i // 2000, i % 2000, i, src[i:i + 1000], dst[i:i + 1000]) for i in range(0, M, 1000)]


def _masters(src, dst):
    """``masters(directory, replicas)`` over in-memory edges, remembering what it returned."""
    seen = []

    def masters(directory, replicas):
        parts = np.concatenate([np.load(edge_parts_path(directory, i)) for i in range(3)])
        offsets = replica_offsets(replicas)
        rows = replica_rows(replicas, offsets)
        counts = np.zeros(offsets[-1], np.int32)
        count_edges_per_replica(src, dst, parts, rows, rows[:, -1], counts)
        seen.append(choose_masters(replicas, offsets, counts, K, None))
        return seen[-1]

    return masters, seen


def _run(tmp_path, passes, **kw):
    src, dst, degree, part, home = _graph()
    volume = degree.copy()
    masters, seen = _masters(src, dst)
    sink = EdgePartSink(tmp_path, [2000, 2000, 2000])
    state, seconds, record = restream_assign(AssignState(K, degree, part, volume, home), lambda: _batches(src, dst),
                                             _settings(), sink, kw.pop("masters", masters), passes=passes, **kw)
    out = np.concatenate([np.load(edge_parts_path(tmp_path, i)) for i in range(3)])
    _run.record = record
    return out, state, seen, (src, dst, degree, part, home)


def _rf(src, dst, out):
    held = set(zip(src.tolist(), out.tolist())) | set(zip(dst.tolist(), out.tolist()))
    return len(held) / len(set(src.tolist()) | set(dst.tolist()))


def test_no_restream_is_the_single_stream(tmp_path):
    out, state, seen, (src, dst, degree, part, home) = _run(tmp_path, 0)
    expected = np.empty(M, np.int16)
    single = AssignState(K, degree, part, degree.copy(), home)
    assign_edges(single, src, dst, expected, _settings())
    assert seen == [] and out.tolist() == expected.tolist()
    assert state.loads.tolist() == single.loads.tolist()


def test_the_restream_prepartitions_by_the_first_streams_masters(tmp_path):
    out, state, seen, (src, dst, degree, part, home) = _run(tmp_path, 1)
    assert len(seen) == 1
    prior = seen[0]
    # Every edge is assigned once, within the cap, and the state is the last pass's.
    loads = np.bincount(out, minlength=K)
    assert out.min() >= 0 and loads.tolist() == state.loads.tolist()
    assert loads.max() <= _settings().cap
    # An edge whose endpoints share a first-stream master goes there, unless it was full.
    same = prior[src] == prior[dst]
    assert same.mean() > 0.3
    moved = same & (out != prior[src])
    assert all(loads[prior[u]] >= _settings().cap for u in src[moved])
    # The state, emptied and refilled in place, holds the masters; the homes stay.
    assert state.vstate[:, state.words + 2].tolist() == prior.tolist()
    assert state.vstate[:, state.words + 4].tolist() == home.tolist()
    # The pass directory is gone; only the sink's files are left.
    assert sorted(p.name for p in tmp_path.iterdir()) == [f"edge-parts-{i:05d}.npy" for i in range(3)]


def test_restreaming_replicates_less_than_the_single_stream(tmp_path):
    for name in ("single", "once", "twice"):
        (tmp_path / name).mkdir()
    single, _, _, (src, dst, *_) = _run(tmp_path / "single", 0)
    once, _, _, _ = _run(tmp_path / "once", 1)
    twice, _, seen, _ = _run(tmp_path / "twice", 2)
    assert len(seen) == 2
    assert _rf(src, dst, twice) <= _rf(src, dst, once) < _rf(src, dst, single)
    record = _run.record
    assert len(record.replicas) == 3 and record.kept == 2 and record.replicas[2] <= record.replicas[1]


def test_a_pass_that_replicates_more_than_the_one_before_is_not_kept(tmp_path):
    """Masters that steer badly (every vertex's prior on one partition, so the
    pre-partitioning fills it and the rest is scored against a full prior): the restream
    replicates more, and the first stream's assignment stays, its files, loads and
    replicas byte for byte."""
    (tmp_path / "single").mkdir()
    (tmp_path / "steered").mkdir()
    single, single_state, _, (src, dst, *_) = _run(tmp_path / "single", 0)

    def one_partition(directory, replicas):
        return np.zeros(replicas.shape[0], dtype=np.int32)

    out, state, _, _ = _run(tmp_path / "steered", 1, masters=one_partition)
    record = _run.record
    assert record.replicas[1] > record.replicas[0] and record.kept == 0
    assert out.tolist() == single.tolist()
    assert state.loads.tolist() == single_state.loads.tolist()
    assert state.replicas.tolist() == single_state.replicas.tolist()
    assert sorted(p.name for p in (tmp_path / "steered").iterdir()) == [f"edge-parts-{i:05d}.npy" for i in range(3)]


def test_a_community_volume_prior_weighs_the_masters_by_the_first_streams_volumes(tmp_path):
    (tmp_path / "community").mkdir()
    out, state, _, (_, _, degree, *_) = _run(tmp_path / "community", 1, prior_volume="community")
    assert state.vstate[:, state.words + 3].tolist() == degree.tolist()  # the volumes _run gave
    (tmp_path / "equal").mkdir()
    equal, equal_state, _, _ = _run(tmp_path / "equal", 1)
    assert (equal_state.vstate[:, equal_state.words + 3] == 1).all()
    assert out.tolist() != equal.tolist()


def test_all_phase_mode_leaves_the_edges_of_one_partition_untouched():
    src, dst, degree, part, home = _graph()
    state = AssignState(K, degree, part, degree.copy(), home)
    out = np.empty(M, np.int16)
    assign_edges(state, src, dst, out, _settings("all-phase"))
    same = part[src] == part[dst]
    assert (out[same] == -1).all() and (out[~same] >= 0).all()
    assert state.loads.sum() == (~same).sum()
    # The partial degrees count only the edges this phase assigned.
    pdeg = np.bincount(src[~same], minlength=N) + np.bincount(dst[~same], minlength=N)
    assert state.pdeg.tolist() == pdeg.tolist()


def test_restreaming_needs_the_all_k_scoring(tmp_path):
    src, dst, degree, part, home = _graph()
    with pytest.raises(ValueError, match="restreaming scores all partitions"):
        restream_assign(AssignState(K, degree, part, degree.copy(), home), lambda: _batches(src, dst),
                        _settings("candidates"), EdgePartSink(tmp_path, [2000, 2000, 2000]), None)
    assert not any(tmp_path.glob(f"{PASS_DIR}*"))


def test_config_decides_when_asep_restreams():
    assert PartitionConfig(num_parts=4).uses_restream
    assert not PartitionConfig(num_parts=4, restream_passes=0).uses_restream
    assert not PartitionConfig(num_parts=4, scoring="candidates").uses_restream
    assert not PartitionConfig(num_parts=4, memory_budget=10**6).uses_restream
    assert not PartitionConfig(num_parts=4, algo="2ps-hdrf").uses_restream
    with pytest.raises(Exception, match="--restream-passes"):
        PartitionConfig(num_parts=4, restream_passes=-1)


def test_partition_restreams_and_still_reports_the_fallback(inputs):
    config = PartitionConfig(num_parts=4, num_attr_clusters=8, two_phase_fallback=True)
    with partition(inputs[8], config=replace(config, restream_passes=0, two_phase_fallback=False)) as single:
        single_rf = single.metrics["replication_factor"]
    with partition(inputs[8], config=config) as a:
        fallback = a.metrics["two_phase_fallback"]
        assert fallback["asep_rf"] < single_rf
        assert fallback["chosen"] in ("asep", "2ps-hdrf")
        assert a.metrics["replication_factor"] == pytest.approx(min(fallback["asep_rf"], fallback["two_phase_rf"]))
        assert a.kernel.mode == MODES["all"]  # an ingest continues with the single stream's scoring
        assert not any(p.name.startswith(PASS_DIR) for p in Path(a.workdir).iterdir())
        restream = a.metrics["restream"]  # the replicas of both passes and the one kept
        assert restream["passes"] == 1 and len(restream["replicas"]) == 2
        assert restream["replicas"][restream["kept_pass"]] == min(restream["replicas"])
