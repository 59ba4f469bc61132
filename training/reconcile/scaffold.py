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

A segment is short (10 mini-batch steps by default), so its mean gradient is a noisy
estimate of the rank's gradient, and ``c − c_r`` carries that noise into every step of
the next segment, where it does not average out across ranks. With ``memory`` m > 0
the new ``c_r`` is an exponential average over segments, ``c_r ← c_r + w (ḡ − c_r)``
with ``w = max(1 − m, 1 / (n + 1))`` after ``n`` earlier segments (a plain mean until
the window 1 / (1 − m) fills), which trades the noise for staleness. ``c`` is the ranks'
weighted mean of their ``c_r`` as before, so it is the same average of the global
estimates.

With ``shrink`` the correction is scaled by a gate in [0, 1]: the ranks' weighted mean
cosine between a rank's last two corrections ``c − c_r``. The drift part of a correction
persists from one segment to the next and its noise does not, so that cosine estimates
the share of the correction's energy that is signal, |s|² / (|s|² + |n|²), which is the
Wiener shrinkage of a noisy estimate. Where drift is real (skewed labels, ``avg`` far
below centralized) the gate stays near 1; where ``avg`` is already as good as centralized
the corrections are mostly noise and the gate closes. One gate for all ranks keeps the
corrections summing to zero over ranks; each rank's cosine travels as one more float in
the same all_reduce, so the gate lags one segment.

With a ``threshold`` t > 0 the gate is a test instead of a weight: the correction is
applied whole while the agreement is at least t and not at all below it. Scaling by the
agreement halved the correction where the drift is real but the estimate noisy
(amazon-computers k = 8, agreement 0.45–0.56, ``docs/results/train-scaffold``), and the
graphs whose corrections are mostly noise measure an agreement near 0.

With ``segment_steps`` S > 0 a path segment of s < S steps (a round's tail: 21 steps
per round at k = 8 on coauthor-physics end in a segment of one) moves ``c_r`` only by
s / S of the way to its mean, so ``c_r`` stays about a mean over the last S steps instead
of being replaced by one or two mini-batch gradients for the next S steps.

