"""``scaffold``: control variates against client drift (after SCAFFOLD, Karimireddy et
al., "SCAFFOLD: Stochastic Controlled Averaging for Federated Learning", ICML 2020).

ASEP puts attribute-similar vertices together, so a partition's labels are skewed (its
label entropy is below the whole graph's). Between two averages each rank's optimiser
then steps towards its own classes, and the average of those steps keeps little
progress: on amazon-photo at k = 4 the averaged model needed three times the epochs
of the same training on hash partitions to reach the same accuracy
(``docs/results/train-tuning``).

Each rank keeps ``c_r``, the mean gradient of its own loss over the previous segment of
local steps, and every rank knows ``c``, their weighted mean. A local step adds
``c − c_r`` to the gradient before the optimiser sees it, so it follows the global
objective's direction rather than the rank's own. At each synchronisation the new
``c_r`` (the mean raw gradient of the segment just trained, SCAFFOLD's option I taken
along the local path instead of at the global point, which needs no extra pass) travels
in the same all_reduce buffer as the parameters, so the cost is one more
parameter-sized vector per synchronisation and no extra collective.

A segment is short (10 mini-batch steps by default), and a round's last segment can be
shorter still (21 steps per round at k = 8 on coauthor-physics end in a segment of one).
A path segment of s < S steps (S = ``segment_steps``, the run's ``sync_every``) moves
``c_r`` only by s / S of the way to its mean, so ``c_r`` stays about a mean over the last
S steps instead of being replaced by one or two mini-batch gradients for the next S steps.

Variants that did not help were measured and removed in version 0.2
(docs/results/train-scaffold, docs/results/train-scaffold-global): an exponential memory
over segments, a gate by the agreement of consecutive corrections, and the estimate at
the synchronised global model (SCAFFOLD's option I proper).
"""

from __future__ import annotations

from pathlib import Path

import torch

from asepr.storage.errors import StoreError, format_problem

__all__ = ["ControlVariates"]


class ControlVariates:
    """One rank's control variates ``c_r`` and the global ``c`` (flat, parameter order).

    Parameters
    ----------
    model
        The rank's local model: the gradients of its parameters are corrected.
    clip
        > 0: the correction's norm is at most ``clip`` times the raw gradient's (the
        whole parameter vector's), so a stale or noisy ``c − c_r`` cannot outweigh the
        step's own gradient once the gradients get small; 0: unbounded.
    segment_steps
        > 0: the steps of a full path segment; a shorter one enters ``c_r`` with weight
        steps / ``segment_steps`` (see the module docstring); 0: every segment whole.
    """

    def __init__(self, model: torch.nn.Module, clip: float = 0.0, segment_steps: int = 0):
        self.segment_steps = int(segment_steps)
        self.clip = float(clip)
        self.params = [p for p in model.parameters()]
        size = sum(p.numel() for p in self.params)
        self.c_local = torch.zeros(size)
        self.c_global = torch.zeros(size)
        self._sum = torch.zeros(size)
        self._steps = 0
        self._delta_sq = 0.0
        self._delta: list[torch.Tensor] = []
        self._slices: list[torch.Tensor] = []

    def begin(self) -> None:
        """Start a segment of local steps: the correction is ``c − c_r`` until the next sync."""
        delta = self.c_global - self.c_local
        self._delta_sq = float(delta.pow(2).sum())
        self._sum.zero_()
        self._steps = 0
        offsets = 0
        self._delta, self._slices = [], []
        for p in self.params:
            n = p.numel()
            self._delta.append(delta[offsets: offsets + n].view_as(p))
            self._slices.append(self._sum[offsets: offsets + n].view_as(p))
            offsets += n

    def correct(self) -> None:
        """After ``backward()``: record the raw gradients, then add ``c − c_r`` to them
        (scaled down to ``clip`` times the gradient's norm when it is larger)."""
        scale = 1.0
        if self.clip > 0:
            grad_sq = sum(float(p.grad.pow(2).sum()) for p in self.params if p.grad is not None)
            delta_sq = self._delta_sq
            if delta_sq > 0 and delta_sq > self.clip ** 2 * grad_sq:
                scale = self.clip * (grad_sq / delta_sq) ** 0.5
        for p, delta, acc in zip(self.params, self._delta, self._slices):
            if p.grad is not None:
                acc.add_(p.grad.to(acc.device))  # the variates stay in host memory (asepr.training.group.device)
                p.grad.add_(delta.to(p.grad.device), alpha=scale)
        self._steps += 1

    def estimate(self) -> torch.Tensor:
        """The new ``c_r``: the mean raw gradient of this segment, moved towards from the
        old ``c_r`` by the segment's share of a full one (the old one itself without steps)."""
        if not self._steps:
            return self.c_local.clone()
        mean = self._sum / self._steps
        w = 1.0
        if self.segment_steps > 0:
            w *= min(1.0, self._steps / self.segment_steps)
        return mean if w >= 1.0 else self.c_local + w * (mean - self.c_local)

    def update(self, c_local: torch.Tensor, c_global: torch.Tensor) -> None:
        """Adopt the segment's ``c_r`` (from :meth:`estimate`) and the ranks' weighted mean
        ``c`` of them."""
        self.c_local = c_local.detach().clone()
        self.c_global = c_global.detach().clone()

    def state_dict(self) -> dict[str, torch.Tensor]:
        """``{"c_local", "c_global"}``: this rank's and the global variates."""
        return {"c_local": self.c_local, "c_global": self.c_global}

    def load_state_dict(self, state: dict, path: Path | str) -> None:
        """Restore :meth:`state_dict`'s output read from the checkpoint ``path`` (the
        entries of earlier versions' removed variants are ignored).

        Raises
        ------
        StoreError
            Naming ``path``: a variate is missing or has the wrong shape.
        """
        size = self.c_local.numel()
        for name in ("c_local", "c_global"):
            value = state.get(name) if isinstance(state, dict) else None
            if not isinstance(value, torch.Tensor) or tuple(value.shape) != (size,):
                found = "nothing" if value is None else f"{type(value).__name__} {tuple(getattr(value, 'shape', ()))}"
                raise StoreError(format_problem(f"checkpoint {path}, 'drift'", f"{name}: a tensor of shape ({size},)",
                                                found, "resume with the model of the run, or start a new run."))
        self._steps = 0
        self.c_local = state["c_local"].to(torch.float32).clone()
        self.c_global = state["c_global"].to(torch.float32).clone()
