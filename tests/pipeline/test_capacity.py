"""Per-partition capacities: shares, caps and floors in the kernel, masters, ingest, rebalance, verify, plan."""

from __future__ import annotations

import json
import shutil
from dataclasses import replace

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from asepr.pipeline import ingest, rebalance
from asepr.pipeline.assign import MODES, AssignState, KernelSettings, assign_edges, replica_sets
from asepr.pipeline.capacity import (
    edge_caps,
    edge_floors,
    hash_bounds,
    normalise_capacities,
    read_cluster_file,
)
from asepr.pipeline.config import PartitionConfig
from asepr.pipeline.inputs.synth import SynthConfig, generate
from asepr.pipeline.planning.needs import RunShape
from asepr.pipeline.partition_run import partition_to_store
from asepr.pipeline.stages.mapping import map_communities
from asepr.pipeline.stages.masters import choose_masters, count_edges_per_replica, replica_offsets
from asepr.pipeline.verify import verify_output
from asepr.storage.errors import InputError
from asepr.storage.partitions.manifest import read_manifest
from asepr.storage.partitions.state import read_state, read_state_attrs
from tests.pipeline.ingest_cases import skewed_edges, split_case
from tests.pipeline.test_assign import community_terms

MODE_OF = {"hash": "hash", "dbh": "dbh", "greedy": "greedy", "hdrf": "all", "2ps-l": "2ps-l",
           "2ps-hdrf": "2ps-hdrf", "asep": "candidates", "asep-hdrf": "all"}


def shared_kernel(algo, src, dst, n, k, shares, *, attr=None, epsilon=0.05, batch=7):
    """Stream ``(src, dst)`` through the kernel with ``shares`` as asepr.pipeline.partition does."""
    src = np.asarray(src, dtype=np.int64)
    dst = np.asarray(dst, dtype=np.int64)
    degree = np.bincount(src, minlength=n) + np.bincount(dst, minlength=n)
    uses_attr = algo.startswith("asep")
    terms = community_terms(algo, src, dst, n, k, attr=attr, epsilon=epsilon, batch=batch)
    state = AssignState(k, degree, *terms)
    base = KernelSettings(mode=MODES[MODE_OF[algo]], use_partial=algo == "hdrf", alpha=0.5,
                          beta=1.0 if uses_attr else 0.0, lam=1.0, seed=3, epsilon=epsilon,
                          keep_attr_together=uses_attr, cap=0)
    kernel = replace(base, shares=shares).with_edges(len(src), k)
    out = np.full(len(src), -1, dtype=np.int16)
    phases = [replace(kernel, mode=MODES["prepartition"]), kernel] if algo.startswith("2ps") else [kernel]
    for phase in phases:
        parts = np.empty(len(src), dtype=np.int16)
        for lo in range(0, len(src), batch):
            assign_edges(state, src[lo:lo + batch], dst[lo:lo + batch], parts[lo:lo + batch], phase)
        out = np.where(parts >= 0, parts, out)
    return out, state, kernel


graphs = st.integers(2, 30).flatmap(
    lambda n: st.tuples(
        st.just(n),
        st.lists(st.tuples(st.integers(0, n - 1), st.integers(0, n - 1)), min_size=1, max_size=150),
        st.lists(st.floats(0.1, 10.0), min_size=2, max_size=7).filter(lambda c: len(set(c)) > 1),
        st.lists(st.integers(0, 3), min_size=n, max_size=n),
    )
)


