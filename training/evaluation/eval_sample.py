"""A seeded sample of the validation and test masters for the exact evaluation, and the
confidence interval of the metric measured on it.

The exact evaluation (:class:`asepr.training.evaluation.inference.ExactInference`) computes each layer
for the receptive field of the rows it scores. With the validation and test masters of a
large graph as targets, the first layer's field is nearly every vertex, so every replica
sends its first layer's partial once per evaluation: more bytes than a whole epoch of
training. Scoring a sample of the targets shrinks every layer's field with it.

**The sample.** Each split (validation, test) of ``N`` masters is scored whole when
``N <= 2 cap`` (or ``cap == 0``: a sample of at least half the split would save at most
half the bytes, and lose exactness); otherwise each of its masters is kept when a hash
of its global id and the seed (:func:`sample_keys`, uniform in ``[0, 1)``) is below
``cap / N``: about ``cap`` vertices, a Bernoulli sample without replacement. The default
:data:`DEFAULT_EVAL_SAMPLE` (5,000) scores every split of the report graphs whole (the
largest, coauthor-physics's, holds about 6,900 masters); on a graph of 2M vertices and 20
edges per vertex it keeps the evaluation's bytes per round below those of one epoch of
training (``docs/results/eval-memory``). The 95 % interval of an accuracy of 0.9 on
5,000 vertices is about +-0.8 points. The keep
rule reads nothing but the vertex's global id, so every rank, every round, every
partitioning (and the centralized run on the whole graph) scores the same vertices for
one seed, and curves and strategies are compared on the same targets.

**The interval.** The metric of a sample estimates the metric of the whole split; each
metrics row carries its 95 % interval (``val_ci_low`` .. ``val_ci_high``, the same for
test) and the numbers scored (``val_scored`` of ``val_split``): Wilson's score interval
for accuracy, from the ``n`` targets scored; the normal interval of Hanley and McNeil
(1982) for ROC-AUC, from the positives and negatives scored. No finite-population
correction is applied, so the interval is conservative for a sample of a split (and,
with the whole split scored, it is the split's own sampling uncertainty as an estimate
of the model's accuracy on unseen vertices).
"""

from __future__ import annotations

import copy
import dataclasses
import math
from dataclasses import dataclass

import numpy as np
import torch

from asepr.storage import SPLIT_NONE
from asepr.training.group.comm import Comm
from asepr.training.config import DEFAULT_EVAL_SAMPLE
from asepr.training.graph.data import LocalGraph
from asepr.training.graph.hashing import GOLDEN_GAMMA, splitmix64

__all__ = ["DEFAULT_EVAL_SAMPLE", "EvalSample", "auc_interval", "draw_sample", "sample_keys", "wilson_interval"]

_Z95 = 1.959963984540054  # the standard normal's 97.5 % quantile


def sample_keys(global_nid: torch.Tensor, seed: int) -> torch.Tensor:
    """A number in ``[0, 1)`` per vertex, uniform over vertices, from the splitmix64 hash
    of its global id and ``seed`` (float64, the order of ``global_nid``)."""
    with np.errstate(over="ignore"):
        z = splitmix64(global_nid.numpy().astype(np.uint64) + np.uint64(seed) * GOLDEN_GAMMA)
    return torch.from_numpy((z >> np.uint64(11)).astype(np.float64) / float(1 << 53))


