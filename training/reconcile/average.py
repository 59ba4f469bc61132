"""``avg``: θ_avg = Σ_r n_r θ_r / Σ_r n_r, as one all_reduce of one flat buffer.

The buffer is ``[n_r · θ_r, n_r]``: the weights travel with the parameters, so the
whole average costs a single collective (gloo is about five times faster on one flat
buffer than tensor by tensor).

When the ranks take different numbers of local steps (:mod:`asepr.training.group.capacity`),
:func:`normalised_average` averages each rank's update per step instead (FedNova), in the
same single buffer.
"""

from __future__ import annotations

import torch

from asepr.training.group.comm import Comm

__all__ = ["normalised_average", "weighted_average"]


def weighted_average(flat: torch.Tensor, weight: float, comm: Comm, category: str = "model") -> torch.Tensor:
    """The ``weight``-weighted mean over ranks of the parameter vectors ``flat``.

    A rank with weight 0 contributes nothing; if every weight is 0 the plain mean is used.
    """
    wire = torch.empty(flat.numel() + 2, dtype=torch.float32)
    wire[:-2] = flat.to(torch.float32) * float(weight)
    wire[-2] = float(weight)
    wire[-1] = 1.0
    comm.all_reduce(wire, category)
    total, ranks = float(wire[-2]), float(wire[-1])
    if total > 0:
        return (wire[:-2] / total).to(flat.dtype)
    # Nobody has training data: fall back to the unweighted mean (needs the raw vectors).
    raw = flat.to(torch.float32).clone()
    comm.all_reduce(raw, category)
    return (raw / ranks).to(flat.dtype)


def normalised_average(global_flat: torch.Tensor, local_flat: torch.Tensor, steps: int, weight: float, comm: Comm,
                       extra: torch.Tensor | None = None,
                       category: str = "model") -> tuple[torch.Tensor, torch.Tensor | None]:
    """FedNova's step-normalised average: ``θ_g + τ_eff · Σ_r p_r (θ_r − θ_g) / τ_r`` with
    ``τ_eff = Σ_r p_r τ_r`` (``p_r`` the ``weight``-weighted shares, ``τ_r`` = ``steps``).

    A rank that took three steps moves its model about a third as far as one that took
    ten; the plain average would count the latter's direction about three times as much
    and drift towards its data. Per step, every rank's direction counts by its weight
    alone, and ``τ_eff`` scales the mean step back to the ranks' mean number of steps.
    With equal steps it is the weighted average. ``extra`` (SCAFFOLD's control variate,
    already per step) is averaged by weight in the same buffer; its mean is returned
    second (None without it). One all_reduce of ``[p_r (θ_r − θ_g) / τ_r, p_r extra_r,
    p_r τ_r]``.
    """
    n = local_flat.numel()
    parts = [(local_flat - global_flat) / float(steps)]
    if extra is not None:
        parts.append(extra.to(local_flat.dtype))
    parts.append(torch.tensor([float(steps)], dtype=local_flat.dtype))
    mean = weighted_average(torch.cat(parts), weight, comm, category)
    new = global_flat + float(mean[-1]) * mean[:n]
    return new, (mean[n:-1] if extra is not None else None)
