"""``asepr rebalance``: drift, community moves, invariants, crash safety, refusals."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest

from asepr.pipeline import ingest, rebalance
from asepr.pipeline.config import PartitionConfig
from asepr.pipeline.inputs.synth import SynthConfig, generate
from asepr.pipeline.partition_run import partition_to_store
from asepr.pipeline.stages.metrics import drift_metrics
from asepr.pipeline.verify import verify_output
from asepr.storage.errors import StoreError
from asepr.storage.partitions.manifest import STAGING_NAME, read_manifest
from asepr.storage.partitions.state import read_state
from tests.pipeline.crash import Crash, crash_at
from tests.pipeline.ingest_cases import edge_multiset, skewed_edges


@pytest.fixture(scope="module")
def drifted(tmp_path_factory) -> Path:
    """An output whose partition with the most communities received intra-community edges.

    Many classes for k = 4 make many small communities; the new edges grow only the
    small communities of one partition, so its community volume passes the cap.
    """
    base = tmp_path_factory.mktemp("rebalance")
    generate(base / "in", SynthConfig(num_nodes=1200, num_edges=8000, num_classes=24, dim=8), shard_rows=4000)
    out = base / "out"
    partition_to_store(base / "in", out, PartitionConfig(num_parts=4))
    skewed_edges(out, base / "hot")
    manifest = ingest(out, base / "hot")
    assert manifest["metrics"]["drift"]["rebalance_advised"], manifest["metrics"]["drift"]
    return out


def test_drift_metrics():
    loads = np.array([10, 10, 10, 10])
    part_of = np.array([0, 1, 2, 3, 0, -1])
    volume = np.array([20, 20, 20, 20, 10, 5])
    d = drift_metrics(loads, 0.05, part_of, volume)
    assert d["edge_balance"] == 1.0 and d["edge_cap"] == 11 and d["edge_over_cap"] == []
    assert d["community_volume"] == [30, 20, 20, 20] and d["volume_over_cap"] == [0]
    assert d["rebalance_advised"] and d["overloaded"] == [0]
    d = drift_metrics(loads, 0.05, np.array([0, 1, 2, 3]), np.array([20, 20, 20, 20]))
    assert not d["rebalance_advised"] and d["community_balance"] == 1.0
    assert not drift_metrics(np.array([3, 3]), 0.05)["rebalance_advised"]


def test_rebalance_moves_communities_and_keeps_every_invariant(drifted, tmp_path):
    out = tmp_path / "out"
    shutil.copytree(drifted, out)
    before = read_manifest(out)
    edges_before = edge_multiset(out)
    loads_before = read_state(out)["partitions/loads"].copy()
    manifest = rebalance(out)
    assert manifest["generation"] == before["generation"] + 1
    drift = manifest["metrics"]["drift"]
    assert drift["community_balance"] < before["metrics"]["drift"]["community_balance"]
    assert not drift["volume_over_cap"], drift
    record = manifest["rebalances"][-1]
    assert record["moved_communities"] > 0 and record["moved_edges"] > 0
    report = verify_output(out)
    assert report.ok, report.summary()
    assert edge_multiset(out) == edges_before
    state = read_state(out)
    loads = state["partitions/loads"]
    assert loads.sum() == loads_before.sum() and int(np.abs(loads - loads_before).sum()) == 2 * record["moved_edges"]
    assert loads.max() <= manifest["metrics"]["cap"]
    # Moved communities now map to their destination.
    moved_to = {m["to"] for m in record["moves"]}
    assert moved_to and all(0 <= q < 4 for q in moved_to)
    # A second rebalance finds nothing to do; an ingest continues from the new map.
    assert rebalance(out)["generation"] == manifest["generation"]


def test_rebalance_of_a_balanced_output_changes_nothing(tmp_path):
    generate(tmp_path / "in", SynthConfig(num_nodes=1000, num_edges=6000, num_classes=4, dim=4), shard_rows=3000)
    partition_to_store(tmp_path / "in", tmp_path / "out", PartitionConfig(num_parts=2))
    before = (tmp_path / "out" / "manifest.json").read_bytes()
    if read_manifest(tmp_path / "out")["metrics"]["drift"]["rebalance_advised"]:
        pytest.skip("this seed is past the cap right after partitioning")
    assert rebalance(tmp_path / "out")["generation"] == 1
    assert (tmp_path / "out" / "manifest.json").read_bytes() == before
    assert not (tmp_path / "out" / STAGING_NAME).exists()


def test_rebalance_refuses_halo_outputs_and_algorithms_without_communities(tmp_path):
    generate(tmp_path / "in", SynthConfig(num_nodes=500, num_edges=3000, num_classes=4, dim=4), shard_rows=3000)
    partition_to_store(tmp_path / "in", tmp_path / "halo", PartitionConfig(num_parts=2), halo=1)
    with pytest.raises(StoreError, match="halo"):
        rebalance(tmp_path / "halo")
    partition_to_store(tmp_path / "in", tmp_path / "hash", PartitionConfig(num_parts=2, algo="hash"))
    with pytest.raises(StoreError, match="no communities"):
        rebalance(tmp_path / "hash")
    assert verify_output(tmp_path / "hash").ok


def test_killed_rebalance_leaves_the_previous_generation(drifted, tmp_path, monkeypatch):
    out = tmp_path / "out"
    shutil.copytree(drifted, out)
    before = read_manifest(out)

    crash_at(monkeypatch, "between-commits")
    with pytest.raises(Crash):
        rebalance(out)
    monkeypatch.undo()
    assert read_manifest(out) == before
    assert verify_output(out).ok
    manifest = rebalance(out)
    assert manifest["generation"] == before["generation"] + 1 and manifest["run"]["resumed_partitions"]
    report = verify_output(out)
    assert report.ok, report.summary()