@dataclass
class EvalSample:
    """The masters of this rank scored per split, and the global counts of the intervals.

    ``val`` and ``test`` are boolean ``[num_nodes]``; ``split`` and ``scored`` hold the
    masters of each split over all ranks and those sampled; ``positives`` the sampled
    masters of class 1 (a two-class task), per split.
    """

    val: torch.Tensor
    test: torch.Tensor
    split: tuple[int, int]
    scored: tuple[int, int]
    positives: tuple[int, int]

    @property
    def targets(self) -> torch.Tensor:
        """The rows the exact evaluation computes: the sampled masters of both splits."""
        return self.val | self.test

    def task_view(self, task):
        """``task`` seeing only the sampled masters as its validation and test rows (a
        shallow copy: its ``score`` then counts the sample only)."""
        graph: LocalGraph = task.graph
        split = graph.split.clone()
        split[(graph.val_mask & ~self.val) | (graph.test_mask & ~self.test)] = SPLIT_NONE
        view = copy.copy(task)
        view.graph = dataclasses.replace(graph, split=split)
        return view

    def columns(self, metric: str, metrics: dict[str, float]) -> dict[str, float]:
        """The interval and count columns of a metrics row for ``metrics`` (``val``, ``test``)."""
        out: dict[str, float] = {}
        for i, name in enumerate(("val", "test")):
            n, positives = self.scored[i], self.positives[i]
            if metric == "roc_auc":
                low, high = auc_interval(metrics[name], positives, n - positives)
            else:
                low, high = wilson_interval(metrics[name], n)
            out.update({f"{name}_ci_low": low, f"{name}_ci_high": high,
                        f"{name}_scored": n, f"{name}_split": self.split[i]})
        return out


def draw_sample(graph: LocalGraph, comm: Comm, cap: int, seed: int, category: str = "eval") -> EvalSample:
    """The sampled validation and test masters of this rank (a collective: two all_reduces
    of a few numbers).

    Parameters
    ----------
    graph
        This rank's local graph.
    cap
        Masters scored per split (about; a split of at most ``2 cap`` is scored whole:
        see the module docstring); 0 scores every master.
    seed
        The sample's seed (the run's ``seed``).
    """
    if cap < 0:
        raise ValueError(f"the evaluation sample must be >= 0 masters per split, got {cap}")
    masks = (graph.val_mask, graph.test_mask)
    split = comm.all_reduce(torch.tensor([float(m.sum()) for m in masks], dtype=torch.float64), category)
    keys = sample_keys(graph.global_nid, seed)
    kept = [m if not cap or n <= 2 * cap else m & (keys < cap / float(n)) for m, n in zip(masks, split.tolist())]
    labelled = graph.y == 1
    counts = comm.all_reduce(torch.tensor([float(k.sum()) for k in kept] + [float((k & labelled).sum()) for k in kept],
                                          dtype=torch.float64), category).tolist()
    return EvalSample(kept[0], kept[1], (int(split[0]), int(split[1])), (int(counts[0]), int(counts[1])),
                      (int(counts[2]), int(counts[3])))


def wilson_interval(p: float, n: int) -> tuple[float, float]:
    """Wilson's 95 % score interval of a proportion ``p`` measured on ``n`` trials
    (``(nan, nan)`` when ``n`` is 0 or ``p`` is not a number)."""
    if n <= 0 or math.isnan(p):
        return float("nan"), float("nan")
    z2 = _Z95 * _Z95
    centre = (p + z2 / (2 * n)) / (1 + z2 / n)
    half = _Z95 / (1 + z2 / n) * math.sqrt(max(p * (1 - p), 0.0) / n + z2 / (4 * n * n))
    return max(0.0, centre - half), min(1.0, centre + half)


def auc_interval(auc: float, positives: int, negatives: int) -> tuple[float, float]:
    """The 95 % normal interval of a ROC-AUC measured on ``positives`` and ``negatives``
    (Hanley and McNeil's standard error), clipped to ``[0, 1]``."""
    if positives <= 0 or negatives <= 0 or math.isnan(auc):
        return float("nan"), float("nan")
    q1, q2 = auc / (2 - auc), 2 * auc * auc / (1 + auc)
    var = (auc * (1 - auc) + (positives - 1) * (q1 - auc * auc)
           + (negatives - 1) * (q2 - auc * auc)) / (positives * negatives)
    half = _Z95 * math.sqrt(max(var, 0.0))
    return max(0.0, auc - half), min(1.0, auc + half)
