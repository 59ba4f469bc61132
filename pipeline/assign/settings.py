"""The kernel settings of a run: what :func:`~asepr.pipeline.assign.kernel.assign_batch` is called with.

A partitioning run resolves them once (the mode of its algorithm, the lift-scaled
attribute weights, the partitions' shares, the caps of its edge count) and persists
them in the partitioner state, so that an incremental ingest continues the stream with
the same ones: the same shares, so the grown caps keep the proportions.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from asepr.pipeline.assign.kernel import MODES, KernelArgs
from asepr.pipeline.capacity import edge_caps, edge_floors, hash_bounds, load_weights
from asepr.pipeline.config import PartitionConfig
from asepr.storage.errors import StoreError, format_problem

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
        The kernel mode (:data:`~asepr.pipeline.assign.kernel.MODES`) and whether it scores
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
        The edge cap ``ceil((1 + epsilon) |E| / k)`` of the current edge count (with
        ``shares``, the largest partition's); it is derived, so it is not persisted
        (:meth:`to_dict`).
    shares
        Each partition's share (:mod:`asepr.pipeline.capacity`), or None for equal shares.
    caps, floors, edges
        With ``shares``: each partition's edge cap ``ceil((1 + epsilon) share_p |E|)``,
        its floor ``floor((1 - epsilon) share_p |E|)`` and |E| (derived, not persisted);
        None, None and 0 for equal shares (``cap`` for each, no floors).
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
    shares: tuple[float, ...] | None = None
    caps: tuple[int, ...] | None = None
    floors: tuple[int, ...] | None = None
    edges: int = 0

    @classmethod
    def _caps(cls, num_edges: int, num_parts: int, epsilon: float, shares) -> dict[str, Any]:
        """The ``cap``, ``caps``, ``floors`` and ``edges`` fields of ``num_edges`` edges."""
        if shares is None:
            return {"cap": edge_cap(num_edges, num_parts, epsilon), "caps": None, "floors": None, "edges": 0}
        caps = edge_caps(num_edges, num_parts, epsilon, shares)
        return {"cap": int(caps.max()), "caps": tuple(int(c) for c in caps),
                "floors": tuple(int(f) for f in edge_floors(num_edges, epsilon, shares)), "edges": int(num_edges)}

    @classmethod
    def for_run(cls, run: PartitionConfig, num_edges: int, *, alpha: float, beta: float,
                keep_attr_together: bool) -> KernelSettings:
        """The settings of a partitioning run with effective config ``run`` on ``num_edges`` edges."""
        mode, use_partial = kernel_mode(run)
        return cls(
            mode=int(mode), use_partial=bool(use_partial), alpha=float(alpha),
            beta=float(beta) if run.uses_attributes else 0.0, lam=float(run.hdrf_lambda),
            seed=int(run.seed), epsilon=float(run.epsilon), keep_attr_together=bool(keep_attr_together),
            shares=run.shares, **cls._caps(num_edges, run.num_parts, run.epsilon, run.shares),
        )

    def kernel_args(self) -> KernelArgs:
        """What :func:`~asepr.pipeline.assign.kernel.assign_batch` chooses with (equal shares:
        the default empty ``caps``, ``weight`` and ``bounds``)."""
        if self.shares is None:
            return KernelArgs(self.mode, self.use_partial, self.beta, self.lam, self.cap, self.seed)
        return KernelArgs(self.mode, self.use_partial, self.beta, self.lam, self.cap, self.seed,
                          np.asarray(self.caps, dtype=np.int64), load_weights(len(self.shares), self.shares),
                          hash_bounds(self.shares), np.asarray(self.floors, dtype=np.int64), self.edges)

    def part_caps(self, num_parts: int) -> np.ndarray:
        """``int64[k]``: every partition's edge cap."""
        if self.caps is None:
            return np.full(num_parts, self.cap, dtype=np.int64)
        return np.asarray(self.caps, dtype=np.int64)

    def with_edges(self, num_edges: int, num_parts: int) -> KernelSettings:
        """The same settings (and shares) with the caps of a grown edge count."""
        return replace(self, **self._caps(num_edges, num_parts, self.epsilon, self.shares))

    def to_dict(self) -> dict[str, Any]:
        """The persisted form (the state's ``kernel`` attribute): every field but the caps
        (``shares`` only when they are not equal, so a uniform state is as it always was)."""
        out = {
            "mode": self.mode, "use_partial": self.use_partial, "alpha": self.alpha, "beta": self.beta,
            "lam": self.lam, "seed": self.seed, "epsilon": self.epsilon,
            "keep_attr_together": self.keep_attr_together,
        }
        if self.shares is not None:
            out["shares"] = list(self.shares)
        return out

    @classmethod
    def from_dict(cls, saved: Mapping[str, Any], config: PartitionConfig, num_edges: int) -> KernelSettings:
        """Read :meth:`to_dict`'s form back, with the cap of ``num_edges`` edges.

        A key that an older state lacks takes the config's value (``alpha``,
        ``lam``, ``epsilon``, ``keep_attr_together``, ``shares``) or the kernel's
        neutral one (``use_partial`` False, ``beta`` 0, ``seed`` 0).

        Raises
        ------
        StoreError
            ``saved`` has no valid ``mode``, or ``shares`` that are not one positive
            share per partition.
        """
        mode = saved.get("mode")
        if mode not in MODES.values():
            raise StoreError(
                format_problem("partitioner state, attribute kernel", f"a mode in {sorted(MODES.values())}",
                               repr(mode), "rerun `asepr partition ... --overwrite` with this asepr version.")
            )
        epsilon = float(saved.get("epsilon", config.epsilon))
        shares = _saved_shares(saved.get("shares", config.shares), config.num_parts)
        return cls(
            mode=int(mode), use_partial=bool(saved.get("use_partial", False)),
            alpha=float(saved.get("alpha", config.alpha)), beta=float(saved.get("beta", 0.0)),
            lam=float(saved.get("lam", config.hdrf_lambda)), seed=int(saved.get("seed", 0)),
            epsilon=epsilon, keep_attr_together=bool(saved.get("keep_attr_together", config.keep_attr_together)),
            shares=shares, **cls._caps(num_edges, config.num_parts, epsilon, shares),
        )


def _saved_shares(shares, num_parts: int) -> tuple[float, ...] | None:
    """The persisted shares, checked: None, or one positive finite share per partition."""
    if shares is None:
        return None
    try:
        values = tuple(float(s) for s in shares)
    except (TypeError, ValueError):
        values = ()
    if len(values) != num_parts or not all(np.isfinite(v) and v > 0 for v in values):
        raise StoreError(
            format_problem("partitioner state, attribute kernel.shares", f"{num_parts} positive shares",
                           repr(shares), "rerun `asepr partition ... --overwrite` with this asepr version.")
        )
    return values
