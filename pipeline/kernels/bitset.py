"""Bit tricks on the uint64 replica bitsets, shared by the numba kernels."""

from __future__ import annotations

import numba
import numpy as np

__all__ = ["has_bit", "popcount64"]


@numba.njit(cache=True, inline="always")
def popcount64(x):
    """Number of set bits of a uint64."""
    x = x - ((x >> np.uint64(1)) & np.uint64(0x5555555555555555))
    x = (x & np.uint64(0x3333333333333333)) + ((x >> np.uint64(2)) & np.uint64(0x3333333333333333))
    x = (x + (x >> np.uint64(4))) & np.uint64(0x0F0F0F0F0F0F0F0F)
    return np.int64((x * np.uint64(0x0101010101010101)) >> np.uint64(56))


@numba.njit(cache=True, inline="always")
def has_bit(replicas, x, p):
    """Whether partition ``p`` is in A(x) of a ``[N, W]`` bitset array (uint64 words,
    or int64 rows that start with them: :func:`asepr.pipeline.stages.masters.replica_rows`)."""
    return (np.uint64(replicas[x, p >> 6]) >> np.uint64(p & 63)) & np.uint64(1) != np.uint64(0)
