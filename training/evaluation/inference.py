"""Exact full-neighbourhood inference of one model over a vertex-cut partition.

``asepr partition`` cuts vertices: every edge lives in exactly one partition, a vertex
is replicated in every partition holding one of its edges, and one replica is the
master. Each rank sees only its own edges, so a layer's aggregate of a vertex is split
over the ranks that hold it. :class:`ExactInference` computes, on every rank, exactly
the output the model gives on the whole graph for the rows it is asked for (the
**targets**: a node task's validation and test masters, a link task's held-out edge
ends and ranking candidates, or every row), layer by layer:

1. each rank aggregates over its own edges into **partials** of its local rows;
2. every replica sends its partials to the rank of its master, which combines them with
   its own (and with the root or self-loop term, which needs only the master's row)
   into the layer's output row;
3. the master sends the row the next layer aggregates back to the replicas that use it.

**Receptive field.** Layer ``L`` (the last) is computed for the targets only; layer
``l`` for the vertices whose row layer ``l + 1`` reads on some rank: the in-neighbours,
over that rank's edges, of the vertices layer ``l + 1`` computes, and those vertices
themselves. A vertex a layer computes is computed at its master from the partials of
every replica; its row goes back only to the replicas that read it. The field is set up
once per graph and depth (a few one-byte flags per replica and layer) and costs nothing
per evaluation.

**Bounded memory.** A layer runs over ``global_nid`` ranges, the same on every rank
(one exchange each way per range), sized so that one range's rows of the widest layer
take about ``budget_bytes``; within a range the in-edges are gathered in blocks of
about ``budget_bytes`` too. No tensor of one row per edge is built. Between layers a rank
keeps one row per local row at the width the next layer aggregates (the narrower of its
input and output, below) and, at the masters, the next SAGE layer's root term of the
rows it computes.

**Narrow rows.** Every convolution is linear in the rows it aggregates, so a rank
aggregates the narrower of ``h`` and ``W h`` and the master applies ``W`` to the sum
when the rows were not transformed first. A master sends the next layer's rows already
transformed when that is narrower (a 2-layer SAGE with hidden 128 and 10 classes sends
10 floats per row back, not 128).

What a partial holds, and how masters combine them:

* SAGE (mean): the sum of the neighbours' rows (``h`` or ``W_l h``); divided at the
  master by the global in-degree, then ``W_l`` (when not applied) and the root term
  ``W_r h_v``.
* GCN: the sum of ``deg(j)^-1/2 · h_j`` (or of ``W h_j``) over the in-edges; the global
  degrees (in-edges other than self-loops, plus the one self-loop GCN adds) are combined
  once, at setup, and known to every replica.
* GAT: per head, the local maximum ``m`` of the attention logits, the exp-sum
  ``z = Σ exp(e - m)`` and the weighted sum ``u = Σ exp(e - m) · W h_j``. The master
  takes the maximum ``M`` over all partials and its self-loop, rescales each partial by
  ``exp(m - M)``, adds them, and divides ``u`` by ``z``.

The per-convolution algebra (which settings split this way, the widths, the narrower
message, GAT's combine) is :mod:`asepr.training.evaluation.exact_convs`.

Stored self-loops, repeated edges, isolated vertices, and vertices whose master holds
none of their edges are all exact (PyG's semantics: SAGE averages over every stored
in-edge; GCN and GAT drop stored self-loops and add one per vertex).

Routing is set up once per graph without reading any other rank's store, through a
directory rank per vertex (:mod:`asepr.training.graph.replica_routing`): it tells every replica the
rank of its master and every master the ranks of its replicas. Several partitions per
rank (more partitions than ranks) are merged by :func:`asepr.training.graph.data.load_local_graph`
into one local graph and need nothing more.

Bytes (float32, one flat buffer per direction and range through
:meth:`Comm.all_to_all`, under the category ``"eval"``). Per layer ``l`` a replica
row of a vertex the layer computes sends its partial up, ``4 · p_l`` bytes, and a
replica row that the next layer reads receives ``4 · w_l``: the next layer's
``min(d_in, d_out)`` (its input row, or ``W`` times it when that is narrower); after
the last layer a target replica receives its ``d_out`` outputs.

==========  ============================
model       partial width ``p`` (floats)
==========  ============================
SAGE, GCN   ``min(d_in, d_out)``
GAT         ``d_out + 2 · heads``
==========  ============================

With every row a target every vertex is computed at every layer: the sums over ranks
of the replica rows sent and served are both ``Σ_v (r_v - 1)``, the replication beyond
one copy per vertex. The one-time setup sends 8 bytes per local row to its directory
rank, which answers with 8 bytes to each replica and 8 to its master per replica; then
8 bytes per replica each way for the degrees (two int32 counts; int64 on a graph where a
vertex's in-edges on one rank times the ranks reach 2^31), and one byte per
replica each way and layer for the receptive field.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numba
import numpy as np
import torch
import torch.nn.functional as F
from torch_geometric.nn import GATConv, GCNConv, SAGEConv

from asepr.training.group.comm import Comm
from asepr.training.config import EVAL_MODES
from asepr.training.graph.data import LocalGraph
from asepr.training.evaluation.eval_sample import DEFAULT_EVAL_SAMPLE, EvalSample, draw_sample
from asepr.training.evaluation.exact_convs import check_conv, conv_message, conv_widths, gat_combine
from asepr.training.graph.replica_routing import route_replicas

__all__ = ["BUDGET_BYTES", "ExactInference", "Evaluator", "evaluate_exact", "exact_forward"]

#: About this many bytes per block of rows or of in-edges (see the module docstring).
BUDGET_BYTES = 64 << 20


@dataclass
class _Layer:
    """One layer's receptive field on this rank: the rows it computes (``need``, the same
    vertices on every holder), the rows whose output this rank reads (``use``), and, per
    peer rank, the sorted local rows of each exchange."""

    need: torch.Tensor
    use: torch.Tensor
    up_send: list[torch.Tensor]  # replica rows computed, partials to their master
    up_recv: list[torch.Tensor]  # master rows computed, partials from that replica
    down_send: list[torch.Tensor]  # master rows whose replica there reads them
    down_recv: list[torch.Tensor]  # replica rows read here, from their master


class ExactInference:
    """The whole-graph output of a model on this rank's target rows (see the module docstring).

    Construction, :meth:`prepare` and :meth:`forward` are collectives: every rank of
    ``comm`` calls them.

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
    targets
        Boolean ``[num_nodes]``: the rows whose output :meth:`forward` computes (default:
        every row).
    budget_bytes
        The size of one block of rows or in-edges (:data:`BUDGET_BYTES`).
    """

    def __init__(self, graph: LocalGraph, comm: Comm, edges: torch.Tensor | None = None, category: str = "eval",
                 targets: torch.Tensor | None = None, budget_bytes: int = BUDGET_BYTES):
        self.graph, self.comm, self.category = graph, comm, category
        self.budget = max(int(budget_bytes), 64)
        n = graph.num_nodes
        self.targets = torch.ones(n, dtype=torch.bool) if targets is None else targets.to(torch.bool)
        ei = (graph.own_edges if edges is None else edges).numpy()
        counts, loops = np.zeros(n, np.int64), np.zeros(n, np.int64)
        _count_in_edges(ei[0], ei[1], graph.undirected, counts, loops)
        #: Stored self-loops per row (SAGE's mean counts them; GCN and GAT add their own).
        self._loops = torch.from_numpy(loops).to(torch.float32)
        indptr = np.zeros(n + 1, np.int64)
        np.cumsum(counts, out=indptr[1:])
        sources = np.empty(int(indptr[-1]), np.int32 if n < 2**31 else np.int64)
        _fill_in_edges(ei[0], ei[1], graph.undirected, indptr[:-1].copy(), sources)
        self._indptr, self._src = torch.from_numpy(indptr), torch.from_numpy(sources)  # in-edges by target (CSR)
        counts = torch.from_numpy(counts)
        self._span = max(1, comm.max_int(int(graph.global_nid.max()) + 1 if n else 0))
        self._replica_rows, self._master_rows = route_replicas(
            graph.global_nid, graph.is_master, comm, category, self._span,
            f"rank {comm.rank}: partitions {list(graph.part_ids)}")
        self._replica_index = torch.cat(self._replica_rows)
        self._master_index = torch.cat(self._master_rows)
        # int32 counts (half the bytes of int64) unless a sum over the ranks could reach 2^31.
        most = comm.max_int(int((counts + torch.from_numpy(loops)).max()) if n else 0)
        wide = most * comm.world_size >= 2**31
        degrees = torch.stack([counts + torch.from_numpy(loops), counts], 1).to(torch.int64 if wide else torch.int32)
        degrees = self.to_replicas(self.sum_at_masters(degrees))
        #: Global in-degree over all stored edges (SAGE's mean), and GCN's degree.
        self.in_degree = degrees[:, 0].to(torch.float32)
        self.gcn_degree = degrees[:, 1].to(torch.float32) + 1
        self._fields: dict[int, list[_Layer]] = {}

    @classmethod
    def for_task(cls, task, comm: Comm, category: str = "eval", budget_bytes: int = BUDGET_BYTES,
                 sample: EvalSample | None = None) -> ExactInference:
        """The inference over the edges ``task`` passes messages on, for the rows it scores
        (a collective): a node task's validation and test masters (those of ``sample``
        when given, :func:`asepr.training.evaluation.eval_sample.draw_sample`); a link task's held-out
        edge ends and its ranking candidates, over its training edges (held-out edges
        carry no messages, as in its training)."""
        graph = task.graph
        if task.name != "link":
            targets = graph.val_mask | graph.test_mask if sample is None else sample.targets
            return cls(graph, comm, None, category, targets, budget_bytes)
        targets = torch.zeros(graph.num_nodes, dtype=torch.bool)
        targets[torch.cat([task.val_pos.reshape(-1), task.test_pos.reshape(-1)])] = True
        targets[task.eval_negatives(comm).rows] = True
        return cls(graph, comm, task.train_pos, category, targets, budget_bytes)

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

    # -- the receptive field -------------------------------------------------------------
    def prepare(self, layers: int) -> list[_Layer]:
        """The receptive field of the targets through ``layers`` layers (set up once per depth)."""
        if layers not in self._fields:
            field, use = [], self.targets
            for _ in range(layers):
                index, read = self.to_masters(use.to(torch.uint8).unsqueeze(1))
                read = read[:, 0] > 0  # whether each replica reads the row
                need = use.to(torch.uint8)
                need[index[read]] = 1  # a master computes what any holder reads
                need = self.to_replicas(need.unsqueeze(1))[:, 0] > 0
                read = torch.split(read, [len(r) for r in self._master_rows])
                field.append(_Layer(need, use, [r[need[r]] for r in self._replica_rows],
                                    [r[need[r]] for r in self._master_rows],
                                    [r[f] for r, f in zip(self._master_rows, read)],
                                    [r[use[r]] for r in self._replica_rows]))
                use = self._read_by(need)
            self._fields[layers] = field[::-1]
        return self._fields[layers]

    def _read_by(self, need: torch.Tensor) -> torch.Tensor:
        """The rows a layer computing the ``need`` rows reads here: those rows and their in-neighbours."""
        read = need.clone()
        for _, _, _, sources in self._in_edges(torch.nonzero(need).view(-1), 2, need.device):
            read[sources] = True
        return read

    def _in_edges(self, rows: torch.Tensor, width: int,
                  device: torch.device) -> Iterator[tuple[int, int, torch.Tensor, torch.Tensor]]:
        """The in-edges of ``rows`` in blocks of about ``budget_bytes`` at ``width`` floats per
        edge: ``(lo, hi, segment, sources)`` on ``device``, edge ``i`` of the block going from
        row ``sources[i]`` to ``rows[lo + segment[i]]`` (a row's edges are never split)."""
        start = self._indptr[rows]
        counts = self._indptr[rows + 1] - start
        cum = torch.cumsum(counts, 0)
        step, lo = max(1, self.budget // (4 * max(width, 1))), 0
        while lo < len(rows):
            base = int(cum[lo - 1]) if lo else 0
            hi = max(lo + 1, int(torch.searchsorted(cum, base + step, right=True)))
            c = counts[lo:hi]
            before = cum[lo:hi] - c - base  # the block's edges before each row's
            seg = torch.repeat_interleave(torch.arange(hi - lo), c)
            edge = torch.repeat_interleave(start[lo:hi] - before, c) + torch.arange(int(cum[hi - 1]) - base)
            yield lo, hi, seg.to(device), self._src[edge].to(device, torch.int64)
            lo = hi

    # -- the model -----------------------------------------------------------------------
    @torch.no_grad()
    def forward(self, model, x: torch.Tensor | None = None) -> torch.Tensor:
        """The output rows ``[num_nodes, out]`` of ``model`` (a :class:`~asepr.training.models.GNN`,
        put in eval mode) on the whole graph, exact at the target rows (other rows are
        zero or partial); ``x`` defaults to ``graph.x``."""
        model.eval()
        convs = list(model.convs)
        for conv in convs:
            check_conv(conv)
        field = self.prepare(len(convs))
        x = self.graph.x if x is None else x
        state = _Rows(*conv_message(convs[0], x), source=x)
        ranges = self._ranges(max(max(conv_widths(conv)) for conv in convs))
        for i, conv in enumerate(convs):
            following = (convs[i + 1], field[i + 1]) if i + 1 < len(convs) else None
            state = self._layer(conv, state, field[i], following, ranges)
        return state.rows

    def _ranges(self, width: int) -> list[tuple[int, int]]:
        """Local row ranges of equal ``global_nid`` spans, the same spans on every rank,
        each of about ``budget_bytes`` at ``width`` floats per row on the largest rank."""
        n = self.graph.num_nodes
        count = max(1, self.comm.max_int(-(-n * width * 4 // self.budget)))
        bounds = torch.tensor([-(-self._span * c // count) for c in range(count + 1)], dtype=torch.int64)
        at = torch.searchsorted(self.graph.global_nid, bounds).tolist()
        return list(zip(at[:-1], at[1:]))

    def _layer(self, conv, state: _Rows, lay: _Layer, following, ranges) -> _Rows:
        """One layer over the row ranges: the partials up, the masters' rows, the next rows down."""
        if isinstance(conv, GATConv) and not state.transformed:
            state = _Rows(conv.lin(state.rows), True, source=state.source)
        nxt = None if following is None else following[0]
        width = conv_widths(conv)[1] if nxt is None else min(conv_widths(nxt))
        result = state.rows.new_zeros((self.graph.num_nodes, width))
        transformed, roots = True, []
        is_master = self.graph.is_master
        for a, b in ranges:
            got = self.comm.all_to_all([self._partial(conv, state, _within(r, a, b)) for r in lay.up_send],
                                       self.category)
            masters = torch.nonzero(lay.need[a:b] & is_master[a:b]).view(-1) + a
            pos = torch.searchsorted(masters, torch.cat([_within(r, a, b) for r in lay.up_recv]))
            out = self._combine(conv, state, masters, self._partial(conv, state, masters), pos, torch.cat(got))
            if nxt is not None:
                h = F.relu(out)
                out, transformed = conv_message(nxt, h)
                if isinstance(nxt, SAGEConv) and nxt.root_weight:
                    keep = following[1].need[masters]
                    roots.append((masters[keep], nxt.lin_r(h[keep])))
            result[masters] = out
            back = self.comm.all_to_all([result[_within(r, a, b)] for r in lay.down_send], self.category)
            result[torch.cat([_within(r, a, b) for r in lay.down_recv])] = torch.cat(back)
        if not roots:
            return _Rows(result, transformed)
        return _Rows(result, transformed, torch.cat([r for r, _ in roots]), torch.cat([v for _, v in roots]))

    def _partial(self, conv, state: _Rows, rows: torch.Tensor) -> torch.Tensor:
        """This rank's partials of ``rows`` (see the module docstring)."""
        m = state.rows
        if isinstance(conv, GATConv):
            return self._gat_partial(conv, m, rows)
        out = m.new_zeros((len(rows), m.shape[1]))
        gcn = isinstance(conv, GCNConv)
        inv_sqrt = self.gcn_degree.to(m.device).pow(-0.5) if gcn else None
        for lo, hi, seg, src in self._in_edges(rows, m.shape[1], m.device):
            msg = m[src] * inv_sqrt[src].unsqueeze(1) if gcn else m[src]
            out[lo:hi].index_add_(0, seg, msg)
        return out if gcn else out + self._loops[rows].to(m.device).unsqueeze(1) * m[rows]

    def _gat_partial(self, conv: GATConv, xw: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
        heads, c = conv.heads, conv.out_channels
        out = xw.new_empty((len(rows), heads * (c + 2)))
        for lo, hi, seg, src in self._in_edges(rows, heads * c, xw.device):
            k = hi - lo
            xs = xw[src].view(-1, heads, c)
            a_dst = (xw[rows[lo:hi]].view(k, heads, c) * conv.att_dst).sum(-1)
            e = F.leaky_relu((xs * conv.att_src).sum(-1) + a_dst[seg], conv.negative_slope)
            top = xw.new_full((k, heads), float("-inf")).scatter_reduce_(
                0, seg.unsqueeze(1).expand(-1, heads), e, "amax")
            w = torch.exp(e - top[seg])
            z = xw.new_zeros((k, heads)).index_add_(0, seg, w)
            u = xw.new_zeros((k, heads, c)).index_add_(0, seg, w.unsqueeze(-1) * xs)
            out[lo:hi] = torch.cat([top, z, u.view(k, heads * c)], 1)
        return out

    def _combine(self, conv, state: _Rows, masters: torch.Tensor, own: torch.Tensor, pos: torch.Tensor,
                 got: torch.Tensor) -> torch.Tensor:
        """The output rows of ``masters`` from their own partials and those ``got`` from
        replicas (``pos``: the master each belongs to)."""
        pos = pos.to(own.device)
        if isinstance(conv, GATConv):
            return gat_combine(conv, state.rows[masters], own, pos, got)
        total = own.index_add_(0, pos, got)
        if isinstance(conv, GCNConv):
            degree = self.gcn_degree[masters].to(own.device).unsqueeze(1)
            s = degree.pow(-0.5) * total + state.rows[masters] / degree
            out = s if state.transformed else conv.lin(s)
            return out if conv.bias is None else out + conv.bias
        mean = total / self.in_degree[masters].to(own.device).clamp(min=1).unsqueeze(1)
        bias = conv.lin_l.bias
        out = (mean if bias is None else mean + bias) if state.transformed else conv.lin_l(mean)
        if not conv.root_weight:
            return out
        if state.source is not None:
            return out + conv.lin_r(state.source[masters])
        return out + state.root[torch.searchsorted(state.root_rows, masters)]


@dataclass
class _Rows:
    """What a layer aggregates: ``rows`` (``[num_nodes, w]``, valid at the rows it reads),
    ``transformed`` when the layer's weight is already applied; the root term of a SAGE
    layer at the masters it computes (``root`` at the sorted ``root_rows``), or the
    input ``source`` it is computed from."""

    rows: torch.Tensor
    transformed: bool
    root_rows: torch.Tensor | None = None
    root: torch.Tensor | None = None
    source: torch.Tensor | None = None


def _within(rows: torch.Tensor, a: int, b: int) -> torch.Tensor:
    """The sorted ``rows`` in ``[a, b)``."""
    lo, hi = torch.searchsorted(rows, torch.tensor([a, b], dtype=rows.dtype)).tolist()
    return rows[lo:hi]


@numba.njit(cache=True)
def _count_in_edges(src, dst, both, counts, loops):  # pragma: no cover - compiled
    """In-edges per row other than self-loops (``counts``) and self-loops (``loops``; an
    undirected graph's stored loop counts twice, as its symmetrised edge list holds it)."""
    for e in range(len(src)):
        s, d = src[e], dst[e]
        if s == d:
            loops[d] += 2 if both else 1
        else:
            counts[d] += 1
            if both:
                counts[s] += 1


@numba.njit(cache=True)
def _fill_in_edges(src, dst, both, position, sources):  # pragma: no cover - compiled
    """The CSR of in-edges by target row (self-loops left out), written in place: a
    counting sort that needs no permutation of the edges."""
    for e in range(len(src)):
        s, d = src[e], dst[e]
        if s != d:
            sources[position[d]] = s
            position[d] += 1
            if both:
                sources[position[s]] = d
                position[s] += 1


def exact_forward(model, graph: LocalGraph, comm: Comm) -> torch.Tensor:
    """The whole-graph output of ``model`` on every row of ``graph`` (a collective).

    It sets up the routing on each call; keep an :class:`ExactInference` to evaluate
    repeatedly.

    Parameters
    ----------
    model
        A :class:`~asepr.training.models.GNN` with the same weights on every rank.
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
        A :class:`~asepr.training.tasks.NodeTask` (accuracy, or ROC-AUC with two classes, over
        the master nodes of the validation and test splits) or a
        :class:`~asepr.training.tasks.LinkTask` (MRR, Hits@50 and ROC-AUC over own held-out
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
    computed over the partitions, for a node task on a seeded sample of about ``sample``
    validation and test masters per split (every master of a split of at most twice that;
    :mod:`asepr.training.evaluation.eval_sample`), with the metric's 95 % interval and the numbers scored
    as extra columns; a link task scores every held-out edge. The sample, the routing
    and the receptive field are set up at the first call, their bytes and time counted
    with that evaluation (``eval_setup_bytes``: the bytes of that setup, and
    ``eval_scoring_bytes`` those of the evaluation without it, each the mean over ranks
    and, ``_max``, the largest rank). ``"local"``: ``task.evaluate``, each rank scoring its master nodes
    (or own edges) with the model run on its own graph only, so a vertex misses the
    neighbours held by other ranks (cheaper, not exact; labelled ``local`` in the
    metrics). On a graph that is the whole input (the centralized run) both are the
    whole-graph metrics.

    Parameters
    ----------
    task
        The rank's :class:`~asepr.training.tasks.NodeTask` or :class:`~asepr.training.tasks.LinkTask`.
    comm
        The process group.
    mode
        One of :data:`asepr.training.config.EVAL_MODES`.
    sample, seed
        Masters scored per split (0: all) and the sample's seed; default: the
        task config's ``eval_sample`` and ``seed``.
    """

    def __init__(self, task, comm: Comm, mode: str = "exact", sample: int | None = None, seed: int | None = None):
        if mode not in EVAL_MODES:
            raise ValueError(f'Unsupported evaluation "{mode}". Valid choices are "exact", "local".')
        self.task, self.comm, self.mode = task, comm, mode
        config = getattr(task, "config", None)
        self.cap = int(getattr(config, "eval_sample", DEFAULT_EVAL_SAMPLE) if sample is None else sample)
        self.seed = int(getattr(config, "seed", 0) if seed is None else seed)
        self._inference: ExactInference | None = None
        self._sample: EvalSample | None = None
        self._scorer = task

    def __call__(self, model) -> dict[str, float]:
        """``{"val": ..., "test": ...}`` and the task's other metrics of ``model``."""
        if self.mode == "local":
            return self.task.evaluate(model, self.comm)
        setup, start = 0.0, self.comm.bytes.total_sent
        if self._inference is None:
            before = start
            if self.task.name != "link":
                self._sample = draw_sample(self.task.graph, self.comm, self.cap, self.seed)
                self._scorer = self._sample.task_view(self.task)
            self._inference = ExactInference.for_task(self.task, self.comm, sample=self._sample)
            setup = self.comm.bytes.total_sent - before
        metrics = evaluate_exact(self._scorer, model, self._inference)
        every = self.comm.gather_uncounted(torch.tensor([setup, self.comm.bytes.total_sent - start - setup]))
        metrics.update(eval_setup_bytes=float(every[:, 0].mean()), eval_setup_bytes_max=float(every[:, 0].max()),
                       eval_scoring_bytes=float(every[:, 1].mean()), eval_scoring_bytes_max=float(every[:, 1].max()))
        if self._sample is not None:
            metrics.update(self._sample.columns(self.task.metric, metrics))
        return metrics
