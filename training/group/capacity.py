"""Ranks of different speeds: each rank's local steps per segment, and how they are reconciled.

Synchronous rounds run at the pace of the slowest rank: in every segment of
``sync_every`` steps the fast ranks wait for it. With ``speeds`` (declared, or a cluster
file's machines), ``measure_speeds`` or a ``deadline`` (:class:`~asepr.training.config.TrainConfig`)
each rank takes the steps its speed allows instead, so every rank is done at about the
same time (:class:`StepPlan`):

* **capacity-aware**: in a segment of S steps rank r takes ``max(1, round(S · q_r))``,
  ``q_r = speed_r / max_speed`` (rounded half up);
* **deadline F**: the segment closes at F times the fastest rank's segment time; rank r
  takes the steps that fit at its speed, ``min(S, max(1, floor(F · S · q_r)))``. A rank
  that would be late delivers what it has; every rank starts the next segment from the
  new global model, as always.

Ranks that take different numbers of steps move their models by different amounts, and
plain averaging would then lean towards the ranks that stepped most (FedNova, Wang et
al., "Tackling the Objective Inconsistency Problem in Heterogeneous Federated
Optimization", NeurIPS 2020). So the update is normalised by steps:
``θ ← θ_g + τ_eff · Σ_r p_r (θ_r − θ_g) / τ_r`` with ``τ_eff = Σ_r p_r τ_r`` and ``p_r``
the FedAvg weights (:func:`asepr.training.reconcile.average.normalised_average`). SCAFFOLD's
control variate is already a mean gradient per step
(:meth:`asepr.training.reconcile.scaffold.ControlVariates.estimate`); a rank's full segment is
its own planned steps, so its variate moves fully after each of its segments.

A measured speed is the rank's CPU seconds per step over the first segment the run
trains (every rank taking the same steps there), times its declared ``slowdown``, all
gathered at that segment's synchronisation: the first segment waits for the slowest rank,
the following ones do not. CPU time varies from run to run, so a run with measured speeds
is not reproducible step for step (a resume reads the measured speeds from the
checkpoint and continues exactly); declared speeds are.

``slowdown`` is a declared per-rank factor on the modelled cluster time only
(:class:`asepr.training.protocol.ComputeClock`): this is how a cluster with a slow machine is
shown on one machine, and results made with it say that the time is modelled.
"""

from __future__ import annotations

import math
from typing import Any

from asepr.storage.cluster import parse_positive_list
from asepr.storage.errors import format_problem

__all__ = ["StepPlan", "check_rank_lists", "parse_rank_list"]


def parse_rank_list(text: str, flag: str, *, measure: bool = False) -> tuple[float, ...] | str:
    """``--speeds`` / ``--slowdown``: comma-separated numbers > 0, one per rank (and
    ``"measure"`` where ``measure``); ValueError with the one-line problem otherwise."""
    text = str(text).strip()
    if measure and text == "measure":
        return "measure"
    example = "1,1,1,0.33" if flag == "--speeds" else "1,1,1,3"
    expected = f"comma-separated numbers > 0, one per rank (e.g. {example})" + (", or measure" if measure else "")
    try:
        return parse_positive_list(text)
    except ValueError:
        raise ValueError(format_problem(flag, expected, repr(text), f"pass {flag} {example}.")) from None


def check_rank_lists(config, world_size: int) -> str | None:
    """The one-line problem with ``config.speeds`` or ``config.slowdown`` at ``world_size``
    ranks (a list of another length), or None when both fit."""
    for flag, values in (("--speeds", config.speeds), ("--slowdown", config.slowdown)):
        if values and len(values) != world_size:
            listed = ",".join(f"{v:g}" for v in values)
            return format_problem(flag, f"one value per rank ({world_size} ranks)",
                                  f"{len(values)} value{'s' if len(values) != 1 else ''} ({listed})",
                                  f"give {world_size} comma-separated numbers > 0"
                                  + (" (or --speeds measure)." if flag == "--speeds" else "."))
    return None


