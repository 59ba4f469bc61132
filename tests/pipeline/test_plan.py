"""``asepr.pipeline.planning.plan``: the memory and disk plan, and ``asepr partition``'s check of it."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

import asepr.pipeline.planning.plan as plan_module
from asepr.pipeline.config import PartitionConfig
from asepr.pipeline.inputs.synth import SynthConfig, generate
from asepr.pipeline.planning.plan import InputSizes, RunPlan, human_bytes, input_sizes, plan_partition, plan_run
from asepr.storage.errors import InputError
from asepr.storage.partitions.manifest import read_manifest
from tests.storage.helpers import write_input
from asepr.workflows.cli import main


def _sizes(num_nodes: int, num_edges: int, **kw) -> InputSizes:
    # Fixed shard sizes, so only |V| and |E| change between plans.
    kw = {"feat_dim": 32, "max_edge_shard_rows": 1_000_000, "max_node_shard_rows": 1_000_000,
          "edge_shards": max(1, num_edges // 1_000_000), "node_shards": max(1, num_nodes // 1_000_000), **kw}
    return InputSizes(num_nodes=num_nodes, num_edges=num_edges, **kw)


def _stage(plan: RunPlan, name: str):
    return next(s for s in plan.stages if s.name == name)


def _plans(points, make):
    return [make(x) for x in points]


def _assert_linear(values, points, rel=1e-6):
    slope_a = (values[1] - values[0]) / (points[1] - points[0])
    slope_b = (values[2] - values[1]) / (points[2] - points[1])
    assert slope_a > 0
    assert slope_b == pytest.approx(slope_a, rel=rel, abs=4 / (points[1] - points[0]))
    return slope_a


@pytest.mark.parametrize("workers", [0, 2])
def test_per_edge_parts_grow_linearly_with_edges(workers):
    edges = [20_000_000, 40_000_000, 60_000_000]
    config = PartitionConfig(num_parts=16)
    plans = _plans(edges, lambda e: plan_run(_sizes(2_000_000, e), config, workers=workers, threads=2,
                                             replication_factor=3.0))
    # Routed edges are 8 bytes (src, dst int32 below 2**31 nodes) per edge row, the assignment 2 (int16),
    # and each of ASEP's restreams 4 more (a pass's partitions and its pre-partitioning, both removed).
    assert _assert_linear([_stage(p, "route").written for p in plans], edges) == pytest.approx(8, abs=1e-6)
    written = _assert_linear([_stage(p, "assignment").written for p in plans], edges)
    assert written == pytest.approx(2 + 4 * config.restream_passes, abs=1e-6)
    # A partition's CSR task holds its edge rows: grows with |E|/k (on threads, the
    # driver's memory kept from the assignment may still exceed it).
    finalize = [_stage(p, "finalize edges") for p in plans]
    if workers:
        _assert_linear([s.workers for s in finalize], edges)
    # Everything staged until the commit grows linearly too (RF held fixed).
    _assert_linear([p.staging_bytes for p in plans], edges)
    # The O(|V|) state does not depend on |E|.
    assert len({_stage(p, "assignment").driver for p in plans}) == 1


def test_state_grows_linearly_with_nodes():
    # Past the sizes where a stage's peak moves from its per-batch buffers to its
    # O(|V|) arrays (validate: reading a node shard, then the degrees; metrics: the
    # stream, then the labels), every peak is linear.
    nodes = [40_000_000, 60_000_000, 80_000_000]
    config = PartitionConfig(num_parts=16)
    plans = _plans(nodes, lambda n: plan_run(_sizes(n, 50_000_000), config, workers=2, replication_factor=3.0))
    for name in ("validate", "structural clustering", "mapping", "assignment", "masters", "metrics", "state",
                 "node map"):
        _assert_linear([_stage(p, name).driver for p in plans], nodes)
    _assert_linear([_stage(p, "finalize edges").workers for p in plans], nodes)
    # A node-table sweep holds chunk buffers and one step per partition, not its rows.
    assert len({_stage(p, "finalize nodes").workers for p in plans}) == 1
    # The packed assignment row alone is 64 bytes per vertex up to k = 192.
    assert _assert_linear([_stage(p, "assignment").driver for p in plans], nodes) >= 64
    wide = _plans(nodes, lambda n: plan_run(_sizes(n, 50_000_000), PartitionConfig(num_parts=512), workers=2,
                                            replication_factor=3.0))
    assert (_assert_linear([_stage(p, "assignment").driver for p in wide], nodes)
            > _assert_linear([_stage(p, "assignment").driver for p in plans], nodes))
    # The decoded node table: 4d + 9 bytes per node (besides the decoded edge copy).
    assert _assert_linear([_stage(p, "validate").written for p in plans], nodes) == pytest.approx(
        4 * 32 + 9, rel=1e-9)


def test_threads_hold_the_tasks_in_the_driver():
    sizes, config = _sizes(2_000_000, 20_000_000), PartitionConfig(num_parts=16)
    threads = plan_run(sizes, config, workers=0, threads=2)
    processes = plan_run(sizes, config, workers=2)
    remote = plan_run(sizes, config, workers=2, remote=True)
    name = "finalize nodes"
    assert _stage(threads, name).workers == 0 and _stage(processes, name).workers > 0
    assert _stage(threads, name).driver > _stage(processes, name).driver
    assert _stage(remote, name).workers == 0 and remote.peak_bytes < processes.peak_bytes
    halo = plan_run(sizes, config, workers=2, halo=1)
    assert _stage(halo, "route").written > _stage(processes, "route").written
    with pytest.raises(InputError, match="--plan-rf"):
        plan_run(sizes, config, replication_factor=0.5)


@pytest.fixture(scope="module")
def synth_input(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("plan") / "in"
    generate(root, SynthConfig(num_nodes=600, num_edges=4000, num_classes=3, dim=8), shard_rows=1500)
    return root


def test_input_sizes_from_metadata(synth_input, tmp_path):
    sizes = input_sizes(synth_input)
    assert (sizes.num_nodes, sizes.num_edges, sizes.feat_dim) == (600, 4000, 8)
    assert (sizes.edge_shards, sizes.max_edge_shard_rows) == (3, 1500)
    # Without meta.json: the footers and the node schema.
    bare = tmp_path / "bare"
    write_input(bare, num_nodes=50, num_edges=321, dim=7, edge_shards=2, node_shards=2)
    (bare / "meta.json").unlink(missing_ok=True)
    sizes = input_sizes(bare)
    assert (sizes.num_nodes, sizes.num_edges, sizes.feat_dim) == (50, 321, 7)
    plan = plan_partition(bare, tmp_path / "out", PartitionConfig(num_parts=2))
    assert plan.free_memory > 0 and plan.free_disk > 0
    assert not (tmp_path / "out").exists()


def _partition(synth_input: Path, out: Path, *extra: str) -> int:
    return main(["partition", str(synth_input), str(out), "-k", "2", "--workers", "0", "--no-progress", *extra])


def test_dry_run_prints_the_plan_and_writes_nothing(synth_input, tmp_path, capsys):
    out = tmp_path / "out"
    before = sorted(p.name for p in tmp_path.iterdir())
    assert _partition(synth_input, out, "--dry-run") == 0
    text = capsys.readouterr().out
    for needle in ("plan: 600 nodes, 4,000 edges", "assignment", "finalize nodes", "node map", "peak RSS",
                   "written", "available memory", "free disk", "fits this machine"):
        assert needle in text, needle
    assert "committed generation" not in text
    assert not out.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == before


@pytest.mark.parametrize("short", ["memory", "disk"])
def test_a_run_that_does_not_fit_is_refused_before_anything_is_written(synth_input, tmp_path, capsys,
                                                                        monkeypatch, short):
    out = tmp_path / "out"
    if short == "memory":
        monkeypatch.setattr(plan_module, "free_memory_bytes", lambda: 1 << 20)
    else:
        monkeypatch.setattr(plan_module, "free_disk_bytes", lambda path: 1000)
    expected = plan_partition(synth_input, out, PartitionConfig(num_parts=2), workers=0)
    assert _partition(synth_input, out) == 1
    err = capsys.readouterr().err
    assert "--ignore-plan" in err
    if short == "memory":
        # The driver's baseline is this process's size, measured again by the run.
        # (MiB or GiB: the baseline is this test process's, large late in a long test run.)
        needed = re.search(r"a peak memory of ([\d.]+) (MiB|GiB) \(stage [a-z ]+\) with 1\.0 MiB available", err)
        assert needed and float(needed.group(1)) * (1024 if needed.group(2) == "GiB" else 1) == pytest.approx(
            expected.peak_bytes / 2**20, rel=0.1)
    else:
        assert f"{human_bytes(expected.disk_bytes)} of disk" in err and "1000 B free" in err
    assert not out.exists()

    # --ignore-plan runs it anyway, and prints the plan first.
    assert _partition(synth_input, out, "--ignore-plan") == 0
    text = capsys.readouterr().out
    assert text.index("plan: 600 nodes") < text.index("committed generation 1")
    manifest = read_manifest(out)
    assert manifest["num_edges"] == 4000 and manifest["num_parts"] == 2


def test_memory_budget_is_parsed_and_planned_at_the_assignment(synth_input, tmp_path, capsys):
    from asepr.workflows.commands_partition import byte_count

    assert [byte_count(t) for t in ("0", "1500", "512K", "2M", "1.5GiB", "3g")] == [
        0, 1500, 512 * 2**10, 2 * 2**20, int(1.5 * 2**30), 3 * 2**30]
    for bad in ("-1M", "lots"):
        with pytest.raises(Exception, match="byte count"):
            byte_count(bad)
    # The budget is planned at the assignment stage: it holds at most the budget more
    # (10 kB here, below the ~65 kB this graph's whole held subgraph would take). The
    # hybrid does not restream, so the streaming run it is compared with does not either.
    sizes = input_sizes(synth_input)
    base, budget = (plan_run(sizes, PartitionConfig(num_parts=2, memory_budget=b, restream_passes=0),
                             driver_base=10**8)
                    for b in (0, 10_000))
    stage = {s.name: s for s in base.stages}, {s.name: s for s in budget.stages}
    assert stage[1]["assignment"].driver - stage[0]["assignment"].driver == 10_000
    assert _partition(synth_input, tmp_path / "c", "--memory-budget", "64K", "--dry-run") == 0
    assert "assignment" in capsys.readouterr().out


def test_the_fallback_stage_is_planned_for_asep_only_and_a_budget_is_capped_at_the_graph(synth_input):
    sizes = input_sizes(synth_input)

    def stages(**kw):
        return {s.name: s for s in plan_run(sizes, PartitionConfig(num_parts=2, **kw), driver_base=10**8).stages}

    assert "two-phase fallback" in stages()
    assert "two-phase fallback" not in stages(two_phase_fallback=False)
    assert "two-phase fallback" not in stages(algo="hdrf")
    # On its thread the fallback's state adds to ASEP's largest step; after it, only to
    # what ASEP keeps: the concurrent plan is the larger, by less than one more state.
    concurrent, sequential = stages()["two-phase fallback"], stages(concurrent_fallback=False)["two-phase fallback"]
    asep = max(stages()[name].driver for name in ("structural clustering", "mapping", "assignment"))
    assert sequential.driver < concurrent.driver < asep + sequential.driver
    # A budget beyond the whole graph plans what the hybrid can hold, not the budget.
    whole, huge = stages(memory_budget=10**7), stages(memory_budget=2**40)
    assert huge["assignment"].driver == whole["assignment"].driver < stages()["assignment"].driver + 10**7
