"""The plan's committed disk against the real output, per kind of features.

One small synthetic graph (a degree-corrected SBM: communities for the partitioner to
find, as in real graphs) with four kinds of node features written over it: dense random
floats, which the store keeps raw; sparse and very sparse binary features, which its
codec shrinks 10-200 times; and a few dense features, where the ids, the CSR and the
state make most of the output. The plan must land within 0.5-2x of what ``du`` counts
for the committed output, and say how it sized the features and the replication factor.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

from asepr.pipeline.config import PartitionConfig
from asepr.pipeline.inputs.synth import SynthConfig, generate
from asepr.pipeline.partition_run import partition_to_store
from asepr.pipeline.planning.plan import plan_partition
from asepr.pipeline.planning.plan_inputs import (
    RFEstimate,
    estimate_rf,
    feature_store_ratio,
    input_sizes,
    sample_edges,
)
from asepr.storage.inputs.directory import open_input
from tests.storage.helpers import node_table

NUM_NODES, NUM_EDGES, K = 3000, 30_000, 4


@pytest.fixture(scope="module")
def graph(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("accuracy") / "graph"
    generate(root, SynthConfig(num_nodes=NUM_NODES, num_edges=NUM_EDGES, num_classes=4, dim=4), shard_rows=12_000)
    return root


def _features(kind: str, rng: np.random.Generator) -> np.ndarray:
    if kind == "dense":
        return rng.normal(size=(NUM_NODES, 64)).astype(np.float32)
    if kind == "few":
        return rng.normal(size=(NUM_NODES, 3)).astype(np.float32)
    dim, density = {"sparse": (400, 0.05), "very-sparse": (3000, 0.003)}[kind]
    return (rng.random((NUM_NODES, dim)) < density).astype(np.float32)


def _with_features(graph: Path, root: Path, kind: str) -> Path:
    """``graph`` with its node features replaced by ``kind``'s."""
    shutil.copytree(graph, root)
    feat = _features(kind, np.random.default_rng(1))
    for shard in sorted((root / "nodes").glob("*.parquet")):
        table = pq.read_table(shard)
        ids = table.column("id").to_numpy()
        pq.write_table(node_table(ids, feat[ids], table.column("label").to_numpy(), table.column("split").to_numpy()),
                       shard)
    meta = json.loads((root / "meta.json").read_text())
    meta["feat_dim"] = int(feat.shape[1])
    (root / "meta.json").write_text(json.dumps(meta))
    return root


def _du(root: Path) -> int:
    """Bytes of disk the tree takes, as ``du`` counts them (blocks of files and directories)."""
    total = 0
    for dirpath, dirnames, files in os.walk(root):
        total += os.lstat(dirpath).st_blocks * 512
        total += sum(os.lstat(os.path.join(dirpath, f)).st_blocks * 512 for f in files)
    return total


@pytest.mark.parametrize("kind", ["dense", "sparse", "very-sparse", "few"])
def test_committed_disk_is_planned_within_a_factor_of_two(graph, tmp_path, kind):
    source = _with_features(graph, tmp_path / "in", kind)
    out = tmp_path / "out"
    config = PartitionConfig(num_parts=K)
    plan = plan_partition(source, out, config)
    manifest = partition_to_store(source, out, config)
    measured = _du(out)
    assert 0.5 <= plan.committed_bytes / measured <= 2.0, (plan.committed_bytes, measured, plan.table())
    # The RF is estimated from the edges, on the safe side of the real one, and said so.
    assert "estimated" in plan.rf_source
    assert manifest["metrics"]["replication_factor"] <= plan.replication_factor <= 2 * manifest["metrics"][
        "replication_factor"]
    # Dense random floats are stored raw; binary features shrink, the sparser the more.
    if kind == "dense":
        assert plan.feature_ratio == 1.0 and "stored raw" in plan.table()
    if kind in ("sparse", "very-sparse"):
        assert plan.feature_ratio > (20 if kind == "very-sparse" else 4)
        assert "smaller as measured on a sample of" in plan.table()


def test_a_sample_of_a_long_stream_is_extrapolated_and_a_given_rf_wins(graph, tmp_path):
    source = open_input(graph)
    sizes = input_sizes(source)
    config = PartitionConfig(num_parts=K).resolved(source)
    src, dst, share = sample_edges(source, max_rows=6400)
    # Evenly spaced runs over the three shards, each row read once.
    assert len(src) == 6400 and share == pytest.approx(6400 / NUM_EDGES)
    assert src.min() >= 0 and max(src.max(), dst.max()) < NUM_NODES
    whole = estimate_rf(source, config, sizes)
    assert "over all 30,000 edge rows" in whole.source
    sampled = estimate_rf(source, config, sizes, max_rows=6400)
    assert "sample of the edge rows" in sampled.source and "extrapolated" in sampled.source
    # Extrapolated from a fifth of the stream, it lands near the whole stream's RF.
    assert 0.75 * whole.value <= sampled.value <= 1.5 * whole.value
    # --plan-rf overrides the estimate.
    plan = plan_partition(graph, tmp_path / "out", config, replication_factor=1.5)
    assert plan.replication_factor == 1.5 and plan.rf_source == "given with --plan-rf"
    assert isinstance(whole, RFEstimate)


def test_the_feature_sample_reads_about_one_chunk(graph, tmp_path):
    source = open_input(_with_features(graph, tmp_path / "in", "very-sparse"))
    ratio, rows = feature_store_ratio(source, 3000)
    assert 0 < rows <= (4 << 20) // (4 * 3000) and ratio > 20
