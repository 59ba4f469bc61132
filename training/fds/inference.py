"""Exact full-neighbourhood inference over the partitioned graph, layer by layer.

As DistDGL's ``inference``: layer l computes the embeddings of **all** owned vertices
from layer l-1's embeddings of their in-neighbours; the rows of remote in-neighbours
(the halo) come from their owners. Each rank runs the layer's convolution on the square
graph ``[owned vertices | halo | one phantom vertex]`` with the owned vertices'
in-edges only, and keeps the owned rows, which are then exactly the full-graph
model's rows:

* SAGE (mean) and GAT (attention over in-edges + self-loop) see every in-edge of an
  owned vertex.
* GCN also needs each source's degree. A halo vertex h has no in-edge here, so one
  edge from the phantom vertex (zero features) with weight ``deg(h)`` (its in-degree
  at its owner) restores its symmetric normalisation; it only feeds h's own row,
  which is discarded.

Traffic, all under the category ``eval`` (so training bytes per epoch stay clean): the
halo plan once (the ``global_nid`` each rank needs from each owner, and for GCN their
degrees), then per layer the halo's rows of the previous layer (d floats at layer 0,
``hidden`` after).
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
    """Full-graph logits of a rank's owned vertices (a collective; see the module docstring)."""

    def __init__(self, graph: FdsGraph, comm: Comm, kind: str, category: str = "eval"):
        self.graph = graph
        self.comm = comm
        self.kind = kind
        self.category = category
        self._plan = None

    def _setup(self) -> None:
        graph, comm = self.graph, self.comm
        w = comm.world_size
        n = graph.num_owned
        src = graph.in_src
        dst = torch.repeat_interleave(torch.arange(n), graph.in_ptr[1:] - graph.in_ptr[:-1])
        remote = graph.book.owner(src) != comm.rank
        halo = torch.unique(src[remote])
        order, counts = split_by_owner(graph, halo, w)
        halo = halo[order]  # grouped by owner, sorted within each owner
        # The halo rows each owner sends us, every layer: asked once.
        self._serve = [graph.local_nid(ids) for ids in comm.all_to_all(list(torch.split(halo, counts)), self.category)]
        src_pos = torch.empty(len(src), dtype=torch.int64)
        src_pos[~remote] = graph.local_nid(src[~remote])
        sorted_halo, perm = torch.sort(halo)
        src_pos[remote] = n + perm[torch.searchsorted(sorted_halo, src[remote])]
        size = n + len(halo) + 1  # the last row: GCN's phantom source
        edge_index = torch.stack([src_pos, dst])
        if self.kind == "gcn":
            local_deg = [(graph.in_ptr[ids + 1] - graph.in_ptr[ids]).to(torch.float32) for ids in self._serve]
            halo_deg = torch.cat(comm.all_to_all(local_deg, self.category))
            phantom = torch.stack([torch.full((len(halo),), size - 1), n + torch.arange(len(halo))])
            edge_index = torch.cat([edge_index, phantom], dim=1)
            weight = torch.cat([torch.ones(len(src)), halo_deg])
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", UserWarning)  # "sparse CSR support is in beta"
                op = to_torch_csr_tensor(edge_index.flip(0), weight, size=(size, size))
        else:
            op = graph_operator(self.kind, edge_index, size)
        self._plan = op

    @torch.no_grad()
    def logits(self, model) -> torch.Tensor:
        """The model's output rows of the owned vertices ``[num_owned, out]``."""
        if self._plan is None:
            self._setup()
        op = self._plan
        model.eval()
        h = self.graph.x
        n = self.graph.num_owned
        last = len(model.convs) - 1
        for i, conv in enumerate(model.convs):
            halo_rows = self.comm.all_to_all([h[rows] for rows in self._serve], self.category)
            x = torch.cat([h, *halo_rows, h.new_zeros((1, h.shape[1]))])
            # One layer of GNN.forward (dropout is off in eval mode).
            out = conv(x, op)[:n]
            h = F.relu(out) if i < last else out
        return h