@settings(deadline=None, max_examples=60)
@given(graph=graphs, algo=st.sampled_from(list(MODE_OF)))
def test_kernel_keeps_every_partition_between_its_floor_and_its_cap(graph, algo):
    n, edges, capacities, attr = graph
    k = len(capacities)
    shares = tuple(c / sum(capacities) for c in capacities)
    src = [e[0] for e in edges]
    dst = [e[1] for e in edges]
    out, state, kernel = shared_kernel(algo, src, dst, n, k, shares, attr=attr)
    caps = edge_caps(len(src), k, 0.05, shares)
    floors = edge_floors(len(src), 0.05, shares)
    assert kernel.caps == tuple(caps) and kernel.floors == tuple(floors) and kernel.cap == caps.max()
    assert out.min() >= 0 and out.max() < k
    loads = np.bincount(out, minlength=k)
    assert loads.tolist() == state.loads.tolist()
    assert (loads <= caps).all(), (loads, caps)
    assert (loads >= floors).all(), (loads, floors)
    expected = [set() for _ in range(n)]
    for u, v, p in zip(src, dst, out.tolist()):
        expected[u].add(p)
        expected[v].add(p)
    assert [set(replica_sets(state.replicas, v)) for v in range(n)] == expected


@settings(deadline=None, max_examples=25)
@given(graph=graphs, algo=st.sampled_from(list(MODE_OF)))
def test_equal_shares_assign_as_the_uniform_kernel(graph, algo):
    n, edges, capacities, attr = graph
    k = len(capacities)
    src = [e[0] for e in edges]
    dst = [e[1] for e in edges]
    uniform, _, _ = shared_kernel(algo, src, dst, n, k, None, attr=attr)
    assert normalise_capacities([2.5] * k, k) is None
    again, _, kernel = shared_kernel(algo, src, dst, n, k, normalise_capacities([2.5] * k, k), attr=attr)
    assert kernel.caps is None and kernel.floors is None
    assert again.tolist() == uniform.tolist()


def test_hash_buckets_follow_the_shares():
    bounds = hash_bounds((0.5, 0.25, 0.25))
    assert bounds[-1] == np.uint64(2**64 - 1) and len(hash_bounds(None)) == 0
    rng = np.random.default_rng(0)
    src = rng.integers(0, 5000, 40_000)
    dst = rng.integers(0, 5000, 40_000)
    out, _, _ = shared_kernel("hash", src, dst, 5000, 3, (0.5, 0.25, 0.25), batch=4096)
    shares = np.bincount(out, minlength=3) / len(out)
    assert np.allclose(shares, [0.5, 0.25, 0.25], atol=0.01), shares


def test_mapping_packs_community_volume_in_proportion_to_the_shares():
    volume = np.full(40, 10, dtype=np.int64)
    attr = np.arange(40, dtype=np.int32) % 8
    for keep in (True, False):
        mapping = map_communities(volume, attr, 4, epsilon=0.05, keep_attr_together=keep, shares=(0.4, 0.2, 0.2, 0.2))
        assert mapping.part_volume.tolist() == [160, 80, 80, 80]
    uniform = map_communities(volume, attr, 4, epsilon=0.05, keep_attr_together=True)
    assert uniform.part_volume.tolist() == [100, 100, 100, 100]


def test_masters_follow_the_shares_and_stay_on_replicas():
    rng = np.random.default_rng(1)
    n, k = 3000, 4
    src, dst = rng.integers(0, n, 20_000), rng.integers(0, n, 20_000)
    shares = (0.4, 0.2, 0.2, 0.2)
    out, state, _ = shared_kernel("hdrf", src, dst, n, k, shares, batch=1024)
    offsets = replica_offsets(state.replicas)
    counts = np.zeros(offsets[-1], np.int64)
    count_edges_per_replica(src, dst, out, state.replicas, offsets, counts)
    master = choose_masters(state.replicas, offsets, counts, k, shares)
    assert np.allclose(np.bincount(master, minlength=k) / n, shares, rtol=0.01)
    for v in range(n):
        held = replica_sets(state.replicas, v)
        assert not held or master[v] in held


@pytest.fixture(scope="module")
def weighted(tmp_path_factory) -> dict:
    """A base output partitioned with capacities 2,1,1,1 and the increment to ingest."""
    root = tmp_path_factory.mktemp("capacity")
    case = split_case(root, nodes=2000, edges=16_000, new_nodes=50, frac=0.7, seed=2)
    out = root / "out"
    partition_to_store(case["root"] / "base", out, PartitionConfig(num_parts=4, capacities=(2, 1, 1, 1)))
    return {**case, "out": out}


