"""Tasks: what a rank trains on, how it scores, and what it distils.

* :class:`NodeTask`: node classification. Loss: cross-entropy on the rank's master
  training nodes. Metric: accuracy, or ROC-AUC when there are two classes.
* :class:`LinkTask`: link prediction. A hash of each global edge ``{u, v}`` puts it in
  the validation set, the test set or training, so every rank and the centralized run
  hold out the *same* edges; held-out edges are removed from message passing (halo and
  reverse copies too). Loss: binary cross-entropy of dot-product scores against as many
  uniform negatives. Metrics over each held-out edge ``(u, v)`` ranked against
  ``link_eval_negatives`` corrupted edges ``(u, w)``, ``w`` uniform among the vertices
  of the whole graph (:meth:`LinkTask.eval_negatives`; not the rank's own, which on an
  attribute-driven partition are all alike and made held-out edges harder to rank than
  in the centralized run): MRR, Hits@50 (ties count half, as in OGB) and ROC-AUC.

Scoring is global: every rank scores its own master nodes (or own edges) and the
sums are all_reduced. ``score(outputs, comm)`` scores given model outputs (the exact
whole-graph outputs of :class:`asepr.training.evaluation.inference.ExactInference`, or fds's layer-wise
ones); ``evaluate(model, comm)`` scores the model's outputs on the rank's own graph
(the cheap partition-local evaluation). ROC-AUC is computed from score histograms of
2^14 bins that are all_reduced (exact up to ties within one bin).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass

import numpy as np
import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch_geometric.sampler import NodeSamplerInput

from asepr.training.group.comm import Comm
from asepr.training.config import resolve_batch_size
from asepr.training.graph.data import LocalGraph
from asepr.training.models import graph_operator
from asepr.training.graph.sampler import NeighborSampler

__all__ = ["Batch", "EvalNegatives", "LinkTask", "NodeTask", "auc_from_histograms", "make_task"]

AUC_BINS = 1 << 14
#: Link evaluation: above this many vertices the negatives are drawn among a seeded
#: sample of this many, shared by all ranks (:meth:`LinkTask.eval_negatives`).
EVAL_POOL = 1 << 14
HITS_K = 50


@dataclass
class Batch:
    """One step's input: rows ``n_id`` of the graph (None: all), the graph over those rows
    (:func:`~asepr.training.models.graph_operator`),
    the task loss of the model output, and the rows the contrastive loss compares."""

    n_id: torch.Tensor | None
    graph: torch.Tensor
    loss: Callable[[torch.Tensor], torch.Tensor]
    anchors: torch.Tensor


def auc_from_histograms(pos: torch.Tensor, neg: torch.Tensor) -> float:
    """ROC-AUC from per-bin counts of positive and negative scores (ties count half)."""
    pos = pos.to(torch.float64)
    neg = neg.to(torch.float64)
    p, n = float(pos.sum()), float(neg.sum())
    if p == 0 or n == 0:
        return float("nan")
    below = torch.cumsum(neg, 0) - neg
    return float((pos * (below + 0.5 * neg)).sum() / (p * n))


def _histogram(logits: torch.Tensor) -> torch.Tensor:
    """Bin counts of real-valued scores, squashed monotonically (AUC is rank-based) by
    ``atan``, which saturates far more slowly than a sigmoid, so large scores stay apart."""
    squashed = 0.5 + torch.atan(logits.to(torch.float64) / 4) / torch.pi
    idx = (squashed * (AUC_BINS - 1)).round().to(torch.int64).clamp(0, AUC_BINS - 1)
    return torch.bincount(idx, minlength=AUC_BINS).to(torch.float64)


def _mix(*values: int) -> int:
    """A 63-bit hash of integers (splitmix64 steps), for per-round/per-rank seeds."""
    h = 0x9E3779B97F4A7C15
    for v in values:
        h = (h ^ (int(v) & 0xFFFFFFFFFFFFFFFF)) * 0xBF58476D1CE4E5B9 & 0xFFFFFFFFFFFFFFFF
        h ^= h >> 31
    return h & 0x7FFFFFFFFFFFFFFF


@dataclass
class EvalNegatives:
    """A link task's evaluation negatives (:meth:`LinkTask.eval_negatives`): ``size``
    candidate vertices; this rank's master ``rows`` fill the candidates at ``positions``;
    ``negatives[split]`` holds, per held-out edge, candidate positions."""

    size: int
    rows: torch.Tensor
    positions: torch.Tensor
    negatives: dict[str, torch.Tensor]


class NodeTask:
    """Node classification on a local graph (see the module docstring)."""

    name = "node"

    def __init__(self, graph: LocalGraph, num_classes: int, config):
        self.graph = graph
        self.config = config
        self.num_classes = int(num_classes)
        self.binary = self.num_classes == 2
        self.metric = "roc_auc" if self.binary else "accuracy"
        self.edge_index = graph.edge_index
        self.mp = graph_operator(config.model, self.edge_index, graph.num_nodes)
        self.train_idx = torch.nonzero(graph.train_mask).view(-1)
        self.master_idx = torch.nonzero(graph.is_master).view(-1)
        #: Every rank's training seeds together (one rank: its own); the trainer sets it.
        self.total_train = len(self.train_idx)
        self._sampler = None

    @property
    def out_dim(self) -> int:
        return self.num_classes

    @property
    def features(self) -> torch.Tensor:
        """The rows :meth:`batches` index (``Batch.n_id``): the local graph's."""
        return self.graph.x

    @property
    def num_train(self) -> int:
        return len(self.train_idx)

    @property
    def batch_size(self) -> int:
        """Seeds per step on this rank: ``config.batch_size`` resolved on its share of all
        ranks' training seeds (:attr:`total_train`, set by the trainer)."""
        return resolve_batch_size(self.config.batch_size, self.num_train, self.total_train)

    def _sampler_(self) -> NeighborSampler:
        if self._sampler is None:
            self._sampler = NeighborSampler(self.edge_index, self.graph.num_nodes, self.config.fanouts)
        return self._sampler

    def batches(self, generator: torch.Generator) -> Iterator[Batch]:
        y = self.graph.y
        if not len(self.train_idx):
            return
        if not self.batch_size:
            idx = self.train_idx
            yield Batch(None, self.mp, lambda out: F.cross_entropy(out[idx], y[idx]), self.master_idx)
            return
        order = self.train_idx[torch.randperm(len(self.train_idx), generator=generator)]
        for seeds in torch.split(order, self.batch_size):
            out = self._sampler_().sample_from_nodes(NodeSamplerInput(None, seeds), generator=generator)
            n_id, ei = out.node, torch.stack([out.row, out.col])
            k = len(seeds)
            target = y[seeds]
            yield Batch(n_id, graph_operator(self.config.model, ei, len(n_id)),
                        lambda out, k=k, target=target: F.cross_entropy(out[:k], target),
                        torch.arange(k))

    # -- distillation ------------------------------------------------------------------
    def kd_setup(self, generator: torch.Generator) -> None:
        """Nothing to draw: KD runs on all master nodes."""

    def kd_outputs(self, model) -> torch.Tensor:
        """Logits on the master nodes (full-batch)."""
        return model(self.graph.x, self.mp)[self.master_idx]

    def kd_loss(self, student: torch.Tensor, teacher: torch.Tensor, temperature: float) -> torch.Tensor:
        t = temperature
        return F.kl_div(F.log_softmax(student / t, -1), F.log_softmax(teacher / t, -1),
                        log_target=True, reduction="batchmean") * t * t

    # -- evaluation --------------------------------------------------------------------
    @torch.no_grad()
    def evaluate(self, model, comm: Comm) -> dict[str, float]:
        """:meth:`score` of ``model``'s outputs on this rank's graph (a collective)."""
        model.eval()
        return self.score(model(self.graph.x, self.mp), comm)

    @torch.no_grad()
    def score(self, out: torch.Tensor, comm: Comm) -> dict[str, float]:
        """Validation and test metrics of the output rows ``out`` (``[num_nodes, classes]``,
        one per local row), over the master nodes of every rank (a collective).

        Returns
        -------
        dict
            ``{"val": ..., "test": ...}``: accuracy, or ROC-AUC with two classes.
        """
        y = self.graph.y
        parts = []
        for mask in (self.graph.val_mask, self.graph.test_mask):
            logits, labels = out[mask], y[mask]
            if self.binary:
                score = logits[:, 1] - logits[:, 0]  # the log-odds of class 1
                parts += [_histogram(score[labels == 1]), _histogram(score[labels == 0])]
            else:
                parts.append(torch.tensor([float((logits.argmax(-1) == labels).sum()), float(len(labels))],
                                          dtype=torch.float64))
        flat = comm.all_reduce(torch.cat(parts), "eval")
        if self.binary:
            h = flat.view(4, AUC_BINS)
            val, test = auc_from_histograms(h[0], h[1]), auc_from_histograms(h[2], h[3])
        else:
            val = float(flat[0] / flat[1]) if flat[1] else float("nan")
            test = float(flat[2] / flat[3]) if flat[3] else float("nan")
        return {"val": val, "test": test}


