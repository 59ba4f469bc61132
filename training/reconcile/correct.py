"""``corr``: a global correction of the averaged model (after LLCG, Ramezani et al., ICLR 2022).

Averaging models trained on partitions leaves an error that more frequent averaging
does not remove: each local model saw only its own partition's edges. LLCG corrects
the averaged model on the server with a few SGD steps on mini-batches sampled from the
whole graph. Here the ranks share that server's work, with the whole graph never held
in one place:

1. every rank draws :data:`CORR_STEPS` × :data:`CORR_BATCH_SIZE` training seeds of its own (master
   training nodes, or training edges with one uniform negative each) for the round;
2. **one exchange per round** gives the seeds their whole-graph neighbourhoods: the
   seeds' ``global_nid`` are all_gathered; every rank that holds a seed (as a replica:
   a vertex-cut spreads a vertex's edges over its replicas) samples the seed's
   ``fanouts``-hop in-neighbourhood over its own edges (:class:`NeighborSampler`) and
   returns it as ``global_nid`` pairs; the seed's rank merges these with its own
   sample by ``global_nid`` and fetches the feature rows it does not hold from the
   rank that sent them;
3. :data:`CORR_STEPS` Adam steps (at the run's ``lr``) on the global model: at step s each rank
   computes the loss summed over its s-th batch of seeds on the merged graph, and one
   all_reduce sums gradients and counts over the ranks, so every rank takes the same
   step, the one a server would take on the union of the batches. The server's Adam
   moments carry over from round to round (as the local optimisers' do), the same on
   every rank: a fresh Adam's first step would move every weight by about ``lr``
   whatever its gradient.

Every stored edge belongs to one partition, so the merged neighbourhood of a seed's
first hop is exact up to the per-partition fanout (a vertex with replicas on three
partitions keeps up to three fanouts of in-edges); a second-hop vertex is expanded on
the partition that sampled it. A link task passes messages over training edges only,
as in its local training.

Bytes (:class:`asepr.training.group.comm.Comm` categories):

=================  ============================================================
``corr``           the seeds' ``global_nid`` (all_gather, 8 bytes per seed), the
                   sampled neighbourhoods (8 bytes per node, 16 per edge) and the
                   feature requests (8 bytes per row)
``corr_features``  the feature rows a rank does not hold (4·d bytes per row)
``corr_grad``      one gradient all_reduce per step (the model's size + 2 floats)
=================  ============================================================
"""

from __future__ import annotations

import copy

import numpy as np
import torch
import torch.nn.functional as F

from asepr.training.group.comm import Comm
from asepr.training.models import flatten, graph_operator, unflatten_into
from asepr.training.graph.sampler import NeighborSampler

__all__ = ["CORR_BATCH_SIZE", "CORR_STEPS", "GlobalCorrection", "merge_samples"]

#: Correction steps per round, and seeds per rank and step: fixed settings (on the tuning
#: graphs 2 steps of 128 seeds were level with these, docs/results/train-tuning).
CORR_STEPS = 4
CORR_BATCH_SIZE = 256


def merge_samples(parts: list[tuple[torch.Tensor, torch.Tensor]]) -> tuple[torch.Tensor, torch.Tensor,
                                                                              list[torch.Tensor]]:
    """The union of sampled subgraphs given in ``global_nid``.

    Parameters
    ----------
    parts
        ``(global_nid, edge_index)`` per sample: ``edge_index`` holds positions into that
        sample's ``global_nid``.

    Returns
    -------
    (global_nid, edge_index, positions)
        The merged vertices in order of first appearance (the first part's vertices
        first, in its order), the merged edges over them (every part's edges, none
        dropped), and per part the merged position of each of its vertices.
    """
    gids = torch.cat([g for g, _ in parts]) if parts else torch.zeros(0, dtype=torch.int64)
    uniq, first, inverse = np.unique(gids.numpy(), return_index=True, return_inverse=True)
    order = np.argsort(first, kind="stable")  # first appearance
    rank_of = np.empty(len(uniq), dtype=np.int64)
    rank_of[order] = np.arange(len(uniq))
    position = torch.from_numpy(rank_of[inverse])
    positions = list(torch.split(position, [len(g) for g, _ in parts]))
    edges = [pos[ei] for pos, (_, ei) in zip(positions, parts)]
    merged_edges = torch.cat(edges, 1) if edges else torch.zeros((2, 0), dtype=torch.int64)
    return torch.from_numpy(uniq[order]), merged_edges, positions