def assert_in_proportion(manifest, shares, rtol=0.05):
    metrics = manifest["metrics"]
    loads, masters = np.array(metrics["loads"]), np.array(metrics["masters"])
    caps = edge_caps(int(loads.sum()), len(shares), 0.05, shares)
    assert (loads <= caps).all() and (loads >= edge_floors(int(loads.sum()), 0.05, shares)).all()
    assert np.allclose(loads / loads.sum(), shares, rtol=rtol), loads
    assert np.allclose(masters / masters.sum(), shares, rtol=rtol), masters
    assert metrics["capacity"]["shares"] == pytest.approx(list(shares))


def test_a_run_records_its_capacities_and_holds_its_shares(weighted):
    manifest = read_manifest(weighted["out"])
    assert manifest["config"]["capacities"] == [2.0, 1.0, 1.0, 1.0]
    assert read_state_attrs(weighted["out"], manifest)["kernel"]["shares"] == [0.4, 0.2, 0.2, 0.2]
    assert_in_proportion(manifest, (0.4, 0.2, 0.2, 0.2))
    # The two-phase fallback weighed both streams' masters against the shares.
    fallback = manifest["metrics"]["two_phase_fallback"]
    chosen = "asep_master_miss" if fallback["chosen"] == "asep" else "two_phase_master_miss"
    assert fallback[chosen] <= 0.05 or min(fallback["asep_master_miss"], fallback["two_phase_master_miss"]) > 0.05
    assert verify_output(weighted["out"]).ok


def test_ingest_keeps_the_proportions(weighted, tmp_path):
    out = tmp_path / "out"
    shutil.copytree(weighted["out"], out)
    inc = weighted["root"] / "inc"
    manifest = ingest(out, inc / "edges", inc / "nodes")
    assert manifest["generation"] == 2 and manifest["num_edges"] > read_manifest(weighted["out"])["num_edges"]
    assert manifest["config"]["capacities"] == [2.0, 1.0, 1.0, 1.0]
    assert read_state_attrs(out, manifest)["kernel"]["shares"] == [0.4, 0.2, 0.2, 0.2]
    assert_in_proportion(manifest, (0.4, 0.2, 0.2, 0.2))
    assert verify_output(out).ok


def test_rebalance_restores_the_proportions(tmp_path):
    generate(tmp_path / "in", SynthConfig(num_nodes=1200, num_edges=8000, num_classes=24, dim=8), shard_rows=4000)
    out = tmp_path / "out"
    shares = (0.4, 0.2, 0.2, 0.2)
    partition_to_store(tmp_path / "in", out, PartitionConfig(num_parts=4, capacities=(2, 1, 1, 1)))
    skewed_edges(out, tmp_path / "hot")
    drifted = ingest(out, tmp_path / "hot")["metrics"]["drift"]
    assert drifted["rebalance_advised"] and drifted["volume_caps"][0] > drifted["volume_caps"][1]
    manifest = rebalance(out)
    assert manifest["generation"] == 3 and manifest["metrics"]["rebalance"]["moved_communities"] > 0
    drift = manifest["metrics"]["drift"]
    assert drift["community_balance"] < drifted["community_balance"]
    state = read_state(out)
    loads = state["partitions/loads"]
    assert (loads <= edge_caps(int(loads.sum()), 4, 0.05, shares)).all()
    assert verify_output(out).ok


def test_verify_flags_a_partition_over_its_own_share(weighted, tmp_path):
    out = tmp_path / "out"
    shutil.copytree(weighted["out"], out)
    manifest = json.loads((out / "manifest.json").read_text())
    manifest["config"]["capacities"] = [1.0, 2.0, 2.0, 2.0]  # partition 0 holds 0.4, its share would be 1/7
    (out / "manifest.json").write_text(json.dumps(manifest))
    report = verify_output(out)
    assert not report.ok
    found = [str(p) for p in report.problems]
    assert any("partition 0" in p and "past its cap" in p and "share is 0.143" in p for p in found), found
    assert not any("partition 1" in p for p in found)


