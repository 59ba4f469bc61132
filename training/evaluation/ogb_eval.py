"""The Open Graph Benchmark's evaluators, for runs on inputs imported with ``asepr import ogb``.

A figure is comparable with OGB's leaderboards only when it is computed as OGB's
``Evaluator`` computes it, on OGB's own evaluation sets. The importer records the
dataset's name, task and metric in ``meta.json`` (``ogb.eval_metric``, from OGB's
catalogue) and, for a link dataset, writes the published held-out edges and negatives
as side tables. :func:`evaluate_run` takes a finished run's last global model, computes
its outputs on the whole graph (every input edge passes messages, as OGB's
examples evaluate), and scores them with the dataset's metric:

* ``acc`` (ogbn-arxiv, -products, -papers100M): the share of the split's labelled
  nodes whose arg-max class is their label;
* ``rocauc``: ROC-AUC of the class-1 log-odds over the labelled nodes, ties counted
  half (binary labels: the project reads one label column, so a multi-task dataset such
  as ogbn-proteins is refused);
* ``hits@K`` (ogbl-ppa, -collab, -ddi): the share of held-out positive edges scored
  above the K-th highest score among the shared negative edges (1.0 when there are
  fewer than K negatives);
* ``mrr`` (ogbl-citation2): the mean reciprocal rank of each positive among its own
  negatives, a tie counted half way (the mean of the optimistic and pessimistic ranks).

A link run is trained by :class:`asepr.training.tasks.LinkTask`, which still holds out its own
share of OGB's training edges (``link_val_fraction``, ``link_test_fraction``) for the
metrics rows it writes; OGB's figure is of a model that did not train on those edges.
Edges are scored as the link task scores them (:class:`asepr.training.tasks.LinkTask`: the
dot product of the two embeddings). The metric functions follow the installed ``ogb``
package's code line for line; the tests check them against it.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow.parquet as pq
import torch

from asepr.storage.errors import AseprError, InputError, format_problem
from asepr.storage.inputs.directory import read_meta
from asepr.storage.locations.fs import join, resolve
from asepr.storage.partitions.manifest import read_manifest
from asepr.training.rundir.checkpoint import RunDir, TrainerError
from asepr.training.config import TrainConfig
from asepr.training.graph.data import LocalGraph, prepare_features
from asepr.training.models import build_model, graph_operator, num_parameters, unflatten_into

__all__ = ["OGB_COLUMNS", "accuracy", "evaluate_run", "hits_at", "mrr", "ogb_columns", "ogb_info", "rocauc",
           "run_input"]

log = logging.getLogger(__name__)

#: The columns :func:`evaluate_run` returns.
OGB_COLUMNS = ("ogb_dataset", "ogb_metric", "ogb_valid", "ogb_test", "ogb_round")


# --- OGB's metrics ---------------------------------------------------------------------------


def accuracy(y_true: np.ndarray, y_pred: np.ndarray) -> float:
    """OGB's ``acc``: correct predictions over the labelled rows (label < 0: unlabelled)."""
    y_true, y_pred = np.asarray(y_true).reshape(-1), np.asarray(y_pred).reshape(-1)
    labelled = y_true >= 0
    return float(np.sum(y_true[labelled] == y_pred[labelled])) / max(int(labelled.sum()), 1)


def rocauc(y_true: np.ndarray, score: np.ndarray) -> float:
    """OGB's ``rocauc`` of one binary task: the probability that a positive row scores above
    a negative one, ties counted half (scikit-learn's ``roc_auc_score``); NaN without both."""
    y_true, score = np.asarray(y_true).reshape(-1), np.asarray(score, dtype=np.float64).reshape(-1)
    keep = y_true >= 0
    y_true, score = y_true[keep], score[keep]
    pos, neg = int((y_true == 1).sum()), int((y_true == 0).sum())
    if not pos or not neg:
        return float("nan")
    order = np.argsort(score, kind="mergesort")
    ranks = np.empty(len(score), dtype=np.float64)
    sorted_score = score[order]
    starts = np.flatnonzero(np.r_[True, sorted_score[1:] != sorted_score[:-1]])
    ends = np.r_[starts[1:], len(score)]
    ranks[order] = np.repeat((starts + ends + 1) / 2.0, ends - starts)  # average 1-based ranks of ties
    return float((ranks[y_true == 1].sum() - pos * (pos + 1) / 2.0) / (pos * neg))


