"""splitmix64: the stateless 64-bit mix that keys per-vertex choices on a global id.

The fds hash partition (:func:`asepr.training.fds.partition.hash_owner`) and the evaluation's
seeded sample (:func:`asepr.training.evaluation.eval_sample.sample_keys`) both need a choice per vertex
that depends on its global id and a seed only, so that every rank, every partitioning
and the centralized run make the same choice without communicating.
"""

from __future__ import annotations

import numpy as np

__all__ = ["GOLDEN_GAMMA", "splitmix64"]

#: splitmix64's increment (2^64 / the golden ratio, odd).
GOLDEN_GAMMA = np.uint64(0x9E3779B97F4A7C15)


def splitmix64(x: np.ndarray) -> np.ndarray:
    """splitmix64 of each value of ``x`` (uint64, wrapping): ``x`` plus the increment, mixed."""
    z = x.astype(np.uint64)
    with np.errstate(over="ignore"):
        z = z + GOLDEN_GAMMA
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return z ^ (z >> np.uint64(31))
