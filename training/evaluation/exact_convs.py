"""The per-convolution algebra of exact inference (:mod:`asepr.training.evaluation.inference`).

Each supported convolution is linear in the rows it aggregates, so its whole-graph
output at a vertex splits into partials over the ranks that hold the vertex's in-edges:
these functions say which convolutions (and settings) split that way
(:func:`check_conv`), their widths (:func:`conv_widths`), the narrower of ``h`` and
``W h`` that a rank aggregates (:func:`conv_message`), and how a master combines GAT's
per-head partials (:func:`gat_combine`). SAGE's and GCN's combine is a sum, done where
the partials meet (:class:`asepr.training.evaluation.inference.ExactInference`).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch_geometric.nn import GATConv, GCNConv, SAGEConv

__all__ = ["check_conv", "conv_message", "conv_weight", "conv_widths", "gat_combine"]


def gat_combine(conv: GATConv, xw: torch.Tensor, own: torch.Tensor, pos: torch.Tensor,
                got: torch.Tensor) -> torch.Tensor:
    """GAT's master rows: every partial rescaled to the largest logit, the self-loop added."""
    heads, c = conv.heads, conv.out_channels
    n = len(xw)
    xw = xw.view(n, heads, c)
    m, z, u = own[:, :heads], own[:, heads: 2 * heads], own[:, 2 * heads:].reshape(n, heads, c)
    got_m, got_z, got_u = got[:, :heads], got[:, heads: 2 * heads], got[:, 2 * heads:].reshape(-1, heads, c)
    e_self = F.leaky_relu((xw * conv.att_src).sum(-1) + (xw * conv.att_dst).sum(-1), conv.negative_slope)
    top = torch.maximum(m, e_self).scatter_reduce_(0, pos.unsqueeze(1).expand(-1, heads), got_m, "amax")
    scale, scale_self, scale_got = torch.exp(m - top), torch.exp(e_self - top), torch.exp(got_m - top[pos])
    z = (z * scale + scale_self).index_add_(0, pos, got_z * scale_got)
    u = u * scale.unsqueeze(-1) + scale_self.unsqueeze(-1) * xw
    u = u.index_add_(0, pos, got_u * scale_got.unsqueeze(-1))
    out = (u / z.unsqueeze(-1)).reshape(n, heads * c)
    return out if conv.bias is None else out + conv.bias


def conv_weight(conv) -> torch.Tensor:
    """The weight applied to the aggregated rows (SAGE's ``lin_l``, GCN's and GAT's ``lin``)."""
    return conv.lin_l.weight if isinstance(conv, SAGEConv) else conv.lin.weight


def conv_widths(conv) -> tuple[int, int]:
    """``(d_in, d_out)`` of a convolution."""
    out, inp = conv_weight(conv).shape
    return int(inp), int(out)


def conv_message(conv, h: torch.Tensor) -> tuple[torch.Tensor, bool]:
    """The rows ``conv`` aggregates from ``h``: ``W h`` when narrower than ``h`` (then
    True), else ``h`` itself."""
    d_in, d_out = conv_widths(conv)
    if d_out >= d_in:
        return h, False
    return (F.linear(h, conv_weight(conv)) if isinstance(conv, SAGEConv) else conv.lin(h)), True


def check_conv(conv) -> None:
    """Refuse a convolution (or settings) whose whole-graph output exact inference cannot split."""
    if isinstance(conv, SAGEConv):
        _require(conv, str(conv.aggr) == "mean" and not conv.normalize and not conv.project,
                 'aggr="mean", normalize=False, project=False')
    elif isinstance(conv, GCNConv):
        _require(conv, conv.normalize and conv.add_self_loops and not conv.improved,
                 "normalize=True, add_self_loops=True, improved=False")
    elif isinstance(conv, GATConv):
        _require(conv, conv.lin is not None and conv.add_self_loops and conv.edge_dim is None and conv.concat
                 and getattr(conv, "res", None) is None,
                 "one input width, add_self_loops=True, edge_dim=None, concat=True, residual=False")
    else:
        raise ValueError(f'Unsupported convolution "{type(conv).__name__}". Valid choices are "SAGEConv", '
                         '"GCNConv", "GATConv".')


def _require(conv, ok: bool, settings: str) -> None:
    if not ok:
        raise ValueError(f"exact inference supports {type(conv).__name__} with {settings} only; found {conv!r}")