def hits_at(pos: torch.Tensor, neg: torch.Tensor, k: int) -> float:
    """OGB's ``hits@K`` with negatives shared by every positive."""
    if len(neg) < k:
        return 1.0
    kth = torch.topk(neg, k)[0][-1]
    return float(torch.sum(pos > kth)) / len(pos)


def mrr(pos: torch.Tensor, neg: torch.Tensor) -> float:
    """OGB's ``mrr``: ``pos`` [n], each against its own negatives ``neg`` [n, q]."""
    pos = pos.view(-1, 1)
    optimistic = (neg > pos).sum(dim=1)
    pessimistic = (neg >= pos).sum(dim=1)
    rank = 0.5 * (optimistic + pessimistic) + 1
    return float((1.0 / rank.to(torch.float)).mean())


# --- which input, which model ----------------------------------------------------------------


def ogb_info(input_url: str | Path) -> dict[str, Any] | None:
    """The ``ogb`` record of an input's ``meta.json`` (None for an input not imported from OGB)."""
    meta = read_meta(input_url) or {}
    info = meta.get("ogb")
    return info if isinstance(info, dict) else None


def run_input(run_dir: str | Path) -> str | None:
    """The input a run trained on: its own (centralized, fds), or its partitions' input."""
    info = RunDir(run_dir).read_run_info() or {}
    if info.get("input"):
        return str(info["input"])
    if info.get("out"):
        return str((read_manifest(info["out"]).get("input") or {}).get("url") or "") or None
    return None


def _final_model(run_dir: Path, graph: LocalGraph, config: TrainConfig, out_dim: int):
    runs = RunDir(run_dir)
    latest = runs.latest_round()
    if latest is None:
        raise TrainerError(format_problem(f"run directory {run_dir}", "a complete round's checkpoint",
                                          "none", "let the run finish a round, then evaluate it."))
    flat = runs.load_global(latest)["global"].to(torch.float32)
    x = prepare_features(graph.x, config)
    model = build_model(config, x.shape[1], out_dim)
    if flat.numel() != num_parameters(model):
        raise TrainerError(format_problem(
            f"run directory {run_dir}, round {latest + 1}", f"{num_parameters(model)} parameters (the model of "
            "its run.json on this input)", f"{flat.numel()}", "evaluate the run on the input it trained on.",
        ))
    unflatten_into(model, flat)
    model.eval()
    with torch.no_grad():
        out = model(x, graph_operator(config.model, graph.edge_index, graph.num_nodes))
    return out, latest


def _node_scores(graph: LocalGraph, out: torch.Tensor, metric: str) -> tuple[float, float]:
    y = graph.y.numpy()
    scores = []
    for mask in (graph.val_mask, graph.test_mask):
        m = mask.numpy()
        if metric == "acc":
            scores.append(accuracy(y[m], out[m].argmax(-1).numpy()))
        else:
            scores.append(rocauc(y[m], (out[m, 1] - out[m, 0]).numpy()))
    return scores[0], scores[1]


def _table(input_url: str, name: str):
    fs, base = resolve(input_url)
    path = join(base, name)
    if not fs.exists(path):
        raise InputError(format_problem(f"input {input_url}", f"the OGB evaluation table {name} (meta.json ogb."
                                        "eval_tables)", "no such file", "import the dataset again with "
                                        "`asepr import ogb`."))
    return pq.read_table(path, filesystem=fs)


def _link_scores(input_url: str, z: torch.Tensor, metric: str) -> tuple[float, float]:
    def score(u, v):
        u, v = (torch.from_numpy(np.array(a, dtype=np.int64)) for a in (u, v))
        return (z[u] * z[v]).sum(-1)

    scores = []
    for split in ("valid", "test"):
        pos = _table(input_url, f"ogb-{split}.parquet")
        src, dst = pos.column("src").to_numpy(), pos.column("dst").to_numpy()
        if metric == "mrr":
            negs = pos.column("dst_neg").combine_chunks()
            width = negs.type.list_size
            neg_dst = negs.flatten().to_numpy().reshape(-1, width)
            neg = score(np.repeat(src, width), neg_dst.reshape(-1)).view(-1, width)
            scores.append(mrr(score(src, dst), neg))
        else:
            neg = _table(input_url, f"ogb-{split}-neg.parquet")
            scores.append(hits_at(score(src, dst), score(neg.column("src").to_numpy(), neg.column("dst").to_numpy()),
                                  int(metric.split("@")[1])))
    return scores[0], scores[1]