def test_capacities_are_checked_and_equal_ones_are_none():
    assert PartitionConfig(num_parts=3, capacities=(1, 1, 1)).capacities is None
    assert PartitionConfig(num_parts=3, capacities="2,1,1").shares == (0.5, 0.25, 0.25)
    assert "capacities" not in PartitionConfig(num_parts=3, capacities=[4, 4, 4]).to_dict()
    for bad, found in (((1, 2), "found 2"), ((1, 0, 2), "0"), ((1, -1, 2), "-1"), ((1, "x", 2), "'x'")):
        with pytest.raises(InputError, match="--capacities") as err:
            PartitionConfig(num_parts=3, capacities=bad)
        assert found in str(err.value) and "Fix" in str(err.value)


def test_cluster_file_shares_follow_the_tighter_of_compute_and_memory(tmp_path):
    toml = tmp_path / "cluster.toml"
    toml.write_text('[[machine]]\ncompute = 2\nmemory = 64\n[[machine]]\ncompute = 1\nmemory = 64\n'
                    '[[machine]]\nname = "small"\ncompute = 1\nmemory = 32\n')
    # compute 0.5, 0.25, 0.25 and memory 0.4, 0.4, 0.2 of the totals: the smaller of each.
    assert read_cluster_file(toml) == pytest.approx((0.4, 0.25, 0.2))
    js = tmp_path / "cluster.json"
    js.write_text(json.dumps({"machine": [{"compute": 3}, {"compute": 1}]}))
    assert read_cluster_file(js) == pytest.approx((0.75, 0.25))
    for machines, named in (([{"compute": 3, "gpus": 2}], "gpus"), ([{"memory": 0}], "memory"),
                            ([{"compute": 1}, {"memory": 2}], "compute"), ([{"name": "a"}], "neither")):
        js.write_text(json.dumps({"machine": machines}))
        with pytest.raises(InputError, match=named):
            read_cluster_file(js)


def test_plan_sizes_the_largest_partition_by_the_largest_share():
    shape = RunShape(n=10_000, e=100_000, k=4, epsilon=0.05, d=8, d_emb=8, b=1000, rf=2.0, halo_copies=0.0,
                     n_s=10_000, e_s=100_000, node_shards=1, edge_shards=1, node_read=0.0)
    weighted = replace(shape, top_share=0.4)
    assert shape.e_p == 26_250 and weighted.e_p == pytest.approx(42_000, abs=1)
    assert weighted.n_p == pytest.approx(8000) and shape.n_p == pytest.approx(5000)
    assert shape.n_all == 4 * shape.n_p and weighted.n_all == pytest.approx(20_000)
    assert weighted.e_all < 4 * weighted.e_p


@pytest.mark.parametrize("algo, budget", [
    ("asep", 0), ("asep", 40_000), ("hdrf", 40_000), ("2ps-l", 0), ("2ps-hdrf", 0), ("dbh", 0), ("greedy", 0),
    ("metis", 0),
])
def test_every_algorithm_and_the_hybrid_hold_the_shares(inputs, tmp_path, algo, budget):
    if algo == "metis":
        pytest.importorskip("pymetis")
    shares = (0.5, 0.25, 0.25)
    config = PartitionConfig(num_parts=3, algo=algo, capacities=(2, 1, 1), memory_budget=budget)
    manifest = partition_to_store(inputs[8], tmp_path / "out", config)
    loads = np.array(manifest["metrics"]["loads"])
    assert (loads <= edge_caps(int(loads.sum()), 3, 0.05, shares)).all()
    assert (loads >= edge_floors(int(loads.sum()), 0.05, shares)).all()
    if budget:
        assert manifest["metrics"]["hybrid"]["held_edges"] > 0
    assert verify_output(tmp_path / "out").ok
