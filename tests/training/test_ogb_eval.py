"""OGB's evaluators for runs on `asepr import ogb` inputs: the metrics against the ``ogb``
package's own Evaluator, and a trained run scored on OGB's published evaluation sets."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from asepr.storage.errors import InputError
from asepr.storage.importers import import_dataset
from tests.storage.test_ogb import ogbl_link_like, ogbn_arxiv_like
from asepr.training.centralized import load_input_graph, run_centralized
from asepr.training.rundir.checkpoint import RunDir
from asepr.training.config import TrainConfig
from asepr.training.graph.data import prepare_features
from asepr.training.models import build_model, graph_operator, unflatten_into
from asepr.training.evaluation.ogb_eval import accuracy, evaluate_run, hits_at, mrr, rocauc

ogb_node = pytest.importorskip("ogb.nodeproppred", reason="needs the ogb package (asepr[test] has it)")
ogb_link = pytest.importorskip("ogb.linkproppred", reason="needs the ogb package (asepr[test] has it)")

CONFIG = TrainConfig(hidden=16, rounds=2, local_epochs=1, threads=1, feature_norm="none")


@pytest.mark.parametrize("seed", range(5))
def test_the_metrics_equal_ogbs_evaluators_ties_included(seed):
    rng = np.random.default_rng(seed)
    y_true, y_pred = rng.integers(0, 5, 300), rng.integers(0, 5, 300)
    want = ogb_node.Evaluator("ogbn-arxiv").eval({"y_true": y_true[:, None], "y_pred": y_pred[:, None]})["acc"]
    assert accuracy(y_true, y_pred) == want
    binary = rng.integers(0, 2, 300)
    score = rng.integers(0, 20, 300).astype(np.float64)  # many ties
    proteins = ogb_node.Evaluator("ogbn-proteins")  # 112 tasks: one task repeated has its own AUC
    want = proteins.eval({"y_true": np.repeat(binary[:, None], 112, 1), "y_pred": np.repeat(score[:, None], 112, 1)})
    assert rocauc(binary, score) == pytest.approx(want["rocauc"], abs=1e-12)
    pos, neg = torch.randint(0, 30, (200,)).float(), torch.randint(0, 30, (500,)).float()
    for name, k in (("ogbl-ppa", 100), ("ogbl-collab", 50), ("ogbl-ddi", 20)):
        want = ogb_link.Evaluator(name).eval({"y_pred_pos": pos, "y_pred_neg": neg})[f"hits@{k}"]
        assert hits_at(pos, neg, k) == want
    assert hits_at(pos, neg[:10], 20) == 1.0
    negs = torch.randint(0, 30, (200, 40)).float()
    want = ogb_link.Evaluator("ogbl-citation2").eval({"y_pred_pos": pos, "y_pred_neg": negs})["mrr_list"].mean()
    assert mrr(pos, negs) == pytest.approx(float(want), abs=1e-7)


def test_an_ogbn_run_is_scored_by_accuracy_on_the_published_split(tmp_path):
    ogbn_arxiv_like(tmp_path / "ogb")
    import_dataset("ogb", tmp_path / "ogb" / "ogbn_arxiv", tmp_path / "in")
    rows = run_centralized(tmp_path / "in", tmp_path / "run", CONFIG)
    result = evaluate_run(tmp_path / "run")
    assert result["ogb_dataset"] == "ogbn-arxiv" and result["ogb_metric"] == "acc"
    assert result["ogb_round"] == rows[-1]["round"]
    # The trainer's exact accuracy of the same (last) model is OGB's acc on the same split.
    assert result["ogb_valid"] == pytest.approx(rows[-1]["val"]) and result["ogb_test"] == pytest.approx(rows[-1]["test"])


@pytest.mark.parametrize("name", ["ogbl-ppa", "ogbl-citation2"])
def test_an_ogbl_run_is_scored_on_ogbs_own_held_out_edges_and_negatives(tmp_path, name):
    ogbl_link_like(tmp_path / "ogb", name)
    folder = tmp_path / "ogb" / name.replace("-", "_")
    import_dataset("ogb", folder, tmp_path / "in")
    config = TrainConfig(hidden=16, rounds=2, local_epochs=1, threads=1, feature_norm="none", task="link")
    run_centralized(tmp_path / "in", tmp_path / "run", config)
    result = evaluate_run(tmp_path / "run")
    # Independently: the run's last model on the whole graph, OGB's loader for the split and OGB's evaluator.
    graph = load_input_graph(tmp_path / "in")
    runs = RunDir(tmp_path / "run")
    x = prepare_features(graph.x, config)
    model = build_model(config, x.shape[1], config.hidden)
    unflatten_into(model, runs.load_global(runs.latest_round())["global"])
    model.eval()
    with torch.no_grad():
        z = model(x, graph_operator(config.model, graph.edge_index, graph.num_nodes))
    split = ogb_link.LinkPropPredDataset(name, root=str(tmp_path / "ogb")).get_edge_split()
    evaluator = ogb_link.Evaluator(name)
    for part in ("valid", "test"):
        if name == "ogbl-ppa":
            pos, neg = split[part]["edge"], split[part]["edge_neg"]
            want = evaluator.eval({"y_pred_pos": (z[pos[:, 0]] * z[pos[:, 1]]).sum(-1),
                                   "y_pred_neg": (z[neg[:, 0]] * z[neg[:, 1]]).sum(-1)})["hits@100"]
        else:
            src, dst, neg = split[part]["source_node"], split[part]["target_node"], split[part]["target_node_neg"]
            want = float(evaluator.eval({"y_pred_pos": (z[src] * z[dst]).sum(-1),
                                         "y_pred_neg": (z[src].unsqueeze(1) * z[neg]).sum(-1)})["mrr_list"].mean())
        assert result[f"ogb_{part}"] == pytest.approx(want, abs=1e-6)
    assert result["ogb_metric"] == ("hits@100" if name == "ogbl-ppa" else "mrr")


def test_runs_that_cannot_be_compared_are_refused_or_left_out(tmp_path):
    ogbn_arxiv_like(tmp_path / "ogb")
    import_dataset("ogb", tmp_path / "ogb" / "ogbn_arxiv", tmp_path / "in")
    config = TrainConfig(hidden=16, rounds=1, local_epochs=1, threads=1, feature_norm="none", task="link")
    run_centralized(tmp_path / "in", tmp_path / "link-run", config)
    with pytest.raises(InputError) as info:
        evaluate_run(tmp_path / "link-run")
    assert "--task node (an ogbn-arxiv dataset)" in str(info.value) and "found --task link" in str(info.value)
    import_dataset("edgelist", tmp_path / "ogb" / "ogbn_arxiv" / "raw" / "edge.csv.gz", tmp_path / "plain-in")
    run_centralized(tmp_path / "plain-in", tmp_path / "plain-run", config)
    assert evaluate_run(tmp_path / "plain-run") == {}


def test_bench_train_reports_ogbs_metric_beside_its_own(tmp_path):
    from asepr.workflows.bench.train import bench_train

    ogbn_arxiv_like(tmp_path / "ogb")
    import_dataset("ogb", tmp_path / "ogb" / "ogbn_arxiv", tmp_path / "ogbn-arxiv")
    results = bench_train([str(tmp_path / "ogbn-arxiv")], [2], ["centralized"], tmp_path / "bench",
                          config=CONFIG, echo=lambda *a: None)
    (row,) = results
    assert row["ogb_metric"] == "acc" and row["ogb_error"] is None
    assert row["ogb_test"] == pytest.approx(row["final_test"])
    report = (tmp_path / "bench" / "train.md").read_text()
    assert "## OGB's evaluator" in report
    assert f"| ogbn-arxiv | 1 | centralized | - | {CONFIG.seed} | acc | {row['ogb_valid']:.4f} |" in report


def test_the_report_names_runs_that_were_not_scored():
    from asepr.workflows.bench.train_report import ogb_rows, ogb_section

    base = {"dataset": "d", "k": 2, "strategy": "avg", "partitioner": "asep", "seed": 0}
    none = {**base, "ogb_metric": None, "ogb_error": None}
    failed = {**base, "ogb_metric": None, "ogb_error": "input x: expected --task node | found --task link"}
    assert ogb_rows([none]) == [] and ogb_section([none]) == []
    (row,) = ogb_rows([none, failed])
    assert row["OGB metric"] == "not scored: input x: expected --task node / found --task link"
    assert row["OGB test"] == "-"


def test_a_run_on_partitions_is_scored_on_the_input_they_came_from(tmp_path):
    from asepr.pipeline.config import PartitionConfig
    from asepr.pipeline.partition_run import partition_to_store
    from asepr.training.loop.distributed import run_trainer

    ogbn_arxiv_like(tmp_path / "ogb")
    import_dataset("ogb", tmp_path / "ogb" / "ogbn_arxiv", tmp_path / "in")
    partition_to_store(tmp_path / "in", tmp_path / "parts", PartitionConfig(num_parts=2, algo="hdrf"))
    config = TrainConfig(hidden=16, rounds=2, local_epochs=1, threads=1, feature_norm="none", eval_mode="exact")
    rows = run_trainer(tmp_path / "parts", tmp_path / "run", config)  # one rank holding both partitions
    result = evaluate_run(tmp_path / "run")
    assert result["ogb_metric"] == "acc" and result["ogb_round"] == 2
    assert result["ogb_test"] == pytest.approx(rows[-1]["test"]) and result["ogb_valid"] == pytest.approx(rows[-1]["val"])