def _supported(info: dict[str, Any], config: TrainConfig, input_url: str) -> str:
    metric = str(info.get("eval_metric") or "")
    task = info.get("task")
    ok = (task == "node" and metric in ("acc", "rocauc")) or (
        task == "link" and (metric == "mrr" or (metric.startswith("hits@") and metric[5:].isdigit())))
    if not ok:
        raise InputError(format_problem(
            f"input {input_url}, meta.json ogb", "a node dataset scored by acc or rocauc, or a link dataset by "
            "hits@K or mrr", f"task {task!r}, eval_metric {metric!r}",
            "OGB's catalogue gives this dataset another metric; compare it by its own evaluator.",
        ))
    if config.task != task:
        raise InputError(format_problem(
            f"input {input_url}", f"--task {task} (an {info.get('name')} dataset)", f"--task {config.task}",
            f"train with --task {task} to compare with OGB's leaderboard.",
        ))
    return metric


def evaluate_run(run_dir: str | Path, input_url: str | Path | None = None,
                 graph: LocalGraph | None = None) -> dict[str, Any]:
    """OGB's metric of a finished run's last global model on valid and test (module docstring).

    Parameters
    ----------
    run_dir
        A run directory of ``asepr train`` (any strategy) or of the centralized baseline.
    input_url
        The input (default: the one the run trained on, from its ``run.json``).
    graph
        The whole input as one graph (:func:`asepr.training.centralized.load_input_graph`), to
        share one load between runs; loaded here when None.

    Returns
    -------
    dict
        :data:`OGB_COLUMNS` (``ogb_round`` 1-based); empty for an input not imported from OGB.

    Raises
    ------
    InputError
        The dataset's metric is none of the four, the run trained another task, or an
        evaluation table is missing.
    TrainerError
        The run has no complete round, or its model does not fit the input.
    """
    from asepr.training.centralized import load_input_graph

    run_dir = Path(run_dir)
    input_url = str(input_url or run_input(run_dir) or "")
    info = ogb_info(input_url) if input_url else None
    if info is None:
        return {}
    config = TrainConfig.from_dict((RunDir(run_dir).read_run_info() or {}).get("config", {}),
                                   f"{run_dir}/run.json config")
    metric = _supported(info, config, input_url)
    graph = graph if graph is not None else load_input_graph(input_url)
    out_dim = config.hidden if info["task"] == "link" else int(graph.y.max()) + 1
    if metric == "rocauc" and out_dim != 2:
        raise InputError(format_problem(
            f"input {input_url}, node labels", "two classes (rocauc of one binary task)", f"{out_dim} classes",
            "a multi-task OGB dataset (ogbn-proteins) is not read by asepr's one label column.",
        ))
    out, latest = _final_model(run_dir, graph, config, out_dim)
    if info["task"] == "node":
        valid, test = _node_scores(graph, out, metric)
    else:
        valid, test = _link_scores(input_url, out, metric)
    log.info("%s: OGB %s of round %d: valid %.4f, test %.4f", run_dir, metric, latest + 1, valid, test)
    return {"ogb_dataset": info.get("name"), "ogb_metric": metric, "ogb_valid": valid, "ogb_test": test,
            "ogb_round": latest + 1}


def ogb_columns(run_dir: str | Path) -> dict[str, Any]:
    """:func:`evaluate_run` for a benchmark's report, every key of :data:`OGB_COLUMNS` and
    ``ogb_error`` always present (None where they do not apply, so that one table holds
    runs on OGB and other inputs): a run that cannot be scored gets ``ogb_error`` (the
    reason, also logged) instead of stopping the benchmark."""
    row: dict[str, Any] = dict.fromkeys((*OGB_COLUMNS, "ogb_error"))
    try:
        row.update(evaluate_run(run_dir))
    except AseprError as exc:
        log.warning("%s: not scored by OGB's evaluator: %s", run_dir, exc)
        row["ogb_error"] = str(exc)
    return row