class StepPlan:
    """This rank's local steps in each synchronised segment (see the module docstring).

    Parameters
    ----------
    config
        The run's TrainConfig (``speeds``, ``measure_speeds``, ``deadline``, ``slowdown``).
    rank, world_size
        This rank and the number of ranks.
    """

    def __init__(self, config, rank: int, world_size: int):
        self.rank, self.world_size = int(rank), int(world_size)
        self.deadline = float(config.deadline)
        #: Whether the ranks' steps follow their speeds (and the update is normalised by steps).
        self.active = bool(config.capacity_aware)
        #: This rank's declared slowdown factor (1 when none is declared).
        self.slowdown = float(config.slowdown[rank]) if config.slowdown else 1.0
        self.measure = self.active and not config.speeds
        self.speeds: list[float] | None = list(config.speeds) if config.speeds else None
        self.seconds_per_step: list[float] | None = None
        self._observed: tuple[float, int] | None = None

    @property
    def ratio(self) -> float | None:
        """This rank's speed over the fastest rank's (None until the speeds are known)."""
        if self.speeds is None:
            return None
        return self.speeds[self.rank] / max(self.speeds)

    def steps(self, segment: int) -> int:
        """This rank's steps in a segment of ``segment`` steps (the fastest rank's)."""
        ratio = self.ratio
        if not self.active or ratio is None:
            return int(segment)
        if self.deadline > 0:
            return min(int(segment), max(1, math.floor(self.deadline * segment * ratio + 1e-9)))
        return max(1, math.floor(segment * ratio + 0.5))

    def observe(self, cpu_seconds: float, steps: int) -> None:
        """Record a segment's CPU seconds of local training while the speeds are being measured."""
        if self.measure and self.speeds is None and self._observed is None and steps:
            self._observed = (float(cpu_seconds) * self.slowdown, int(steps))

    def settle(self, comm) -> None:
        """After a segment's synchronisation (every rank calls it): the first measured
        segment's seconds per step, all gathered, become the ranks' speeds."""
        if not self.measure or self.speeds is not None:
            return
        import torch  # the parser reads --speeds without torch (partition-only installs)

        seconds, steps = self._observed or (float("nan"), 0)
        mine = torch.tensor([seconds / steps if steps else float("nan")], dtype=torch.float64)
        every = torch.cat(comm.all_gather(mine, "control")).tolist()
        self._adopt(every)

    def _adopt(self, seconds_per_step: list[float]) -> None:
        known = [s for s in seconds_per_step if not math.isnan(s) and s > 0]
        fallback = max(known) if known else 1.0  # a rank without steps counts as the slowest
        self.seconds_per_step = [s if not math.isnan(s) and s > 0 else fallback for s in seconds_per_step]
        self.speeds = [1.0 / s for s in self.seconds_per_step]

    def state_dict(self) -> dict[str, Any]:
        """The measured speeds, for the global checkpoint (empty before they are measured)."""
        if not self.measure or self.seconds_per_step is None:
            return {}
        return {"world_size": self.world_size, "seconds_per_step": list(self.seconds_per_step)}

    def load_state_dict(self, state: Any) -> None:
        """Adopt speeds measured at this world size; others are measured again (a resume
        at another world size moves partitions between ranks)."""
        if not self.measure or not isinstance(state, dict):
            return
        seconds = state.get("seconds_per_step")
        if int(state.get("world_size", -1)) == self.world_size and isinstance(seconds, list) \
                and len(seconds) == self.world_size:
            self._adopt([float(s) for s in seconds])

    def columns(self, comm, round_steps: int) -> dict[str, str]:
        """The metrics columns of a round (an uncounted all_gather): every rank's steps in
        it (``local_steps_ranks``), its speed over the fastest (``speed_ratio_ranks``, "-"
        before they are known) and the declared slowdowns (``slowdown_ranks``)."""
        import torch

        ratio = self.ratio
        mine = torch.tensor([float(round_steps), -1.0 if ratio is None else ratio, self.slowdown],
                            dtype=torch.float64)
        every = comm.gather_uncounted(mine)
        return {"local_steps_ranks": " ".join(f"{v:.0f}" for v in every[:, 0].tolist()),
                "speed_ratio_ranks": " ".join("-" if v < 0 else f"{v:.3f}" for v in every[:, 1].tolist()),
                "slowdown_ranks": " ".join(f"{v:g}" for v in every[:, 2].tolist())}
