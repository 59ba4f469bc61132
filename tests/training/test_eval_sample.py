"""The exact evaluation of a seeded sample of the validation and test masters: the same
vertices on every rank, in every round and for every partitioning; the whole-graph
model's outputs on exactly those vertices; fewer bytes than scoring every master; and
the metric's 95 % interval."""

from __future__ import annotations

import math

import pytest
import torch
import torch.distributed as dist

from tests.training.conftest import fork_ranks
from asepr.training.centralized import load_input_graph
from asepr.training.group.comm import Comm
from asepr.training.config import TrainConfig
from asepr.training.graph.data import load_local_graph, rank_partitions
from asepr.training.evaluation.eval_sample import auc_interval, draw_sample, sample_keys, wilson_interval
from asepr.training.evaluation.inference import Evaluator, ExactInference
from asepr.training.main import format_row
from asepr.training.models import GNN, graph_operator
from asepr.training.tasks import NodeTask

CORA_DIM, CORA_CLASSES, CAP, SEED = 1433, 7, 150, 3


def test_wilson_interval_matches_the_formula_and_narrows_with_n():
    low, high = wilson_interval(0.9, 100)
    assert low == pytest.approx(0.8256, abs=1e-4) and high == pytest.approx(0.9448, abs=1e-4)
    assert wilson_interval(1.0, 50)[1] == 1.0 and wilson_interval(1.0, 50)[0] < 1.0
    assert high - low > wilson_interval(0.9, 10_000)[1] - wilson_interval(0.9, 10_000)[0]
    assert all(math.isnan(v) for v in wilson_interval(0.5, 0))


def test_auc_interval_is_hanley_mcneil():
    low, high = auc_interval(0.8, 50, 50)
    q1, q2 = 0.8 / 1.2, 2 * 0.64 / 1.8
    se = math.sqrt((0.8 * 0.2 + 49 * (q1 - 0.64) + 49 * (q2 - 0.64)) / 2500)
    assert (low, high) == pytest.approx((0.8 - 1.959964 * se, 0.8 + 1.959964 * se), abs=1e-6)
    assert all(math.isnan(v) for v in auc_interval(0.8, 0, 10))


def test_sample_keys_are_uniform_and_depend_on_the_seed_only_through_the_id():
    gid = torch.arange(200_000, dtype=torch.int64)
    keys = sample_keys(gid, 0)
    assert float(keys.min()) >= 0 and float(keys.max()) < 1
    assert abs(float((keys < 0.1).double().mean()) - 0.1) < 0.005
    assert torch.equal(sample_keys(gid[::7], 0), keys[::7])  # a vertex's key is its own
    assert not torch.equal(sample_keys(gid, 1), keys)


@pytest.fixture(scope="module")
def cora_sample_case(cora_input):
    """The whole graph, a model, its outputs and the sample the whole graph draws."""
    full = load_input_graph(cora_input)
    torch.manual_seed(0)
    model = GNN("sage", CORA_DIM, 16, CORA_CLASSES, num_layers=2).eval()
    with torch.no_grad():
        ref = model(full.x, graph_operator("sage", full.edge_index, full.num_nodes))
    sample = draw_sample(full, Comm(), CAP, SEED)
    whole = draw_sample(full, Comm(), 10_000, SEED)
    assert whole.scored == whole.split and bool(torch.equal(whole.val, full.val_mask))
    assert min(whole.split) > 2 * CAP  # so CAP samples each split
    assert all(abs(n - CAP) < 4 * math.sqrt(CAP) for n in sample.scored)  # about CAP per split
    ids = (full.global_nid[sample.val], full.global_nid[sample.test])
    y = full.y
    accuracy = [float((ref[m].argmax(-1) == y[m]).double().mean()) for m in (sample.val, sample.test)]
    return model, ref, ids, accuracy, sample.scored, whole.split


def _union(ids: torch.Tensor, world: int) -> torch.Tensor:
    """The sorted ``ids`` of every rank (an all_gather padded with -1)."""
    sizes = [torch.zeros(1, dtype=torch.int64) for _ in range(world)]
    dist.all_gather(sizes, torch.tensor([len(ids)]))
    padded = torch.full((int(max(int(s) for s in sizes)),), -1, dtype=torch.int64)
    padded[:len(ids)] = ids
    parts = [torch.empty_like(padded) for _ in range(world)]
    dist.all_gather(parts, padded)
    return torch.sort(torch.cat([p[p >= 0] for p in parts])).values


