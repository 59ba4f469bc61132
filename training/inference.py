"""Exact full-neighbourhood inference of one model over a vertex-cut partition.

``asepr partition`` cuts vertices: every edge lives in exactly one partition, a vertex
is replicated in every partition holding one of its edges, and one replica is the
master. Each rank sees only its own edges, so a layer's aggregate of a vertex is split
over the ranks that hold it. :class:`ExactInference` computes, on every rank and for
every local row (masters, replicas and halo copies), exactly the output the model
gives on the whole graph, layer by layer:

1. each rank aggregates over its own edges into **partials** of its local rows;
2. every replica sends its partials to the rank of its master, which combines them with
   its own (and with the self-loop term of GCN and GAT, which needs only the master's
   row) into the layer's output row;
3. the master sends the output row back to the replicas, so every replica holds the
   exact row before the next layer.

What a partial holds, and how masters combine them:

* SAGE (mean): the sum of the neighbours' rows (transformed by ``lin_l`` first when
  that is narrower); divided at the master by the global in-degree.
* GCN: the sum of ``deg(j)^-1/2 · W h_j`` over the in-edges; the global degrees
  (in-edges other than self-loops, plus the one self-loop GCN adds) are combined once,
  at setup, and known to every replica.
* GAT: per head, the local maximum ``m`` of the attention logits, the exp-sum
  ``z = Σ exp(e - m)`` and the weighted sum ``u = Σ exp(e - m) · W h_j``. The master
  takes the maximum ``M`` over all partials and its self-loop, rescales each partial by
  ``exp(m - M)``, adds them, and divides ``u`` by ``z``.

Stored self-loops, repeated edges, isolated vertices, and vertices whose master holds
none of their edges are all exact (PyG's semantics: SAGE averages over every stored
in-edge; GCN and GAT drop stored self-loops and add one per vertex).

Routing is set up once per graph without reading any other rank's store: each rank
sends ``(global_nid, is_master)`` of its rows to a directory rank (``global_nid mod
W``), which tells every replica the rank of its master and every master the ranks of
its replicas. Both sides order the rows of one (replica rank, master rank) pair by
``global_nid``, so the per-layer buffers carry no ids. Several partitions per rank
(more partitions than ranks) are merged by :func:`training.data.load_local_graph` into
one local graph and need nothing more.

Bytes (float32, one flat buffer per direction through :meth:`Comm.all_to_all`, under
the category ``"eval"``). Let ``R_out`` be a rank's rows whose master is on another
rank and ``R_in`` the rows on other ranks whose master is here; summed over ranks
both equal ``Σ_v (r_v - 1)``, the replication beyond one copy per vertex. Per layer a
rank sends ``4 · (R_out · p + R_in · d_out)`` bytes and receives ``4 · (R_in · p +
R_out · d_out)``, where ``d_out`` is the layer's output width and ``p`` the partial's:

==========  ================================
model       partial width ``p`` (floats)
==========  ================================
SAGE        ``min(d_in, d_out)``
GCN         ``d_out``
GAT         ``d_out + 2 · heads``
==========  ================================

plus ``16 · (W - 1)`` bytes of buffer sizes (``"control"``). The one-time setup sends
16 bytes per local row to its directory rank, which answers with 24 bytes to each
replica and 24 to its master per replica; then 16 bytes per replica each way for the
degrees.
"""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F
from torch_geometric.nn import GATConv, GCNConv, SAGEConv

from storage.errors import StoreError, format_problem
from training.comm import Comm
from training.config import EVAL_MODES
from training.data import LocalGraph

__all__ = ["ExactInference", "Evaluator", "evaluate_exact", "exact_forward"]