class GlobalCorrection:
    """The ``corr`` step of one rank (see the module docstring); calls are collectives.

    Parameters
    ----------
    task
        The rank's :class:`~asepr.training.tasks.NodeTask` or :class:`~asepr.training.tasks.LinkTask`.
    config
        The run's :class:`~asepr.training.config.TrainConfig` (``lr``, ``fanouts``,
        ``weight_decay``, ``model``).
    model
        A module of the run's architecture (copied; the copy is the server's model).
    comm
        The process group.
    """

    def __init__(self, task, config, model: torch.nn.Module, comm: Comm):
        self.task, self.config, self.comm = task, config, comm
        self.model = copy.deepcopy(model)
        self.optimizer = torch.optim.Adam(self.model.parameters(), lr=config.lr,
                                          weight_decay=config.weight_decay)
        graph = task.graph
        edges = task.train_pos if task.name == "link" else graph.own_edges
        if graph.undirected:
            edges = torch.cat([edges, edges.flip(0)], dim=1)
        self.sampler = NeighborSampler(edges, graph.num_nodes)
        self.in_degree = torch.bincount(edges[1], minlength=graph.num_nodes)
        self.global_nid = graph.global_nid

    # -- seeds ---------------------------------------------------------------------------
    def draw(self, generator: torch.Generator) -> list[torch.Tensor]:
        """The round's seeds, one tensor per step, in local rows: training nodes (node
        task) or ``[b, 3]`` triples of a training edge ``(u, v)`` and a uniform negative
        ``w`` (link task); empty when the rank has none left."""
        steps, size = CORR_STEPS, CORR_BATCH_SIZE
        if self.task.name == "node":
            pool = self.task.train_idx
            chosen = pool[torch.randperm(len(pool), generator=generator)[: steps * size]]
            return list(torch.tensor_split(chosen, steps))
        pos = self.task.train_pos
        chosen = torch.randperm(pos.shape[1], generator=generator)[: steps * size]
        neg = torch.randint(0, max(self.task.num_nodes, 1), (len(chosen),), generator=generator)
        triples = torch.stack([pos[0, chosen], pos[1, chosen], neg], 1)
        return list(torch.tensor_split(triples, steps))

    # -- the exchange ----------------------------------------------------------------------
    def _serve(self, asked: torch.Tensor, generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
        """This rank's sample, in ``global_nid``, of the seeds ``asked`` that have in-edges here."""
        rows, held = self._local_rows(asked)
        rows = rows[held]
        rows = rows[self.in_degree[rows] > 0]
        if not len(rows):
            return torch.zeros(0, dtype=torch.int64), torch.zeros((0, 2), dtype=torch.int64)
        n_id, ei = self.sampler.sample(rows, self.config.fanouts, generator)
        return self.global_nid[n_id], ei.t().contiguous()

    def neighbourhoods(self, seed_rows: torch.Tensor, generator: torch.Generator) -> tuple[
            torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """The sampled whole-graph neighbourhoods of ``seed_rows`` (a collective; step 2 of
        the module docstring).

        Parameters
        ----------
        seed_rows
            Local rows, sorted and distinct (may be empty: the rank still serves the others).
        generator
            The source of randomness of the sampling.

        Returns
        -------
        (x, global_nid, edge_index, seed_positions)
            The feature rows and ``global_nid`` of the sampled vertices, the sampled edges
            over their positions, and the position of each seed.
        """
        comm, w, me = self.comm, self.comm.world_size, self.comm.rank
        n_id, ei = self.sampler.sample(seed_rows, self.config.fanouts, generator)
        parts = [(self.global_nid[n_id], ei)]
        senders = [me]
        if w > 1:
            width = comm.max_int(len(seed_rows))
            mine = torch.full((width,), -1, dtype=torch.int64)
            mine[: len(seed_rows)] = self.global_nid[seed_rows]
            every = comm.all_gather(mine, "corr")
            nothing = (torch.zeros(0, dtype=torch.int64), torch.zeros((0, 2), dtype=torch.int64))
            served = [self._serve(every[p][every[p] >= 0], generator) if p != me else nothing for p in range(w)]
            got_ids = comm.all_to_all([s[0] for s in served], "corr")
            got_edges = comm.all_to_all([s[1] for s in served], "corr")
            for q in range(w):
                if q != me and len(got_ids[q]):
                    parts.append((got_ids[q], got_edges[q].t()))
                    senders.append(q)
        merged, edges, positions = merge_samples(parts)
        return self._features(merged, positions, senders), merged, edges, positions[0][: len(seed_rows)]

    def _local_rows(self, global_nid: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``(rows, held)``: this rank's row of each ``global_nid``, and whether it holds it."""
        gid = self.global_nid
        if not len(gid):
            return torch.zeros_like(global_nid), torch.zeros(len(global_nid), dtype=torch.bool)
        rows = torch.searchsorted(gid, global_nid).clamp(max=len(gid) - 1)
        return rows, gid[rows] == global_nid

    def _features(self, merged: torch.Tensor, positions: list[torch.Tensor], senders: list[int]) -> torch.Tensor:
        """Feature rows of ``merged``: local rows where this rank holds the vertex, the
        others requested from the first rank whose sample named them."""
        comm, w = self.comm, self.comm.world_size
        x_local = self.task.graph.x
        rows, here = self._local_rows(merged)
        x = torch.zeros((len(merged), x_local.shape[1]), dtype=x_local.dtype)
        x[here] = x_local[rows[here]]
        if w == 1:
            return x
        source = torch.full((len(merged),), -1, dtype=torch.int64)
        for part_pos, q in zip(reversed(positions), reversed(senders)):
            source[part_pos] = q  # the earliest part naming a vertex writes last
        missing = torch.nonzero(~here).view(-1)
        by_rank = [missing[source[missing] == q] for q in range(w)]
        asked = comm.all_to_all([merged[i] for i in by_rank], "corr")
        got = comm.all_to_all([x_local[self._local_rows(ids)[0]] for ids in asked], "corr_features")
        for i, r in zip(by_rank, got):
            x[i] = r
        return x

    # -- the correction steps --------------------------------------------------------------
    def _step_loss(self, out: torch.Tensor, step_rows: torch.Tensor, seed_rows: torch.Tensor,
                   seed_pos: torch.Tensor) -> torch.Tensor:
        """The loss summed over one step's seeds (node rows, or (u, v, w) triples)."""
        where = seed_pos[torch.searchsorted(seed_rows, step_rows)]
        if self.task.name == "node":
            return F.cross_entropy(out[where], self.task.graph.y[step_rows], reduction="sum")
        pos = (out[where[:, 0]] * out[where[:, 1]]).sum(-1)
        neg = (out[where[:, 0]] * out[where[:, 2]]).sum(-1)
        return (F.binary_cross_entropy_with_logits(pos, torch.ones_like(pos), reduction="sum")
                + F.binary_cross_entropy_with_logits(neg, torch.zeros_like(neg), reduction="sum"))

    def __call__(self, global_flat: torch.Tensor, generator: torch.Generator) -> tuple[torch.Tensor, float]:
        """The corrected global parameters and the mean loss of the last step (a collective).

        Parameters
        ----------
        global_flat
            The global model after averaging (the same on every rank).
        generator
            This round's source of randomness.
        """
        steps = self.draw(generator)
        seed_rows = torch.unique(torch.cat([s.reshape(-1) for s in steps]))
        x, merged, edges, seed_pos = self.neighbourhoods(seed_rows, generator)
        op = graph_operator(self.config.model, edges, len(merged))
        model, opt = self.model, self.optimizer
        unflatten_into(model, global_flat)
        model.train()
        params = list(model.parameters())
        last = float("nan")
        for rows in steps:
            opt.zero_grad()
            loss = self._step_loss(model(x, op), rows, seed_rows, seed_pos) if len(rows) else None
            grads = torch.autograd.grad(loss, params, allow_unused=True) if loss is not None else [None] * len(params)
            wire = torch.cat([(g if g is not None else torch.zeros_like(p)).reshape(-1)
                              for g, p in zip(grads, params)]
                             + [torch.tensor([float(loss.detach()) if loss is not None else 0.0, float(len(rows))])])
            self.comm.all_reduce(wire, "corr_grad")
            count = float(wire[-1])
            if count == 0:
                break
            offset = 0
            for p in params:
                p.grad = (wire[offset: offset + p.numel()] / count).view_as(p).clone()
                offset += p.numel()
            opt.step()
            last = float(wire[-2]) / count
        return flatten(model), last
