"""GNN models: GraphSAGE, GCN and GAT from ``torch_geometric.nn``.

``GNN.forward(x, edge_index, return_embeddings=True)`` also returns every layer's
node embeddings (the last one is the output), which the cross-layer contrastive loss
of :mod:`asepr.training.reconcile.contrastive` compares between models. All models of one
run share one architecture, so their parameters travel as one flat buffer
(:func:`flatten` / :func:`unflatten_into`).
"""

from __future__ import annotations

import warnings

import torch
import torch.nn.functional as F
from torch import nn
from torch_geometric.nn import GATConv, GCNConv, SAGEConv
from torch_geometric.utils import to_torch_csr_tensor

__all__ = ["GNN", "build_model", "flatten", "graph_operator", "num_parameters", "unflatten_into"]


def graph_operator(kind: str, edge_index: torch.Tensor, num_nodes: int) -> torch.Tensor:
    """What the model's convolutions take as the graph, prepared once per graph.

    GraphSAGE and GCN get the transposed adjacency as a ``torch.sparse_csr`` tensor
    (rows are targets): PyG then aggregates with one sparse-dense product instead of
    materialising a message per edge: several times faster with identical outputs
    (``docs/results/implementation-choices/README.md``). GAT needs per-edge attention and keeps ``edge_index``, and so
    does a graph with repeated edges (see below).
    """
    if kind == "gat":
        return edge_index
    # A sparse tensor merges repeated edges into one entry of value 2, which a mean over
    # neighbours would then count once: a multigraph keeps the edge-wise path (exact).
    # Self-loops likewise: GCN's normalisation treats a stored self-loop differently in
    # the two paths (their outputs differ on a graph with self-loops).
    keys = edge_index[1] * max(num_nodes, 1) + edge_index[0]
    if torch.unique(keys).numel() != keys.numel() or bool((edge_index[0] == edge_index[1]).any()):
        return edge_index
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # "sparse CSR support is in beta"
        return to_torch_csr_tensor(edge_index.flip(0), size=(num_nodes, num_nodes))


class GNN(nn.Module):
    """A stack of ``num_layers`` graph convolutions with ReLU and dropout between them.

    Parameters
    ----------
    kind
        ``"sage"`` (mean aggregation), ``"gcn"`` (symmetric normalisation, self-loops)
        or ``"gat"`` (``heads`` attention heads concatenated in hidden layers, one head
        in the output layer).
    in_dim, hidden, out_dim, num_layers, dropout, heads
        The shape of the network.
    """

    def __init__(self, kind: str, in_dim: int, hidden: int, out_dim: int, num_layers: int = 2,
                 dropout: float = 0.5, heads: int = 4):
        super().__init__()
        self.kind = kind
        self.dropout = float(dropout)
        dims = [in_dim] + [hidden] * (num_layers - 1) + [out_dim]
        convs = []
        for i in range(num_layers):
            last = i == num_layers - 1
            if kind == "sage":
                conv = SAGEConv(dims[i], dims[i + 1])
            elif kind == "gcn":
                conv = GCNConv(dims[i], dims[i + 1])
            elif kind == "gat":
                h = 1 if last else heads
                conv = GATConv(dims[i], dims[i + 1] // h, heads=h, concat=True, dropout=self.dropout)
            else:
                raise ValueError(f'Unsupported model "{kind}". Valid choices are "sage", "gcn", "gat".')
            convs.append(conv)
        self.convs = nn.ModuleList(convs)

    def forward(self, x: torch.Tensor, edge_index: torch.Tensor, return_embeddings: bool = False):
        embeddings = []
        for i, conv in enumerate(self.convs):
            x = F.dropout(x, p=self.dropout, training=self.training)
            x = conv(x, edge_index)
            if i < len(self.convs) - 1:
                x = F.relu(x)
            embeddings.append(x)
        return (x, embeddings) if return_embeddings else x


def build_model(config, in_dim: int, out_dim: int) -> GNN:
    """The model a :class:`~asepr.training.config.TrainConfig` describes."""
    return GNN(config.model, in_dim, config.hidden, out_dim, config.num_layers, config.dropout, config.heads)


def num_parameters(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


def flatten(model: nn.Module) -> torch.Tensor:
    """All parameters as one float32 vector in host memory (a copy), in ``model.parameters()``
    order: reconciliation and checkpoints work on host tensors whatever the model's device."""
    return torch.cat([p.detach().reshape(-1).to("cpu", torch.float32) for p in model.parameters()])


@torch.no_grad()
def unflatten_into(model: nn.Module, flat: torch.Tensor) -> None:
    """Copy a :func:`flatten` vector back into ``model``'s parameters."""
    offset = 0
    for p in model.parameters():
        n = p.numel()
        p.copy_(flat[offset: offset + n].view_as(p))
        offset += n
    if offset != flat.numel():
        raise ValueError(f"flat parameter vector has {flat.numel()} values, the model {offset}")
