"""The kernel settings of a run: what :func:`~pipeline.assign.kernel.assign_batch` is called with.

A partitioning run resolves them once (the mode of its algorithm, the lift-scaled
attribute weights, the cap of its edge count) and persists them in the partitioner
state, so that an incremental ingest continues the stream with the same ones.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from pipeline.assign.kernel import MODES, KernelArgs
from pipeline.config import PartitionConfig
from storage.errors import StoreError, format_problem

__all__ = ["KernelSettings", "edge_cap", "kernel_mode"]


def edge_cap(num_edges: int, num_parts: int, epsilon: float) -> int:
    """The hard per-partition edge cap ``ceil((1 + epsilon) |E| / k)``."""
    return int(np.ceil((1.0 + epsilon) * num_edges / num_parts))


def kernel_mode(config: PartitionConfig) -> tuple[int, bool]:
    """``(mode, use_partial)`` of the kernel for an (effective) config."""
    if config.algo in ("asep", "metis"):
        mode = MODES["all"] if config.scoring == "hdrf" else MODES["candidates"]
    elif config.algo == "hdrf":
        mode = MODES["all"]
    else:
        mode = MODES[config.algo]
    return mode, config.algo == "hdrf"


@dataclass(frozen=True)
class KernelSettings:
    """The settings of the assignment kernel, as a run resolved them.

    Attributes
    ----------
    mode, use_partial
        The kernel mode (:data:`~pipeline.assign.kernel.MODES`) and whether it scores
        with partial degrees (plain HDRF).
    alpha, beta
        The attribute weights after lift scaling; ``beta`` is 0 for the algorithms
        without attributes. ``alpha`` is not a kernel argument: an ingest's
        structural clustering continues with it.
    lam, seed, epsilon
        HDRF's balance weight, the hash seed, and the balance slack of the cap.
    keep_attr_together
        Whether the community mapping kept attribute clusters together (an ingest
        places new communities the same way).
    cap
        The edge cap ``ceil((1 + epsilon) |E| / k)`` of the current edge count; it is
        derived, so it is not persisted (:meth:`to_dict`).
    """

    mode: int
    use_partial: bool
    alpha: float
    beta: float
    lam: float
    seed: int
    epsilon: float
    keep_attr_together: bool
    cap: int

    @classmethod
    def for_run(cls, run: PartitionConfig, num_edges: int, *, alpha: float, beta: float,
                keep_attr_together: bool) -> KernelSettings:
        """The settings of a partitioning run with effective config ``run`` on ``num_edges`` edges."""
        mode, use_partial = kernel_mode(run)
        return cls(
            mode=int(mode), use_partial=bool(use_partial), alpha=float(alpha),
            beta=float(beta) if run.uses_attributes else 0.0, lam=float(run.hdrf_lambda),
            seed=int(run.seed), epsilon=float(run.epsilon), keep_attr_together=bool(keep_attr_together),
            cap=edge_cap(num_edges, run.num_parts, run.epsilon),
        )

    def kernel_args(self) -> KernelArgs:
        """What :func:`~pipeline.assign.kernel.assign_batch` chooses with."""
        return KernelArgs(self.mode, self.use_partial, self.beta, self.lam, self.cap, self.seed)

    def with_edges(self, num_edges: int, num_parts: int) -> KernelSettings:
        """The same settings with the cap of a grown edge count."""
        return replace(self, cap=edge_cap(num_edges, num_parts, self.epsilon))

    def to_dict(self) -> dict[str, Any]:
        """The persisted form (the state's ``kernel`` attribute): every field but ``cap``."""
        return {
            "mode": self.mode, "use_partial": self.use_partial, "alpha": self.alpha, "beta": self.beta,
            "lam": self.lam, "seed": self.seed, "epsilon": self.epsilon,
            "keep_attr_together": self.keep_attr_together,
        }

    @classmethod
    def from_dict(cls, saved: Mapping[str, Any], config: PartitionConfig, num_edges: int) -> KernelSettings:
        """Read :meth:`to_dict`'s form back, with the cap of ``num_edges`` edges.

        A key that an older state lacks takes the config's value (``alpha``,
        ``lam``, ``epsilon``, ``keep_attr_together``) or the kernel's neutral one
        (``use_partial`` False, ``beta`` 0, ``seed`` 0).

        Raises
        ------
        StoreError
            ``saved`` has no valid ``mode``.
        """
        mode = saved.get("mode")
        if mode not in MODES.values():
            raise StoreError(
                format_problem("partitioner state, attribute kernel", f"a mode in {sorted(MODES.values())}",
                               repr(mode), "rerun `asepr partition ... --overwrite` with this asepr version.")
            )
        epsilon = float(saved.get("epsilon", config.epsilon))
        return cls(
            mode=int(mode), use_partial=bool(saved.get("use_partial", False)),
            alpha=float(saved.get("alpha", config.alpha)), beta=float(saved.get("beta", 0.0)),
            lam=float(saved.get("lam", config.hdrf_lambda)), seed=int(saved.get("seed", 0)),
            epsilon=epsilon, keep_attr_together=bool(saved.get("keep_attr_together", config.keep_attr_together)),
            cap=edge_cap(num_edges, config.num_parts, epsilon),
        )
