"""Exact full-neighbourhood inference over the partitioned graph, layer by layer.

As DistDGL's ``inference``: layer l computes the embeddings of owned vertices from
layer l-1's embeddings of their in-neighbours; the rows of remote in-neighbours (the
halo) come from their owners. Each rank runs the layer's convolution on the square
graph ``[owned vertices | halo | one phantom vertex]`` with the in-edges of the rows the
layer computes, and keeps those rows, which are then exactly the full-graph model's
rows:

* SAGE (mean) and GAT (attention over in-edges + self-loop) see every in-edge of a
  computed vertex.
* GCN also needs each source's degree. A source whose in-edges are not in the layer's
  graph (a halo vertex, or an owned vertex the layer does not compute) gets one edge
  from the phantom vertex (zero features) with weight ``deg(h)`` (its in-degree at its
  owner), which restores its symmetric normalisation; it only feeds that source's own
  row, which is discarded.

**Receptive field.** Given the rows to score (``targets``: the sampled validation and
test masters, :mod:`training.eval_sample`; default every owned vertex), the last layer
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

import torch
import torch.nn.functional as F
from torch_geometric.utils import to_torch_csr_tensor

from training.comm import Comm
from training.fds.graph import FdsGraph
from training.fds.remote import split_by_owner
from training.models import graph_operator

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
        self._plans: dict[int, list[tuple[list[torch.Tensor], torch.Tensor]]] = {}  # by depth

    def _setup(self, layers: int) -> list[tuple[list[torch.Tensor], torch.Tensor]]:
        """Each layer's served rows and operator, from the last layer back to the first."""
        graph = self.graph
        n = graph.num_owned
        degree = graph.in_ptr[1:] - graph.in_ptr[:-1]
        dst = torch.repeat_interleave(torch.arange(n), degree)
        need, plans = self.targets.clone(), []
        for layer in reversed(range(layers)):
            edges = need[dst]
            serve, op, owned_sources = self._layer_plan(graph.in_src[edges], dst[edges], need, degree)
            plans.append((serve, op))
            if layer:  # what this layer reads is what the layer before computes
                need = need.clone()
                need[owned_sources] = True
                for rows in serve:
                    need[rows] = True
        return plans[::-1]

    def _layer_plan(self, src: torch.Tensor, dst: torch.Tensor, need: torch.Tensor,
                    degree: torch.Tensor) -> tuple[list[torch.Tensor], torch.Tensor, torch.Tensor]:
        """One layer's rows served to each rank, its operator over ``[owned | halo | phantom]``
        and the owned sources it reads, for the in-edges ``src -> dst`` of the rows it computes."""
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
        size = n + len(halo) + 1  # the last row: GCN's phantom source
        edge_index = torch.stack([src_pos, dst])
        if self.kind != "gcn":
            return serve, graph_operator(self.kind, edge_index, size), owned_sources
        halo_deg = torch.cat(comm.all_to_all([degree[rows].to(torch.float32) for rows in serve], self.category))
        outside = torch.unique(owned_sources[~need[owned_sources]])  # owned sources the layer does not compute
        phantom = torch.stack([torch.full((len(halo) + len(outside),), size - 1),
                               torch.cat([n + torch.arange(len(halo)), outside])])
        weight = torch.cat([torch.ones(len(src)), halo_deg, degree[outside].to(torch.float32)])
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)  # "sparse CSR support is in beta"
            op = to_torch_csr_tensor(torch.cat([edge_index, phantom], dim=1).flip(0), weight, size=(size, size))
        return serve, op, owned_sources

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
            serve, op = self._plans[depth][i]
            halo_rows = self.comm.all_to_all([h[rows] for rows in serve], self.category)
            x = torch.cat([h, *halo_rows, h.new_zeros((1, h.shape[1]))])
            # One layer of GNN.forward (dropout is off in eval mode).
            out = conv(x, op)[:n]
            h = F.relu(out) if i < last else out
        return h