def _sampled_rank(rank: int, world: int, out: str, model, ref, ids, accuracy, scored, split) -> None:
    comm = Comm()
    graph = load_local_graph(out, rank_partitions(4, rank, world))
    sample = draw_sample(graph, comm, CAP, SEED)
    # Every rank keeps the vertices the whole graph keeps, each once (at its master), and
    # again at the next draw.
    assert sample.scored == scored
    for mine, want in zip((sample.val, sample.test), ids):
        assert torch.equal(_union(graph.global_nid[mine], world), torch.sort(want).values)
    again = draw_sample(graph, comm, CAP, SEED)
    assert torch.equal(again.val, sample.val) and torch.equal(again.test, sample.test)

    # The sampled evaluation computes the whole-graph model's outputs on exactly its targets.
    sampled = ExactInference.for_task(NodeTask(graph, CORA_CLASSES, TrainConfig()), comm, sample=sample)
    full = ExactInference.for_task(NodeTask(graph, CORA_CLASSES, TrainConfig()), comm)
    for infer in (sampled, full):
        infer.prepare(2)
    before = comm.bytes.sent.get("eval", 0.0)
    got = sampled.forward(model)
    mine = comm.bytes.sent["eval"] - before
    t = sample.targets
    assert float((got[t] - ref[graph.global_nid[t]]).abs().max()) <= 1e-5
    before = comm.bytes.sent["eval"]
    full.forward(model)
    totals = torch.tensor([mine, comm.bytes.sent["eval"] - before], dtype=torch.float64)
    dist.all_reduce(totals)
    assert 0 < totals[0] < totals[1]  # the first layer's field shrinks with the sample

    # The Evaluator scores the sample: the whole-graph accuracy on the sampled vertices, its
    # interval, and the numbers scored, in every round.
    evaluator = Evaluator(NodeTask(graph, CORA_CLASSES, TrainConfig(seed=SEED, eval_sample=CAP)), comm)
    for evaluation in range(2):
        metrics = evaluator(model)
        assert metrics["val"] == pytest.approx(accuracy[0], abs=1 / scored[0])  # a near-tie may flip
        assert metrics["test"] == pytest.approx(accuracy[1], abs=1 / scored[1])
        assert (metrics["val_scored"], metrics["test_scored"]) == scored
        assert (metrics["val_split"], metrics["test_split"]) == split
        assert metrics["val_ci_low"] < metrics["val"] < metrics["val_ci_high"]
        assert (metrics["test_ci_low"], metrics["test_ci_high"]) == wilson_interval(metrics["test"], scored[1])
        assert metrics["eval_scoring_bytes"] > 0
        # The routing and the receptive field are set up (and counted) at the first evaluation only.
        assert (metrics["eval_setup_bytes"] > 0) == (evaluation == 0)


@pytest.mark.parametrize("world", [4, 2], ids=["one-partition-per-rank", "two-partitions-per-rank"])
def test_sampled_exact_evaluation_scores_the_same_vertices_as_the_whole_graph(cora_parts, cora_sample_case, world):
    fork_ranks(world, _sampled_rank, str(cora_parts(4)), *cora_sample_case)


def test_a_split_within_twice_the_cap_is_scored_whole_and_a_negative_cap_is_refused(cora_input):
    full = load_input_graph(cora_input)
    assert max(int(full.val_mask.sum()), int(full.test_mask.sum())) <= 2 * 300
    for cap in (0, 300, 1000):
        whole = draw_sample(full, Comm(), cap, SEED)
        assert torch.equal(whole.val, full.val_mask) and torch.equal(whole.test, full.test_mask)
    with pytest.raises(ValueError, match=">= 0"):
        draw_sample(full, Comm(), -1, SEED)
    with pytest.raises(ValueError, match="eval_sample"):
        TrainConfig(eval_sample=-1)


def test_the_printed_row_names_the_interval_of_a_sample_and_not_of_a_whole_split():
    row = {"round": 1, "generation": 1, "loss": 0.5, "eval_mode": "exact", "metric": "accuracy", "val": 0.91,
           "test": 0.9, "train_seconds": 1.0, "eval_seconds": 0.5, "bytes_sent_round": 2048.0,
           "val_ci_low": 0.9021, "val_ci_high": 0.9174, "val_scored": 5_012, "val_split": 400_000}
    assert "95% [0.9021, 0.9174] on 5,012 of 400,000 val masters" in format_row(row)
    assert "95%" not in format_row({**row, "val_scored": 400_000})
