"""Server-side optimisers for the averaged update (Reddi et al., "Adaptive Federated
Optimization", ICLR 2021).

A round's *pseudo-gradient* is ``Δ = θ_global − θ_avg``: how far the ranks' average has
moved the global model. The server applies it with an optimiser of its own:

* ``fedavg``: ``θ ← θ − η Δ``; with ``η = 1`` this is ``θ ← θ_avg`` (plain averaging,
  returned bit for bit);
* ``fedavgm``: ``m ← β m + Δ``, ``θ ← θ − η m`` (server momentum, Hsu et al. 2019);
* ``fedadam``: ``m ← β₁ m + (1 − β₁) Δ``, ``v ← β₂ v + (1 − β₂) Δ²``,
  ``θ ← θ − η m / (√v + τ)``, with ``m`` starting at 0 and ``v`` at ``τ²`` (the
  paper's Algorithm 2, no bias correction).

Every rank runs the same optimiser on the same all-reduced average, so it needs no
communication, and its state (:meth:`ServerOptimizer.state_dict`: an int and plain
tensors, loadable with ``torch.load(weights_only=True)``) is the same on every rank.
"""

from __future__ import annotations

from typing import Any

import torch

from asepr.storage.errors import format_problem
from asepr.training.config import SERVER_OPTIMIZERS

__all__ = ["SERVER_OPTIMIZERS", "ServerOptimizer"]


class ServerOptimizer:
    """Applies the pseudo-gradient ``θ_global − θ_avg`` of each round to the global model.

    Parameters
    ----------
    kind
        ``"fedavg"``, ``"fedavgm"`` or ``"fedadam"``.
    lr
        The server learning rate η (> 0).
    momentum
        β for ``fedavgm``, β₁ for ``fedadam`` (in [0, 1)); unused by ``fedavg``.
    beta2
        β₂ for ``fedadam`` (in [0, 1)).
    tau
        τ, the adaptivity of ``fedadam`` (> 0).
    """

    def __init__(self, kind: str = "fedavg", lr: float = 1.0, momentum: float = 0.9, beta2: float = 0.99,
                 tau: float = 1e-3):
        if kind not in SERVER_OPTIMIZERS:
            valid = ", ".join(f'"{k}"' for k in SERVER_OPTIMIZERS)
            raise ValueError(f'Unsupported server optimizer "{kind}". Valid choices are {valid}.')
        for name, value, ok, expected in (("lr", lr, lr > 0, "a number > 0"),
                                          ("momentum", momentum, 0 <= momentum < 1, "a number in [0, 1)"),
                                          ("beta2", beta2, 0 <= beta2 < 1, "a number in [0, 1)"),
                                          ("tau", tau, tau > 0, "a number > 0")):
            if not ok:
                raise ValueError(format_problem(f"server optimizer {name}", expected, repr(value)))
        self.kind = kind
        self.lr = float(lr)
        self.momentum = float(momentum)
        self.beta2 = float(beta2)
        self.tau = float(tau)
        self.steps = 0
        self.m = torch.empty(0)
        self.v = torch.empty(0)

    def step(self, global_flat: torch.Tensor, averaged_flat: torch.Tensor) -> torch.Tensor:
        """The new global parameter vector (a new tensor; the inputs are not modified).

        Parameters
        ----------
        global_flat
            θ_global, the global model the round started from (flat).
        averaged_flat
            θ_avg, the ranks' average at the end of the round (flat, same shape).
        """
        if global_flat.shape != averaged_flat.shape:
            raise ValueError(format_problem("ServerOptimizer.step", "θ_global and θ_avg of the same shape",
                                            f"{tuple(global_flat.shape)} and {tuple(averaged_flat.shape)}"))
        if self.kind == "fedavg":
            self.steps += 1
            if self.lr == 1.0:
                return averaged_flat.clone()
            return global_flat - self.lr * (global_flat - averaged_flat)
        delta = global_flat - averaged_flat
        if not self.m.numel():
            self.m = torch.zeros_like(delta)
        if self.kind == "fedadam" and not self.v.numel():
            self.v = torch.full_like(delta, self.tau ** 2)
        if self.m.shape != delta.shape:
            raise ValueError(format_problem("ServerOptimizer.step", f"θ of the state's size {self.m.numel()}",
                                            f"size {delta.numel()}", "the model does not match the checkpoint."))
        self.steps += 1
        if self.kind == "fedavgm":
            self.m.mul_(self.momentum).add_(delta)
            return global_flat - self.lr * self.m
        self.m.mul_(self.momentum).add_(delta, alpha=1.0 - self.momentum)
        self.v.mul_(self.beta2).addcmul_(delta, delta, value=1.0 - self.beta2)
        return global_flat - self.lr * self.m / (self.v.sqrt() + self.tau)

    def state_dict(self) -> dict[str, Any]:
        """``{"steps": int, "m": tensor, "v": tensor}`` (copies; empty tensors where unused)."""
        return {"steps": self.steps, "m": self.m.clone(), "v": self.v.clone()}

    def load_state_dict(self, state: dict[str, Any], where: str = "server optimizer state") -> None:
        """Restore :meth:`state_dict`'s output; ``where`` names its file in errors."""
        fix = "resume from a checkpoint written with the same --server-opt, or start a new run."
        if not isinstance(state, dict) or set(state) != {"steps", "m", "v"}:
            found = sorted(state) if isinstance(state, dict) else type(state).__name__
            raise ValueError(format_problem(where, 'the keys "m", "steps", "v"', repr(found), fix))
        steps, m, v = state["steps"], state["m"], state["v"]
        if not isinstance(steps, int) or steps < 0 or not isinstance(m, torch.Tensor) \
                or not isinstance(v, torch.Tensor):
            raise ValueError(format_problem(where, "steps an int >= 0, m and v tensors",
                                            f"{type(steps).__name__}, {type(m).__name__}, {type(v).__name__}", fix))
        used_m = self.kind != "fedavg" and steps > 0
        used_v = self.kind == "fedadam" and steps > 0
        if (m.numel() > 0) != used_m or (v.numel() > 0) != used_v or (used_v and m.shape != v.shape):
            raise ValueError(format_problem(where, f"the state of {self.kind} after {steps} steps",
                                            f"m of shape {tuple(m.shape)}, v of shape {tuple(v.shape)}", fix))
        self.steps, self.m, self.v = steps, m.clone(), v.clone()
