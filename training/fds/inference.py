"""Exact full-neighbourhood inference over the partitioned graph, layer by layer.

As DistDGL's ``inference``: layer l computes the embeddings of owned vertices from
layer l-1's embeddings of their in-neighbours; the rows of remote in-neighbours (the
halo) come from their owners. SAGE computes the rows the layer needs only: the mean over
their in-edges (a sparse product of their in-edge multiplicities with the owned and halo
rows), then its two linear maps. GCN and GAT run PyG's layer on the square graph
``[owned vertices | halo | one phantom vertex]`` with the in-edges of the rows the layer
computes, and keep those rows. The rows kept are exactly the full-graph model's rows:

* SAGE (mean) and GAT (attention over in-edges + self-loop) see every in-edge of a
  computed vertex.
* GCN also needs each source's degree. A source whose in-edges are not in the layer's
  graph (a halo vertex, or an owned vertex the layer does not compute) gets one edge
  from the phantom vertex (zero features) with weight ``deg(h)`` (its in-degree at its
  owner), which restores its symmetric normalisation; it only feeds that source's own
  row, which is discarded.

**Receptive field.** Given the rows to score (``targets``: the sampled validation and
test masters, :mod:`asepr.training.evaluation.eval_sample`; default every owned vertex), the last layer
computes the targets only, and layer l the rows layer l + 1 reads: the rows it computes,
their owned in-neighbours, and the rows other ranks ask for as their halo. The field is
set up once (one request per owner and layer) and bounds each layer's work and halo by
the targets' neighbourhood instead of the whole graph.

Traffic, all under the category ``eval`` (so training bytes per epoch stay clean): the
halo plan once (the ``global_nid`` each rank needs from each owner at each layer, and
for GCN the degrees of the sources), then per layer the halo's rows of the previous
layer (d floats at layer 0, ``hidden`` after).
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch_geometric.utils import to_torch_csr_tensor

from asepr.training.group.comm import Comm
from asepr.training.evaluation.exact_convs import check_conv
from asepr.training.fds.graph import FdsGraph
from asepr.training.fds.remote import split_by_owner
from asepr.training.models import graph_operator

__all__ = ["LayerwiseInference"]


class LayerwiseInference:
    """Full-graph logits of a rank's target rows (a collective; see the module docstring).

    Parameters
    ----------
    graph, comm
        The rank's graph and the process group.
    kind
        The convolution (``sage``, ``gcn`` or ``gat``).
    category
        The byte counter's category.
    targets
        Boolean ``[num_owned]``: the rows :meth:`logits` computes exactly (default: every
        owned vertex); the other rows of its result are not the model's.
    """

    def __init__(self, graph: FdsGraph, comm: Comm, kind: str, category: str = "eval",
                 targets: torch.Tensor | None = None):
        self.graph = graph
        self.comm = comm
        self.kind = kind
        self.category = category
        self.targets = torch.ones(graph.num_owned, dtype=torch.bool) if targets is None else targets.to(torch.bool)
        self._plans: dict[int, list[_Plan]] = {}  # by depth

    def _setup(self, layers: int) -> list[_Plan]:
        """Each layer's served rows and operator, from the last layer back to the first."""
        graph = self.graph
        n = graph.num_owned
        degree = graph.in_ptr[1:] - graph.in_ptr[:-1]
        dst = torch.repeat_interleave(torch.arange(n), degree)
        need, plans = self.targets.clone(), []
        for layer in reversed(range(layers)):
            edges = need[dst]
            plan, owned_sources = self._layer_plan(graph.in_src[edges], dst[edges], need, degree)
            plans.append(plan)
            if layer:  # what this layer reads is what the layer before computes
                need = need.clone()
                need[owned_sources] = True
                for rows in plan.serve:
                    need[rows] = True
        return plans[::-1]

    def _layer_plan(self, src: torch.Tensor, dst: torch.Tensor, need: torch.Tensor,
                    degree: torch.Tensor) -> tuple[_Plan, torch.Tensor]:
        """One layer's plan (rows served to each rank, its operator) and the owned sources it
        reads, for the in-edges ``src -> dst`` of the rows it computes."""
        graph, comm = self.graph, self.comm
        n = graph.num_owned
        remote = graph.book.owner(src) != comm.rank
        halo = torch.unique(src[remote])
        order, counts = split_by_owner(graph, halo, comm.world_size)
        halo = halo[order]  # grouped by owner, sorted within each owner
        # The halo rows each owner sends us at this layer, every evaluation: asked once.
        serve = [graph.local_nid(ids) for ids in comm.all_to_all(list(torch.split(halo, counts)), self.category)]
        src_pos = torch.empty(len(src), dtype=torch.int64)
        owned_sources = graph.local_nid(src[~remote])
        src_pos[~remote] = owned_sources
        sorted_halo, perm = torch.sort(halo)
        src_pos[remote] = n + perm[torch.searchsorted(sorted_halo, src[remote])]
        if self.kind == "sage":  # the rows it computes only, one block per source: see _sage_rows
            rows = torch.nonzero(need).view(-1)
            pos = torch.searchsorted(rows, dst)
            bounds = [0, n, *(n + int(c) for c in torch.cumsum(torch.tensor(counts, dtype=torch.int64), 0))]
            blocks = []
            for lo, hi in zip(bounds[:-1], bounds[1:]):  # the owned rows, then each owner's halo rows
                mine = (src_pos >= lo) & (src_pos < hi)
                adj = torch.sparse_coo_tensor(torch.stack([pos[mine], src_pos[mine] - lo]), torch.ones(int(mine.sum())),
                                              (len(rows), hi - lo)).coalesce()
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore", UserWarning)  # "sparse CSR support is in beta"
                    blocks.append(adj.to_sparse_csr())
            deg = degree[rows].clamp(min=1).to(torch.float32).unsqueeze(1)
            return _Plan(serve, blocks, rows, deg), owned_sources
        size = n + len(halo) + 1  # the last row: GCN's phantom source
        edge_index = torch.stack([src_pos, dst])
        if self.kind != "gcn":
            return _Plan(serve, graph_operator(self.kind, edge_index, size)), owned_sources
        halo_deg = torch.cat(comm.all_to_all([degree[rows].to(torch.float32) for rows in serve], self.category))
        outside = torch.unique(owned_sources[~need[owned_sources]])  # owned sources the layer does not compute
        phantom = torch.stack([torch.full((len(halo) + len(outside),), size - 1),
                               torch.cat([n + torch.arange(len(halo)), outside])])
        weight = torch.cat([torch.ones(len(src)), halo_deg, degree[outside].to(torch.float32)])
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)  # "sparse CSR support is in beta"
            op = to_torch_csr_tensor(torch.cat([edge_index, phantom], dim=1).flip(0), weight, size=(size, size))
        return _Plan(serve, op), owned_sources

    @torch.no_grad()
    def logits(self, model) -> torch.Tensor:
        """The model's output rows of the owned vertices ``[num_owned, out]``, exact at the targets."""
        depth = len(model.convs)
        if depth not in self._plans:
            self._plans[depth] = self._setup(depth)
        model.eval()
        h = self.graph.x
        n = self.graph.num_owned
        last = len(model.convs) - 1
        for i, conv in enumerate(model.convs):
            plan = self._plans[depth][i]
            halo_rows = self.comm.all_to_all([h[rows] for rows in plan.serve], self.category)
            # One layer of GNN.forward (dropout is off in eval mode).
            if plan.rows is not None:
                out = h.new_zeros((n, conv.out_channels))
                out[plan.rows] = _sage_rows(conv, plan, [h, *halo_rows], h[plan.rows])
            else:
                out = conv(torch.cat([h, *halo_rows, h.new_zeros((1, h.shape[1]))]), plan.op)[:n]
            h = F.relu(out) if i < last else out
        return h