class ExactInference:
    """The whole-graph output of a model on this rank's rows (see the module docstring).

    Construction and :meth:`forward` are collectives: every rank of ``comm`` calls them.

    Parameters
    ----------
    graph
        This rank's local graph (one or several partitions).
    comm
        The byte-counting process group (``Comm()`` for a single process).
    edges
        The stored edges to pass messages over, ``[2, m]`` in local rows; each must be
        held by exactly one rank. Default: ``graph.own_edges`` (halo edges excluded). They
        are symmetrised when the graph is undirected, as :func:`build_local_graph` does.
    category
        The byte counter's category.
    """

    def __init__(self, graph: LocalGraph, comm: Comm, edges: torch.Tensor | None = None, category: str = "eval"):
        self.graph = graph
        self.comm = comm
        self.category = category
        ei = graph.own_edges if edges is None else edges
        if graph.undirected:
            ei = torch.cat([ei, ei.flip(0)], dim=1)
        self._src, self._dst = ei[0], ei[1]
        loop = self._src == self._dst
        self._src_nl, self._dst_nl = self._src[~loop], self._dst[~loop]
        self._route()
        n = graph.num_nodes
        local = torch.stack([torch.bincount(self._dst, minlength=n), torch.bincount(self._dst_nl, minlength=n)], 1)
        degrees = self.to_replicas(self.sum_at_masters(local))
        #: Global in-degree over all stored edges (SAGE's mean), and GCN's degree.
        self.in_degree = degrees[:, 0].to(torch.float32)
        self.gcn_degree = degrees[:, 1].to(torch.float32) + 1

    @classmethod
    def for_task(cls, task, comm: Comm, category: str = "eval") -> ExactInference:
        """The inference over the edges ``task`` passes messages on (a link task's
        training edges: held-out edges carry no messages, as in its training)."""
        return cls(task.graph, comm, task.train_pos if task.name == "link" else None, category)

    # -- routing -------------------------------------------------------------------------
    def _route(self) -> None:
        """Learn, through a directory rank per vertex, where each row's master or replicas are."""
        comm, w = self.comm, self.comm.world_size
        gid = self.graph.global_nid
        rows = torch.stack([gid, self.graph.is_master.to(torch.int64)], 1)
        directory = gid % w
        got = comm.all_to_all([rows[directory == d] for d in range(w)], self.category)
        replies, bad = _directory_replies(got, w)
        told = torch.cat(comm.all_to_all(replies, self.category))
        if comm.max_int(len(bad)):  # every rank raises, none waits in the next collective
            raise StoreError(format_problem(
                f"the partitions loaded by the {w} ranks (rank {comm.rank}: partitions {list(self.graph.part_ids)})",
                "exactly one master replica of every vertex",
                f"vertices {bad} with 0 or several masters" if bad else "such vertices (listed by another rank)",
                "load each partition on exactly one rank (training.data.rank_partitions), all of one generation."))
        local_nid = torch.searchsorted(gid, told[:, 0].contiguous())
        served = told[:, 2] == 1  # this row is the master; the other rank holds a replica
        self._replica_rows = _rows_by_rank(local_nid[~served], told[~served, 1], w)
        self._master_rows = _rows_by_rank(local_nid[served], told[served, 1], w)
        self._replica_index = torch.cat(self._replica_rows)
        self._master_index = torch.cat(self._master_rows)

    @property
    def num_replica_rows(self) -> int:
        """``R_out``: local rows whose master is on another rank."""
        return int(self._replica_index.numel())

    @property
    def num_served_rows(self) -> int:
        """``R_in``: rows on other ranks whose master is here."""
        return int(self._master_index.numel())

    def to_masters(self, partial: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Send the replicas' rows of ``partial`` to their masters.

        Returns the local master rows and the rows received for them (one per replica).
        """
        got = self.comm.all_to_all([partial[r] for r in self._replica_rows], self.category)
        return self._master_index, torch.cat(got)

    def sum_at_masters(self, partial: torch.Tensor) -> torch.Tensor:
        """``partial`` with each master row summed over all replicas (other rows unchanged)."""
        index, got = self.to_masters(partial)
        return partial.clone().index_add_(0, index, got)

    def to_replicas(self, out: torch.Tensor) -> torch.Tensor:
        """``out`` with every replica row replaced by its master's row (in place)."""
        got = self.comm.all_to_all([out[r] for r in self._master_rows], self.category)
        out[self._replica_index] = torch.cat(got)
        return out

    # -- the model -----------------------------------------------------------------------
    @torch.no_grad()
    def forward(self, model, x: torch.Tensor | None = None) -> torch.Tensor:
        """The output rows ``[num_nodes, out]`` of ``model`` (a :class:`~training.models.GNN`,
        put in eval mode) on the whole graph, for every local row; ``x`` defaults to
        ``graph.x``."""
        model.eval()
        h = self.graph.x if x is None else x
        last = len(model.convs) - 1
        for i, conv in enumerate(model.convs):
            h = self._layer(conv, h)
            if i < last:
                h = F.relu(h)
        return h

    def _layer(self, conv, h: torch.Tensor) -> torch.Tensor:
        for kind, combine in ((SAGEConv, self._sage), (GCNConv, self._gcn), (GATConv, self._gat)):
            if isinstance(conv, kind):
                return self.to_replicas(combine(conv, h))
        raise ValueError(f'Unsupported convolution "{type(conv).__name__}". Valid choices are "SAGEConv", '
                         '"GCNConv", "GATConv".')

    def _sage(self, conv: SAGEConv, h: torch.Tensor) -> torch.Tensor:
        _require(conv, str(conv.aggr) == "mean" and not conv.normalize and not conv.project,
                 'aggr="mean", normalize=False, project=False')
        weight, bias = conv.lin_l.weight, conv.lin_l.bias
        first = weight.shape[0] < weight.shape[1]  # aggregate the narrower of W h and h
        msg = F.linear(h, weight) if first else h
        agg = msg.new_zeros(len(h), msg.shape[1]).index_add_(0, self._dst, msg[self._src])
        mean = self.sum_at_masters(agg) / self.in_degree.clamp(min=1).unsqueeze(1)
        out = (mean if bias is None else mean + bias) if first else F.linear(mean, weight, bias)
        return out + conv.lin_r(h) if conv.root_weight else out

    def _gcn(self, conv: GCNConv, h: torch.Tensor) -> torch.Tensor:
        _require(conv, conv.normalize and conv.add_self_loops and not conv.improved,
                 "normalize=True, add_self_loops=True, improved=False")
        xw = conv.lin(h)
        inv_sqrt = self.gcn_degree.pow(-0.5)
        msg = xw[self._src_nl] * inv_sqrt[self._src_nl].unsqueeze(1)
        agg = self.sum_at_masters(xw.new_zeros(xw.shape).index_add_(0, self._dst_nl, msg))
        out = inv_sqrt.unsqueeze(1) * agg + xw / self.gcn_degree.unsqueeze(1)
        return out if conv.bias is None else out + conv.bias

    def _gat(self, conv: GATConv, h: torch.Tensor) -> torch.Tensor:
        _require(conv, conv.lin is not None and conv.add_self_loops and conv.edge_dim is None and conv.concat
                 and getattr(conv, "res", None) is None,
                 "one input width, add_self_loops=True, edge_dim=None, concat=True, residual=False")
        n, heads, c = len(h), conv.heads, conv.out_channels
        xw = conv.lin(h).view(n, heads, c)
        a_src, a_dst = (xw * conv.att_src).sum(-1), (xw * conv.att_dst).sum(-1)
        src, dst = self._src_nl, self._dst_nl
        e = F.leaky_relu(a_src[src] + a_dst[dst], conv.negative_slope)
        m = xw.new_full((n, heads), float("-inf")).scatter_reduce_(0, dst.unsqueeze(1).expand(-1, heads), e, "amax")
        w = torch.exp(e - m[dst])
        z = xw.new_zeros((n, heads)).index_add_(0, dst, w)
        u = xw.new_zeros((n, heads, c)).index_add_(0, dst, w.unsqueeze(-1) * xw[src])
        index, got = self.to_masters(torch.cat([m, z, u.view(n, heads * c)], 1))
        got_m, got_z, got_u = got[:, :heads], got[:, heads: 2 * heads], got[:, 2 * heads:].reshape(-1, heads, c)
        e_self = F.leaky_relu(a_src + a_dst, conv.negative_slope)
        top = torch.maximum(m, e_self).scatter_reduce_(0, index.unsqueeze(1).expand(-1, heads), got_m, "amax")
        scale, scale_self, scale_got = torch.exp(m - top), torch.exp(e_self - top), torch.exp(got_m - top[index])
        z = (z * scale + scale_self).index_add_(0, index, got_z * scale_got)
        u = u * scale.unsqueeze(-1) + scale_self.unsqueeze(-1) * xw
        u = u.index_add_(0, index, got_u * scale_got.unsqueeze(-1))
        out = (u / z.unsqueeze(-1)).reshape(n, heads * c)
        return out if conv.bias is None else out + conv.bias


def _require(conv, ok: bool, settings: str) -> None:
    if not ok:
        raise ValueError(f"exact inference supports {type(conv).__name__} with {settings} only; found {conv!r}")


def _rows_by_rank(local_nid: torch.Tensor, rank: torch.Tensor, w: int) -> list[torch.Tensor]:
    """``local_nid`` split by ``rank``, each part sorted (the order both sides agree on)."""
    return [torch.sort(local_nid[rank == r]).values for r in range(w)]


def _directory_replies(got: list[torch.Tensor], w: int) -> tuple[list[torch.Tensor], list[int]]:
    """A directory rank's answers to the ``(global_nid, is_master)`` rows each rank sent,
    and up to five vertices without exactly one master.

    Every replica holder gets ``(global_nid, master rank, 0)``, every master
    ``(global_nid, replica rank, 1)``.
    """
    gid = torch.cat([g[:, 0] for g in got]).numpy()
    master = torch.cat([g[:, 1] for g in got]).numpy().astype(bool)
    holder = np.repeat(np.arange(w, dtype=np.int64), [len(g) for g in got])
    uniq, inverse = np.unique(gid, return_inverse=True)
    masters = np.bincount(inverse, weights=master, minlength=len(uniq))
    bad = uniq[masters != 1][:5].tolist()
    master_rank = np.zeros(len(uniq), dtype=np.int64)
    master_rank[inverse[master]] = holder[master]
    rep = ~master
    to_replica = np.stack([gid[rep], master_rank[inverse[rep]], np.zeros(rep.sum(), np.int64)], 1)
    to_master = np.stack([gid[rep], holder[rep], np.ones(rep.sum(), np.int64)], 1)
    rows = torch.from_numpy(np.concatenate([to_replica, to_master]))
    dest = torch.from_numpy(np.concatenate([holder[rep], master_rank[inverse[rep]]]))
    return [rows[dest == r] for r in range(w)], bad


def exact_forward(model, graph: LocalGraph, comm: Comm) -> torch.Tensor:
    """The whole-graph output of ``model`` on every row of ``graph`` (a collective).

    It sets up the routing on each call; keep an :class:`ExactInference` to evaluate
    repeatedly.

    Parameters
    ----------
    model
        A :class:`~training.models.GNN` with the same weights on every rank.
    graph
        This rank's local graph.
    comm
        The process group; ``Comm()`` for a single process.

    Returns
    -------
    torch.Tensor
        ``[graph.num_nodes, out]``, row ``i`` the output of vertex ``graph.global_nid[i]``.
    """
    return ExactInference(graph, comm).forward(model)


def evaluate_exact(task, model, inference: ExactInference) -> dict[str, float]:
    """The metrics of ``task.evaluate`` on the exact outputs of ``model`` (a collective).

    Parameters
    ----------
    task
        A :class:`~training.tasks.NodeTask` (accuracy, or ROC-AUC with two classes, over
        the master nodes of the validation and test splits) or a
        :class:`~training.tasks.LinkTask` (MRR, Hits@50 and ROC-AUC over own held-out
        edges), on the graph of ``inference``; sums are all_reduced over the ranks.
    model
        The model to evaluate (the same weights on every rank).
    inference
        Built with :meth:`ExactInference.for_task` on ``task``.

    Returns
    -------
    dict
        ``{"val": ..., "test": ...}`` and the task's other metrics.
    """
    return task.score(inference.forward(model), inference.comm)


class Evaluator:
    """How a trainer evaluates its global model (a collective: every rank calls it).

    ``"exact"``: :func:`evaluate_exact`, the metrics of the model on the whole graph,
    computed over the partitions (the routing is set up at the first call, its bytes and
    time counted with that evaluation). ``"local"``: ``task.evaluate``, each rank scoring
    its master nodes (or own edges) with the model run on its own graph only, so a
    vertex misses the neighbours held by other ranks (cheaper, not exact; labelled
    ``local`` in the metrics). On a graph that is the whole input (the centralized run)
    both are the whole-graph metrics.

    Parameters
    ----------
    task
        The rank's :class:`~training.tasks.NodeTask` or :class:`~training.tasks.LinkTask`.
    comm
        The process group.
    mode
        One of :data:`training.config.EVAL_MODES`.
    """

    def __init__(self, task, comm: Comm, mode: str = "exact"):
        if mode not in EVAL_MODES:
            raise ValueError(f'Unsupported evaluation "{mode}". Valid choices are "exact", "local".')
        self.task, self.comm, self.mode = task, comm, mode
        self._inference: ExactInference | None = None

    def __call__(self, model) -> dict[str, float]:
        """``{"val": ..., "test": ...}`` and the task's other metrics of ``model``."""
        if self.mode == "local":
            return self.task.evaluate(model, self.comm)
        if self._inference is None:
            self._inference = ExactInference.for_task(self.task, self.comm)
        return evaluate_exact(self.task, model, self._inference)