With ``control`` ``"global"`` (SCAFFOLD's option I proper) ``c_r`` is not taken along the
path: right after each synchronisation, when every rank holds the same model x, each rank
computes the gradient of its own loss at x (:func:`local_gradient`: ``batches``
mini-batches of its sampler, or with 0 its whole training set in one full-batch pass), with
no optimiser step. Every ``c_r`` is then measured at the same point, so ``c − c_r`` is the
rank's drift at x, the point the next segment starts from, rather than a mixture of
gradients at different points along ten noisy steps. It costs that extra forward and
backward pass per synchronisation (training time), and since x is known only after the
average, ``c_r`` travels in a second all_reduce ``[n_r c_r, n_r, 1]`` (the same bytes as
before, one more collective). ``memory`` and ``shrink`` apply to it as to the path
estimate.
"""

from __future__ import annotations

import copy
import dataclasses
from pathlib import Path

import torch

from storage.errors import StoreError, format_problem

__all__ = ["ControlVariates", "local_gradient"]


def local_gradient(model: torch.nn.Module, task, generator: torch.Generator, batches: int) -> torch.Tensor:
    """The gradient of ``task``'s loss at ``model``'s parameters, flat in parameter order,
    with no optimiser step (``model``'s ``.grad`` is cleared).

    ``batches`` > 0: the mean of the gradients of that many mini-batches of the task's
    sampler (drawn with ``generator``, epoch after epoch when one epoch has fewer); 0: the
    gradient of the loss over the whole local training set in one full-batch pass (all
    training rows with their whole local neighbourhoods). The model runs in training mode
    (dropout on), as in the local steps whose gradients the correction is added to. Zeros
    for a rank without training data.
    """
    if not batches:
        task = copy.copy(task)
        task.config = dataclasses.replace(task.config, batch_size=0)
    wanted = max(int(batches), 1)
    params = list(model.parameters())
    total = torch.zeros(sum(p.numel() for p in params))
    x = task.features
    model.train()
    count = 0
    while count < wanted:
        before = count
        for batch in task.batches(generator):
            model.zero_grad(set_to_none=True)
            batch.loss(model(x if batch.n_id is None else x[batch.n_id], batch.graph)).backward()
            total += torch.cat([(p.grad if p.grad is not None else torch.zeros_like(p)).reshape(-1)
                                for p in params])
            count += 1
            if count == wanted:
                break
        if count == before:  # no training data
            break
    model.zero_grad(set_to_none=True)
    return total / count if count else total


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
    memory
        In [0, 1): the weight of the previous ``c_r`` in the new one (see the module
        docstring); 0: each segment's mean alone.
    shrink
        Scale the correction by the agreement gate (see the module docstring).
    threshold
        With ``shrink``, in [0, 1]: > 0 makes the gate 1 while the agreement is at
        least ``threshold`` and 0 below it; 0 scales by the agreement itself.
    segment_steps
        > 0: the steps of a full path segment; a shorter one enters ``c_r`` with weight
        steps / ``segment_steps`` (see the module docstring); 0: every segment whole.
    """

    def __init__(self, model: torch.nn.Module, clip: float = 0.0, memory: float = 0.0, shrink: bool = False,
                 threshold: float = 0.0, segment_steps: int = 0):
        if not 0.0 <= float(memory) < 1.0:
            raise ValueError(f"memory must lie in [0, 1), got {memory!r}")
        if not 0.0 <= float(threshold) <= 1.0:
            raise ValueError(f"threshold must lie in [0, 1], got {threshold!r}")
        self.threshold = float(threshold)
        self.segment_steps = int(segment_steps)
        self.clip = float(clip)
        self.memory = float(memory)
        self.segments = 0  # segments whose mean went into c_local
        self.shrink = bool(shrink)
        self.agreement = 1.0  # cosine of this rank's last two corrections (1 until there are two)
        self.gate = 1.0
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
        """Start a segment of local steps: the correction is ``gate · (c − c_r)`` until the
        next sync."""
        delta = self.c_global - self.c_local
        if self.shrink:
            delta = delta * self.gate
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
                acc.add_(p.grad)
                p.grad.add_(delta, alpha=scale)
        self._steps += 1

    def estimate(self, gradient: torch.Tensor | None = None) -> torch.Tensor:
        """The new ``c_r``: the mean raw gradient of this segment, or ``gradient`` (the
        rank's gradient at the global point, :func:`local_gradient`) when given, averaged
        with the old ``c_r`` when ``memory`` > 0 (the old one itself without steps)."""
        if gradient is None and not self._steps:
            return self.c_local.clone()
        mean = self._sum / self._steps if gradient is None else gradient.to(torch.float32)
        w = max(1.0 - self.memory, 1.0 / (self.segments + 1))
        if gradient is None and self.segment_steps > 0:
            w *= min(1.0, self._steps / self.segment_steps)
        return mean if w >= 1.0 else self.c_local + w * (mean - self.c_local)

    def agreement_payload(self) -> torch.Tensor:
        """What this rank adds to the synchronisation's all_reduce for the gate: its
        :attr:`agreement` (one float), or nothing without ``shrink``."""
        return torch.tensor([self.agreement]) if self.shrink else torch.zeros(0)

    def update(self, c_local: torch.Tensor, c_global: torch.Tensor,
               agreement: torch.Tensor | None = None) -> None:
        """Adopt the segment's ``c_r`` (from :meth:`estimate`) and the ranks' weighted mean
        ``c`` of them; with ``shrink``, ``agreement`` is the ranks' weighted mean of
        :meth:`agreement_payload`, which becomes the gate (clamped to [0, 1])."""
        if self._steps:
            self.segments += 1
        old = self.c_global - self.c_local
        self.c_local = c_local.detach().clone()
        self.c_global = c_global.detach().clone()
        if not self.shrink:
            return
        if agreement is not None and agreement.numel():
            self.gate = min(max(float(agreement[0]), 0.0), 1.0)
            if self.threshold > 0:
                self.gate = 1.0 if self.gate >= self.threshold else 0.0
        new = self.c_global - self.c_local
        norms = float(old.norm()) * float(new.norm())
        if norms > 0:
            self.agreement = float(torch.dot(old, new)) / norms

    def state_dict(self) -> dict[str, torch.Tensor]:
        """``{"c_local", "c_global", "segments"}``: this rank's and the global variates, and
        how many segments ``c_local`` averages."""
        return {"c_local": self.c_local, "c_global": self.c_global,
                "segments": torch.tensor(self.segments, dtype=torch.int64),
                "agreement": torch.tensor(self.agreement), "gate": torch.tensor(self.gate)}

    def load_state_dict(self, state: dict, path: Path | str) -> None:
        """Restore :meth:`state_dict`'s output read from the checkpoint ``path``.

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
        # Absent in checkpoints from before ``memory`` and ``shrink``: their defaults.
        for name, default, cast in (("segments", 0, int), ("agreement", 1.0, float), ("gate", 1.0, float)):
            value = state.get(name)
            setattr(self, name, cast(value) if isinstance(value, torch.Tensor) and value.numel() == 1 else default)
