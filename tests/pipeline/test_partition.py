"""asepr.pipeline.partition end to end: invariants for every algorithm, shard and worker counts."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pyarrow.parquet as pq
import pytest

from asepr.pipeline import ALGORITHMS, PartitionConfig, partition, replica_sets
from asepr.storage import InputError


def _edges(path):
    table = pq.read_table(path / "edges")
    return table["src"].to_numpy(), table["dst"].to_numpy()


def _check_invariants(assignment, src, dst):
    k = assignment.config.num_parts
    parts = np.concatenate([np.asarray(assignment.edge_parts(i)) for i in range(len(assignment.edge_shards))])
    assert len(parts) == len(src) == assignment.num_edges
    assert parts.min() >= 0 and parts.max() < k
    loads = np.bincount(parts, minlength=k)
    assert loads.tolist() == assignment.loads.tolist()
    assert loads.max() <= assignment.metrics["cap"]
    holders = [set() for _ in range(assignment.num_nodes)]
    for u, v, p in zip(src.tolist(), dst.tolist(), parts.tolist()):
        holders[u].add(p)
        holders[v].add(p)
    for v in range(assignment.num_nodes):
        assert set(replica_sets(assignment.replicas, v)) == holders[v]
        if holders[v]:
            assert assignment.master[v] in holders[v]
    non_isolated = sum(1 for h in holders if h)
    rf = sum(len(h) for h in holders) / non_isolated
    assert assignment.metrics["replication_factor"] == pytest.approx(rf)
    assert assignment.metrics["edge_balance"] == pytest.approx(loads.max() / loads.mean())
    assert sum(assignment.metrics["masters"]) == assignment.num_nodes
    return parts


@pytest.mark.parametrize("algo", ALGORITHMS)
@pytest.mark.parametrize("k", [1, 4])
def test_every_algorithm_keeps_the_invariants(inputs, algo, k):
    src, dst = _edges(inputs[1])
    config = PartitionConfig(num_parts=k, algo=algo, num_attr_clusters=8)
    with partition(inputs[1], config=config) as a:
        parts = _check_invariants(a, src, dst)
    with partition(inputs[8], config=config) as b:
        again = _check_invariants(b, src, dst)
    # 8 shards stream the same order as 1 shard: the same assignment.
    assert again.tolist() == parts.tolist()


def test_same_assignment_with_1_and_4_dask_workers(inputs):
    distributed = pytest.importorskip("distributed")
    config = PartitionConfig(num_parts=4, algo="asep", num_attr_clusters=8)
    results = []
    for workers in (1, 4):
        with distributed.LocalCluster(
            n_workers=workers, threads_per_worker=1, processes=False, dashboard_address=None
        ) as cluster, distributed.Client(cluster) as client:
            with partition(inputs[8], config=config, client=client) as a:
                results.append(
                    (np.concatenate([np.asarray(a.edge_parts(i)) for i in range(8)]), a.master.copy())
                )
    with partition(inputs[8], config=config) as a:
        default = np.concatenate([np.asarray(a.edge_parts(i)) for i in range(8)])
    assert results[0][0].tolist() == results[1][0].tolist() == default.tolist()
    assert results[0][1].tolist() == results[1][1].tolist()


def test_asep_places_attribute_clusters_together(inputs):
    # On a homophilous graph whose features follow the class, ASEP's partitions are
    # more attribute-homogeneous than hash's and replicate less than hash and 2PS-L.
    attr = None
    metrics = {}
    for algo in ("asep", "hash", "2ps-l"):
        with partition(inputs[1], 4, algo=algo, attr=attr) as a:
            attr = a.attr
            metrics[algo] = a.metrics
    assert metrics["asep"]["attribute_lift"]["lift"] > 0.3
    assert metrics["asep"]["attribute_homogeneity"] > 1.3 * metrics["hash"]["attribute_homogeneity"]
    assert metrics["asep"]["replication_factor"] < metrics["2ps-l"]["replication_factor"]
    assert metrics["asep"]["replication_factor"] < metrics["hash"]["replication_factor"]


def test_two_phase_fallback_keeps_the_stream_with_fewer_replicas(inputs):
    # ASEP's own stream and 2PS-HDRF's, side by side: with the fallback, ASEP is the one
    # with fewer replicas (its own on a tie), edge for edge, with every invariant and the
    # kernel settings an ingest continues with.
    src, dst = _edges(inputs[1])
    chosen = set()
    for k in (4, 8):
        config = PartitionConfig(num_parts=k, num_attr_clusters=8)
        runs = {}
        own, twops = replace(config, two_phase_fallback=False), replace(config, algo="2ps-hdrf")
        for name, run in (("asep", own), ("2ps-hdrf", twops)):
            with partition(inputs[1], config=run) as a:
                runs[name] = (_check_invariants(a, src, dst), a.metrics["replication_factor"], a.kernel.mode)
        with partition(inputs[8], config=replace(config, concurrent_fallback=False)) as a:
            sequential = (_check_invariants(a, src, dst), a.master.copy(), a.metrics["two_phase_fallback"])
        with partition(inputs[8], config=config) as a:
            parts = _check_invariants(a, src, dst)
            outcome = a.metrics["two_phase_fallback"]
            # The fallback on its thread beside ASEP's stream: the same result as after it.
            assert parts.tolist() == sequential[0].tolist() and a.master.tolist() == sequential[1].tolist()
            assert outcome == sequential[2]
            assert a.timings["fallback stream"] > 0
        assert outcome["asep_rf"] == pytest.approx(runs["asep"][1])
        assert outcome["two_phase_rf"] == pytest.approx(runs["2ps-hdrf"][1])
        expected = "2ps-hdrf" if runs["2ps-hdrf"][1] < runs["asep"][1] else "asep"
        assert outcome["chosen"] == expected
        assert a.metrics["replication_factor"] == pytest.approx(min(runs["asep"][1], runs["2ps-hdrf"][1]))
        assert parts.tolist() == runs[expected][0].tolist()
        assert a.kernel.mode == runs[expected][2]
        chosen.add(expected)
    assert chosen == {"asep", "2ps-hdrf"}  # both branches ran


@pytest.mark.parametrize("failing", ["asep", "2ps-hdrf"])
def test_a_failed_stream_removes_the_workdir_after_the_other_finishes(inputs, monkeypatch, tmp_path, failing):
    # Either stream failing (ASEP's on the main thread, the fallback's on its own) fails
    # the run with that error; the other stream is waited for, so nothing writes into the
    # workdir after it is removed.
    import importlib

    module = importlib.import_module("asepr.pipeline.partition")
    real = module._assign
    finished = []

    def assign(run, *args, **kwargs):
        if run.algo == failing:
            raise OSError(f"disk full while streaming {failing}")
        result = real(run, *args, **kwargs)
        finished.append(run.algo)
        return result

    monkeypatch.setattr(module, "_assign", assign)
    monkeypatch.setattr(module.tempfile, "tempdir", str(tmp_path))
    with pytest.raises(OSError, match=f"streaming {failing}"):
        partition(inputs[1], config=PartitionConfig(num_parts=4, num_attr_clusters=8))
    assert finished == [a for a in ("asep", "2ps-hdrf") if a != failing]
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("algo", ["asep", "hdrf"])
def test_memory_budget_runs_the_hybrid_within_it(inputs, algo):
    # partition() with a budget: every invariant, the held bytes within the budget and
    # reported, and holding the whole graph replicates less than streaming it.
    src, dst = _edges(inputs[1])
    rf = {}
    for budget in (0, 4000, 10**7):
        config = PartitionConfig(num_parts=4, algo=algo, num_attr_clusters=8, memory_budget=budget,
                                 two_phase_fallback=False)
        with partition(inputs[8], config=config) as a:
            _check_invariants(a, src, dst)
            rf[budget] = a.metrics["replication_factor"]
            held = a.metrics.get("hybrid", {}).get("held_bytes", 0)
            assert held <= budget
            assert a.metrics["assignment_memory_bytes"] >= held
            if budget == 10**7:
                assert a.metrics["hybrid"]["streamed_edges"] == 0 and held > 0
    assert rf[10**7] < rf[0]


def test_memory_budget_needs_a_streaming_algorithm():
    with pytest.raises(InputError, match="--memory-budget"):
        PartitionConfig(num_parts=4, algo="2ps-hdrf", memory_budget=1000)
    with pytest.raises(InputError, match="--memory-budget"):
        PartitionConfig(num_parts=4, memory_budget=-1)


def test_workdir_is_removed_on_close(inputs):
    a = partition(inputs[1], 2, algo="hash")
    workdir = a.workdir
    a.close()
    import os

    assert not os.path.exists(workdir)


def test_bad_config_names_the_choices():
    with pytest.raises(InputError, match='Unsupported algorithm "x". Valid choices are "asep"'):
        PartitionConfig(num_parts=2, algo="x")
    with pytest.raises(InputError, match="--alpha"):
        PartitionConfig(num_parts=2, alpha=2.0)


def test_bad_input_fails_before_any_work(tmp_path):
    from tests.storage.helpers import write_input

    write_input(tmp_path / "in")
    (tmp_path / "in" / "edges" / "part-00001.parquet").write_bytes(b"garbage")
    with pytest.raises(InputError, match="part-00001.parquet"):
        partition(tmp_path / "in", 2, workdir=tmp_path / "work")
    assert not (tmp_path / "work").exists()


def test_hdrf_lambda_must_be_positive():
    # With lambda <= 0 the S-pruned scan would differ from a full scan; refuse it.
    with pytest.raises(InputError, match="hdrf_lambda"):
        PartitionConfig(num_parts=2, hdrf_lambda=0.0)


def test_without_validation_num_nodes_must_come_from_meta(tmp_path):
    from tests.storage.helpers import write_input

    write_input(tmp_path / "in")
    with pytest.raises(InputError, match="num_nodes"):
        partition(tmp_path / "in", 2, validate=False)


def test_an_opened_input_is_listed_once_and_timed_by_stage(inputs):
    from asepr.storage.inputs.directory import open_input

    source = open_input(inputs[8])
    with partition(source, 2, algo="2ps-l") as a:
        assert a.edge_shards is source.edge_shards and a.node_shards is source.node_shards
        assert a.config.undirected is source.undirected
        assert list(a.timings) == ["validate", "degrees", "attribute clustering", "clustering kernel",
                                   "structural clustering", "mapping", "assignment kernel", "assignment",
                                   "masters", "metrics"]
        assert a.kernel.cap == a.metrics["cap"]


@pytest.mark.parametrize("ways", [1, 2, 3, 5, 8, 20])
def test_stream_ranges_cover_the_shards_in_order_and_order_free_passes_agree(inputs, ways, monkeypatch):
    # shard_ranges: contiguous, non-empty, at most `ways`, every shard once, in order,
    # balanced by rows; masters and 1-hop locality counted over the ranges on threads
    # equal the single-thread pass.
    from asepr.pipeline.stream import map_shard_ranges, shard_ranges
    from asepr.storage.inputs.directory import open_input

    shards = open_input(inputs[8]).edge_shards
    ranges = shard_ranges(shards, ways)
    assert [i for r in ranges for i in r] == list(range(len(shards)))
    assert len(ranges) == min(ways, len(shards)) and all(len(r) for r in ranges)
    assert max(len(r) for r in ranges) - min(len(r) for r in ranges) <= 1  # equal-sized shards here
    assert map_shard_ranges(shards, lambda r: list(r), ways) == [list(r) for r in ranges]

    import asepr.pipeline.stream as stream

    results = {}
    for threads in (1, ways):
        monkeypatch.setattr(stream, "stream_ways", lambda t=threads: t)
        with partition(inputs[8], config=PartitionConfig(num_parts=4, num_attr_clusters=8)) as a:
            results[threads] = (a.master.tolist(), a.locality, a.metrics["one_hop_locality"])
    assert results[1] == results[ways]
