"""``con``: the cross-layer contrastive loss of local training (after MOON).

For every layer l and anchor node i (docs/design.md#contrastive-term)::

    ℓ_l(i) = −log( e^{cos(z_l, z_l^g)/τ} / (e^{cos(z_l, z_l^g)/τ} + e^{cos(z_l, z_l^prev)/τ}) )

with z_l the local model's embedding, z_l^g the global model's (this round's start) and
z_l^prev the rank's previous local model's. *(our choice)* L_con is the mean over
layers and anchors, so μ does not have to change with depth. It pulls each layer of the
local model towards the global representation and away from where local drift took it
last round.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

__all__ = ["CON_TAU", "con_weight", "contrastive_loss"]

#: τ of the contrastive loss.
CON_TAU = 0.5


def con_weight(task: str) -> float:
    """μ, the contrastive loss's weight: 1 for node classification, 0.01 for link
    prediction. The contrastive gradient is cosine-based, ~1/|z|, while the dot-product
    link loss's grows with |z|: at μ = 1 it was 10× the link loss's on Cora and, Adam
    following the larger one, kept the link loss at chance (2 ln 2); at 0.01 it is a
    tenth of it (docs/results/train-tuning). ``con`` did not help in the ablation
    (docs/results/train-ablation), so μ and τ are fixed settings."""
    return 1.0 if task == "node" else 0.01


def contrastive_loss(local: list[torch.Tensor], global_: list[torch.Tensor], previous: list[torch.Tensor],
                     anchors: torch.Tensor, tau: float) -> torch.Tensor:
    """Mean over layers and anchor rows of ℓ_l (see the module docstring)."""
    if not (len(local) == len(global_) == len(previous)):
        raise ValueError("contrastive_loss needs the same number of layers from the three models")
    losses = []
    for z, zg, zp in zip(local, global_, previous):
        z, zg, zp = z[anchors], zg[anchors], zp[anchors]
        pos = F.cosine_similarity(z, zg, dim=-1) / tau
        neg = F.cosine_similarity(z, zp, dim=-1) / tau
        # −log(e^pos / (e^pos + e^neg)) = softplus(neg − pos), numerically stable
        losses.append(F.softplus(neg - pos).mean())
    return torch.stack(losses).mean()
