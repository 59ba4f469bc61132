"""The assignment state: one packed int64 row per vertex, plus the k loads.

On graphs larger than the cache the kernel is bound by random memory access, not
arithmetic, so an endpoint should cost one cache line rather than one per array: each
vertex's state is one row, rows start on cache lines, and the kernel prefetches the
rows of the edge :data:`~asepr.pipeline.kernels.prefetch.PREFETCH_DISTANCE` ahead. Row layout
(W = ``ceil(k/64)`` replica words), columns counted from W:

====================  ===============================================================
``[0, W)``            replica bitset words A(v) (uint64 bit patterns stored as int64)
``W + DEG``           exact degree d(v)
``W + PDEG``          partial degree (edges of v seen so far)
``W + PART``          partition of v's community p(c(v)), or -1
``W + VOL``           volume of v's community vol(c(v))
``W + HOME``          home partition of v's attribute cluster, or -1
====================  ===============================================================
"""

from __future__ import annotations

import numba
import numpy as np

from asepr.pipeline.kernels.prefetch import aligned_zeros

__all__ = ["DEG", "FIELDS", "HOME", "PART", "PDEG", "VOL", "AssignState", "has_replica", "replica_sets"]

#: Column offsets after the W replica words (see the module docstring).
DEG, PDEG, PART, VOL, HOME = 0, 1, 2, 3, 4
#: Number of per-vertex fields after the replica words.
FIELDS = 5


@numba.njit(cache=True, inline="always")
def has_replica(vstate, x, p):
    """Whether partition ``p`` is in A(x)."""
    return (vstate[x, p >> 6] >> (p & 63)) & 1 != 0


class AssignState:
    """The O(N) state of a streaming assignment, packed one row per vertex.

    Parameters
    ----------
    num_parts
        k.
    degree
        Exact degrees (int64[N]).
    vertex_part, vertex_volume
        Per vertex: its community's partition and volume (-1 / 0 without communities).
    vertex_home
        Per vertex: the home partition of its attribute cluster (-1: none).
    """

    def __init__(
        self,
        num_parts: int,
        degree: np.ndarray,
        vertex_part: np.ndarray | None = None,
        vertex_volume: np.ndarray | None = None,
        vertex_home: np.ndarray | None = None,
    ):
        num_nodes = len(degree)
        self.num_parts = num_parts
        self.words = (num_parts + 63) // 64
        width = self.words + FIELDS
        stride = 8 if width <= 8 else -(-width // 8) * 8  # whole cache lines per row
        self.vstate = aligned_zeros((num_nodes, stride), np.int64)
        w = self.words
        self.vstate[:, w + DEG] = degree
        self.vstate[:, w + PART] = -1 if vertex_part is None else vertex_part
        self.vstate[:, w + VOL] = 0 if vertex_volume is None else vertex_volume
        self.vstate[:, w + HOME] = -1 if vertex_home is None else vertex_home
        self.loads = np.zeros(num_parts, dtype=np.int64)

    @property
    def replicas(self) -> np.ndarray:
        """A(v) as uint64 bitsets ``[N, W]`` (a contiguous copy)."""
        return np.ascontiguousarray(self.vstate[:, : self.words]).view(np.uint64)

    @property
    def pdeg(self) -> np.ndarray:
        """The partial degrees (a writable view of their column)."""
        return self.vstate[:, self.words + PDEG]


def replica_sets(replicas: np.ndarray, vertex: int) -> list[int]:
    """The partitions in A(vertex), for tests and inspection."""
    out = []
    for word in range(replicas.shape[1]):
        bits = int(replicas[vertex, word])
        while bits:
            low = bits & -bits
            out.append(word * 64 + low.bit_length() - 1)
            bits ^= low
    return out