class LinkTask:
    """Link prediction on a local graph (see the module docstring)."""

    name = "link"
    metric = "mrr"

    def __init__(self, graph: LocalGraph, config):
        self.graph = graph
        self.config = config
        gid = graph.global_nid.numpy()
        own = graph.own_edges
        role = self._role(gid[own[0].numpy()], gid[own[1].numpy()])
        self.train_pos = own[:, torch.from_numpy(role == 0)]
        self.val_pos = own[:, torch.from_numpy(role == 1)]
        self.test_pos = own[:, torch.from_numpy(role == 2)]
        ei = graph.edge_index
        keep = self._role(gid[ei[0].numpy()], gid[ei[1].numpy()]) == 0
        self.edge_index = ei[:, torch.from_numpy(keep)]
        self.num_nodes = graph.num_nodes
        self.mp = graph_operator(config.model, self.edge_index, graph.num_nodes)
        self.features = graph.x
        self._sampler = None
        self._kd_pairs = None
        self._eval: EvalNegatives | None = None  # drawn at the first score (a collective)

    def _role(self, gu: np.ndarray, gv: np.ndarray) -> np.ndarray:
        """0 train, 1 val, 2 test, from a hash of the unordered global pair."""
        lo = np.minimum(gu, gv).astype(np.uint64)
        hi = np.maximum(gu, gv).astype(np.uint64)
        with np.errstate(over="ignore"):
            h = lo * np.uint64(0x9E3779B97F4A7C15) ^ (hi + np.uint64(self.config.seed) * np.uint64(0xD6E8FEB86659FD93))
            h ^= h >> np.uint64(32)
            h *= np.uint64(0xBF58476D1CE4E5B9)
            h ^= h >> np.uint64(29)
        u = (h >> np.uint64(11)).astype(np.float64) / float(1 << 53)
        fv, ft = self.config.link_val_fraction, self.config.link_test_fraction
        return np.where(u < fv, 1, np.where(u < fv + ft, 2, 0)).astype(np.int8)

    @property
    def out_dim(self) -> int:
        return self.config.hidden

    @property
    def num_train(self) -> int:
        return int(self.train_pos.shape[1])

    @property
    def batch_size(self) -> int:
        """Training edges per step on this rank (``config.batch_size`` resolved on its own)."""
        return resolve_batch_size(self.config.batch_size, self.num_train)

    @staticmethod
    def _scores(z: torch.Tensor, u: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        return (z[u] * z[v]).sum(-1)

    def _pair_loss(self, z, pos_u, pos_v, neg_u, neg_v) -> torch.Tensor:
        pos = self._scores(z, pos_u, pos_v)
        neg = self._scores(z, neg_u, neg_v)
        return (F.binary_cross_entropy_with_logits(pos, torch.ones_like(pos))
                + F.binary_cross_entropy_with_logits(neg, torch.zeros_like(neg)))

    def negatives(self, count: int, generator: torch.Generator) -> torch.Tensor:
        """``count`` training negatives, uniform among the rank's own rows."""
        return torch.randint(0, max(self.num_nodes, 1), (count,), generator=generator)

    def batches(self, generator: torch.Generator) -> Iterator[Batch]:
        pos = self.train_pos
        if not pos.shape[1]:
            return
        if not self.batch_size:
            neg_u = pos[0]
            neg_v = self.negatives(pos.shape[1], generator)
            anchors = torch.arange(self.num_nodes)
            yield Batch(None, self.mp,
                        lambda z: self._pair_loss(z, pos[0], pos[1], neg_u, neg_v), anchors)
            return
        if self._sampler is None:
            self._sampler = NeighborSampler(self.edge_index, self.num_nodes, self.config.fanouts)
        order = torch.randperm(pos.shape[1], generator=generator)
        for chunk in torch.split(order, self.batch_size):
            u, v = pos[0, chunk], pos[1, chunk]
            w = self.negatives(len(chunk), generator)
            seeds, inverse = torch.unique(torch.cat([u, v, w]), return_inverse=True)
            out = self._sampler.sample_from_nodes(NodeSamplerInput(None, seeds), generator=generator)
            n_id, ei = out.node, torch.stack([out.row, out.col])
            k = len(chunk)
            iu, iv, iw = inverse[:k], inverse[k: 2 * k], inverse[2 * k:]
            yield Batch(n_id, graph_operator(self.config.model, ei, len(n_id)),
                        lambda z, iu=iu, iv=iv, iw=iw: self._pair_loss(z, iu, iv, iu, iw),
                        torch.arange(len(seeds)))

    # -- distillation: mean edge logits of the local models on train pairs + negatives --
    def kd_setup(self, generator: torch.Generator) -> None:
        n = max(self.num_nodes, 1)
        pos = self.train_pos
        neg_v = torch.randint(0, n, (pos.shape[1],), generator=generator)
        self._kd_pairs = (torch.cat([pos[0], pos[0]]), torch.cat([pos[1], neg_v]))

    def kd_outputs(self, model) -> torch.Tensor:
        u, v = self._kd_pairs
        z = model(self.graph.x, self.mp)
        return self._scores(z, u, v)

    def kd_loss(self, student: torch.Tensor, teacher: torch.Tensor, temperature: float) -> torch.Tensor:
        t = temperature
        return F.binary_cross_entropy_with_logits(student / t, torch.sigmoid(teacher / t)) * t * t

    # -- evaluation ----------------------------------------------------------------------
    def eval_negatives(self, comm: Comm) -> EvalNegatives:
        """The evaluation negatives, drawn once, the same every round (a collective the
        first time: the graph's vertex count is all_reduced).

        The candidates are every vertex of the whole graph (``global_nid`` up to the
        largest any rank holds), or a seeded sample of :data:`EVAL_POOL` of them shared by
        all ranks: the same for every strategy, so that a partition's similar vertices do
        not make its held-out edges harder to rank than the centralized run's. With one
        rank holding the whole graph they are drawn exactly as uniform rows.
        """
        if self._eval is None:
            gid = self.graph.global_nid
            top = torch.tensor([int(gid.max()) + 1 if len(gid) else 0], dtype=torch.int64)
            comm.all_reduce(top, "eval", op=dist.ReduceOp.MAX if comm.distributed else None)
            size, cap = int(top[0]), EVAL_POOL
            if size <= cap:
                pool = torch.arange(size)
            else:
                shared = torch.Generator().manual_seed(_mix(self.config.seed, 0xE7A2))
                pool = torch.randperm(size, generator=shared)[:cap].sort().values
            g = torch.Generator().manual_seed(_mix(self.config.seed, 0xE7A1, *self.graph.part_ids))
            neg = {name: torch.randint(0, max(len(pool), 1), (pos.shape[1], self.config.link_eval_negatives),
                                       generator=g)
                   for name, pos in (("val", self.val_pos), ("test", self.test_pos))}
            masters = torch.nonzero(self.graph.is_master).view(-1)
            at = torch.searchsorted(pool, gid[masters]).clamp(max=max(len(pool) - 1, 0))
            hit = pool[at] == gid[masters] if len(pool) else torch.zeros(len(masters), dtype=torch.bool)
            self._eval = EvalNegatives(len(pool), masters[hit], at[hit], neg)
        return self._eval

    @torch.no_grad()
    def evaluate(self, model, comm: Comm) -> dict[str, float]:
        """:meth:`score` of ``model``'s embeddings on this rank's graph (a collective)."""
        model.eval()
        return self.score(model(self.graph.x, self.mp), comm)

    @torch.no_grad()
    def score(self, z: torch.Tensor, comm: Comm) -> dict[str, float]:
        """MRR, Hits@50 and ROC-AUC of the embeddings ``z`` (one row per local row) over
        the held-out edges of every rank (a collective).

        Returns
        -------
        dict
            ``{"val": MRR, "test": MRR, "val_hits@50", "test_hits@50", "val_auc", "test_auc"}``.
        """
        ev = self.eval_negatives(comm)
        width = z.shape[1]
        # The candidates' rows, each from its master's rank (one all_reduce), with a count
        # column: a candidate no rank holds is left out of the ranking.
        table = torch.zeros((ev.size, width + 1), dtype=z.dtype)
        table[ev.positions, :width] = z[ev.rows]
        table[ev.positions, width] = 1
        comm.all_reduce(table, "eval")
        candidates, present = table[:, :width], table[:, width] > 0
        parts = []
        for name, pos in (("val", self.val_pos), ("test", self.test_pos)):
            neg_v = ev.negatives[name]
            valid = present[neg_v]
            p = self._scores(z, pos[0], pos[1])
            q = (z[pos[0]].unsqueeze(1) * candidates[neg_v]).sum(-1)
            optimistic = ((q > p.unsqueeze(1)) & valid).sum(1)
            pessimistic = ((q >= p.unsqueeze(1)) & valid).sum(1)
            rank = 0.5 * (optimistic + pessimistic).to(torch.float64) + 1
            sums = torch.tensor([float((1.0 / rank).sum()), float((rank <= HITS_K).sum()), float(len(rank))],
                                dtype=torch.float64)
            parts += [sums, _histogram(p), _histogram(q[valid])]
        flat = comm.all_reduce(torch.cat(parts), "eval")
        out = {}
        stride = 3 + 2 * AUC_BINS
        for i, name in enumerate(("val", "test")):
            block = flat[i * stride: (i + 1) * stride]
            mrr_sum, hits, count = (float(v) for v in block[:3])
            out[name] = mrr_sum / count if count else float("nan")
            out[f"{name}_hits@{HITS_K}"] = hits / count if count else float("nan")
            out[f"{name}_auc"] = auc_from_histograms(block[3: 3 + AUC_BINS], block[3 + AUC_BINS:])
        return out


def make_task(graph: LocalGraph, config, num_classes: int):
    """The task object for ``config.task`` on ``graph``."""
    if config.task == "node":
        return NodeTask(graph, num_classes, config)
    return LinkTask(graph, config)


def round_seed(seed: int, round_index: int, rank: int, purpose: int = 0) -> int:
    """The seed of one round on one rank (all randomness derives from it)."""
    return _mix(seed, round_index, rank, purpose)
