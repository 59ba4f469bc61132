"""From the ranks' local models to the next global model: steps 2–3 of a round.

Every rank runs, on the same inputs, in this order:

1. ``avg``: θ_avg, the weighted FedAvg of the local models (:func:`weighted_average`);
   with ``scaffold`` the ranks' new control variates travel in the same buffer and
   their weighted mean becomes the global one (:class:`ControlVariates`);
2. the server optimiser (:class:`ServerOptimizer`): θ ← step(θ_global, θ_avg), which is
   θ_avg itself with the default ``fedavg`` at server learning rate 1;
3. ``kd``: ensemble distillation of θ into the local models' mean output (:func:`distill`);
4. ``corr``: the global correction steps (:class:`GlobalCorrection`).

With ``sync_every`` the ranks synchronise several times per round: 1–2 run at every
synchronisation, 3–4 once per round, after its last one (LLCG corrects once per round,
and both move far more bytes than an average).

The server optimiser's state and ``corr``'s Adam moments are carried from round to
round; they are the same on every rank and travel in the global checkpoint
(:meth:`Reconciler.state_dict`).
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import torch

from asepr.storage.errors import StoreError, format_problem
from asepr.training.rundir.checkpoint import expect_keys, load_optimizer_state
from asepr.training.group.comm import Comm
from asepr.training.models import num_parameters
from asepr.training.reconcile.average import normalised_average, weighted_average
from asepr.training.reconcile.correct import GlobalCorrection
from asepr.training.reconcile.distill import distill
from asepr.training.reconcile.scaffold import ControlVariates
from asepr.training.reconcile.server import ServerOptimizer

__all__ = ["Reconciler"]


class Reconciler:
    """The reconciliation of one rank (calls are collectives).

    Parameters
    ----------
    config
        The run's :class:`~asepr.training.config.TrainConfig`.
    task
        The rank's task.
    model
        The rank's local model: copied as scratch space, and with ``scaffold`` the
        model whose gradients :attr:`drift` corrects during local training.
    comm
        The process group.
    """

    def __init__(self, config, task, model: torch.nn.Module, comm: Comm):
        self.config, self.task, self.comm = config, task, comm
        self.server = ServerOptimizer(config.server_opt, config.server_lr, config.server_momentum)
        self.correction = GlobalCorrection(task, config, model, comm) if config.uses_corr else None
        self.drift = ControlVariates(model, config.scaffold_clip, config.sync_every) if config.uses_scaffold else None
        self.scratch = copy.deepcopy(model)

    def __call__(self, global_flat: torch.Tensor, local_flat: torch.Tensor, weight: float,
                 generator: torch.Generator, *, end_of_round: bool = True,
                 steps: int | None = None) -> tuple[torch.Tensor, dict[str, float]]:
        """The next global parameters, and ``{"kd_loss", "corr_loss"}`` (NaN when unused).

        Parameters
        ----------
        global_flat
            θ_global, the parameters the round started from (the same on every rank).
        local_flat
            This rank's local model at the end of the round.
        weight
            This rank's FedAvg weight (its training examples).
        generator
            This round's source of randomness.
        end_of_round
            Whether this is the round's last synchronisation (``kd`` and ``corr`` run then only).
        steps
            This rank's local steps since ``global_flat`` when the ranks' steps follow their
            speeds: θ_avg is then FedNova's step-normalised average
            (:func:`~asepr.training.reconcile.average.normalised_average`); None: the weighted average.
        """
        config = self.config
        if steps is not None:
            estimate = None if self.drift is None else self.drift.estimate()
            avg_flat, c_mean = normalised_average(global_flat, local_flat, steps, weight, self.comm, estimate)
            if self.drift is not None:
                self.drift.update(estimate, c_mean)
        elif self.drift is None:
            avg_flat = weighted_average(local_flat, weight, self.comm)
        else:
            estimate = self.drift.estimate()
            n = local_flat.numel()
            both = weighted_average(torch.cat([local_flat, estimate]), weight, self.comm)
            avg_flat = both[:n]
            self.drift.update(estimate, both[n:])
        new_flat = self.server.step(global_flat, avg_flat)
        losses = {"kd_loss": float("nan"), "corr_loss": float("nan")}
        if config.uses_kd and end_of_round:
            new_flat, losses["kd_loss"] = distill(self.scratch, local_flat, new_flat, self.task, config, self.comm,
                                                  weight, generator)
        if self.correction is not None and end_of_round:
            new_flat, losses["corr_loss"] = self.correction(new_flat, generator)
        return new_flat, losses

    def state_dict(self) -> dict[str, Any]:
        """``{"server": ServerOptimizer.state_dict()}``, and with ``corr`` its optimiser's
        ``"corr"`` state (loadable with ``weights_only=True``)."""
        state = {"server": self.server.state_dict()}
        if self.correction is not None:
            state["corr"] = self.correction.optimizer.state_dict()
        return state

    def load_state_dict(self, state: dict[str, Any], path: Path) -> None:
        """Restore :meth:`state_dict`'s output, read from the checkpoint ``path``.

        Raises
        ------
        StoreError
            Naming ``path``: the state does not fit this run's server optimiser or model.
        """
        where = f"checkpoint {path}, 'reconcile'"
        try:
            self.server.load_state_dict(state.get("server") if isinstance(state, dict) else state, where)
        except ValueError as exc:
            raise StoreError(str(exc)) from None
        if self.correction is not None:
            expect_keys(path, state, ("corr",))
            load_optimizer_state(path, self.correction.optimizer, state["corr"])
        size = num_parameters(self.scratch)
        for name, value in (("m", self.server.m), ("v", self.server.v)):
            if value.numel() and tuple(value.shape) != (size,):
                raise StoreError(format_problem(where, f"server state {name} of shape ({size},) (this model)",
                                                f"{name} of shape {tuple(value.shape)}",
                                                "resume with the model of the run, or start a new run."))