@dataclass
class _Plan:
    """One layer: the owned rows served to each rank, and the operator. SAGE computes only
    the ``rows`` it needs (``op``: their in-edges as CSRs of edge multiplicities, one
    ``[rows, block]`` per block of sources: the owned rows, then each rank's halo rows;
    ``deg`` their in-degrees); the other convolutions run PyG's layer on the square graph
    ``[owned | halo | phantom]`` (``rows`` None)."""

    serve: list[torch.Tensor]
    op: torch.Tensor | list[torch.Tensor]
    rows: torch.Tensor | None = None
    deg: torch.Tensor | None = None


def _sage_rows(conv, plan: _Plan, sources: list[torch.Tensor], x_dst: torch.Tensor) -> torch.Tensor:
    """PyG's mean-aggregating SAGE layer at the plan's rows only: the mean over every stored
    in-edge (repeated edges counted as often as stored, as PyG's edge-wise mean does), then
    ``lin_l``, plus ``lin_r`` of the row itself. Computing only these rows, as one sparse
    product per block of source rows (the owned rows, then each owner's halo rows as they
    arrived), keeps the layer's memory at the rows it needs: no copy of the owned and halo
    rows into one matrix, and no output for rows it does not need."""
    check_conv(conv)
    total = None
    for block, x in zip(plan.op, sources):
        part = torch.sparse.mm(block, x)
        total = part if total is None else total.add_(part)
    out = conv.lin_l(total / plan.deg)
    return out + conv.lin_r(x_dst) if conv.root_weight else out
