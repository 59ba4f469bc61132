"""Masters: one owning partition per vertex.

The master of v is the partition of A(v) that holds most of v's edges; ties go to
the partition with fewer masters so far, then the lower id (docs/design.md#masters). Counting
edges per (vertex, partition) naively is O(N·k); here each vertex gets one counter
per replica only (``Σ|A(v)| = RF·N`` counters), addressed by the rank of the
partition among v's replica bits. Isolated vertices (no edges, no replicas) are
mastered by the partition with the fewest masters, so every node has exactly one.
"""

from __future__ import annotations

import logging

import numba
import numpy as np

from pipeline.bitset import popcount64
from pipeline.config import PartitionConfig
from pipeline.needs import Need, RunShape, held_arrays
from pipeline.prefetch import PREFETCH_DISTANCE, prefetch_write
from storage.resources import stage

__all__ = [
    "choose_masters",
    "choose_new_masters",
    "count_edges_per_replica",
    "count_new_edges_per_replica",
    "masters_needs",
    "popcounts",
    "replica_offsets",
    "replica_rows",
]

log = logging.getLogger(__name__)


@numba.njit(cache=True)
def popcounts(replicas):
    """|A(v)| for every vertex."""
    n = replicas.shape[0]
    out = np.zeros(n, dtype=np.int64)
    for v in range(n):
        c = 0
        for w in range(replicas.shape[1]):
            c += popcount64(replicas[v, w])
        out[v] = c
    return out


def replica_offsets(replicas: np.ndarray) -> np.ndarray:
    """CSR offsets (int64[N+1]) of one counter per replica."""
    offsets = np.zeros(replicas.shape[0] + 1, dtype=np.int64)
    np.cumsum(popcounts(replicas), out=offsets[1:])
    return offsets


@numba.njit(cache=True, inline="always")
def _rank(replicas, x, p):
    """Number of partitions below p in A(x)."""
    r = 0
    word = p >> 6
    for w in range(word):
        r += popcount64(np.uint64(replicas[x, w]))
    mask = (np.uint64(1) << np.uint64(p & 63)) - np.uint64(1)
    r += popcount64(np.uint64(replicas[x, word]) & mask)
    return r


@numba.njit(cache=True, nogil=True)
def count_edges_per_replica(src, dst, part, replicas, offsets, counts):
    """Add one batch of assigned edges to the per-replica edge counters.

    The counters, offsets and replica rows of random vertices miss the cache, so the
    endpoints' rows are prefetched :data:`~pipeline.prefetch.PREFETCH_DISTANCE` edges
    ahead and their first counters half as far (their offsets have arrived by then; a
    hint only, the counts are the same; measured in
    ``docs/results/implementation-choices/README.md``).
    """
    n = src.shape[0]
    ahead = PREFETCH_DISTANCE
    half = PREFETCH_DISTANCE // 2
    for i in range(n):
        if i + ahead < n:
            prefetch_write(replicas, src[i + ahead])
            prefetch_write(replicas, dst[i + ahead])
            prefetch_write(offsets, src[i + ahead])
            prefetch_write(offsets, dst[i + ahead])
        if i + half < n:
            prefetch_write(counts, offsets[src[i + half]])
            prefetch_write(counts, offsets[dst[i + half]])
        u = src[i]
        v = dst[i]
        p = part[i]
        counts[offsets[u] + _rank(replicas, u, p)] += 1
        if v != u:
            counts[offsets[v] + _rank(replicas, v, p)] += 1


def replica_rows(replicas: np.ndarray, offsets: np.ndarray) -> np.ndarray:
    """``int64 [N, W + 1]``: each vertex's replica words, then its first counter
    (``offsets[v]``). Given to :func:`count_edges_per_replica` as both ``replicas`` and
    (its last column) ``offsets``, a vertex's bits and its counters' offset share a
    cache line: an endpoint costs two random reads instead of three (the same counts;
    ``docs/results/implementation-choices/README.md``). The last column can then
    hold the masters for :func:`~pipeline.stages.metrics.locality_batch`."""
    words = replicas.shape[1]
    rows = np.empty((replicas.shape[0], words + 1), dtype=np.int64)
    rows[:, :words] = replicas.view(np.int64)
    rows[:, words] = offsets[:-1]
    return rows


@numba.njit(cache=True, nogil=True)
def count_new_edges_per_replica(src, dst, part, replicas, offsets, counts, first):
    """Like :func:`count_edges_per_replica`, for the vertices ``>= first`` only.

    ``offsets`` are :func:`replica_offsets` of ``replicas[first:]`` (incremental
    ingest counts the edges of its new vertices only).
    """
    for i in range(src.shape[0]):
        u = src[i]
        v = dst[i]
        p = part[i]
        if u >= first:
            counts[offsets[u - first] + _rank(replicas, u, p)] += 1
        if v != u and v >= first:
            counts[offsets[v - first] + _rank(replicas, v, p)] += 1


@numba.njit(cache=True)
def _choose(replicas, offsets, counts, num_parts, first, masters_per_part):
    n = replicas.shape[0]
    master = np.empty(n - first, dtype=np.int32)
    for v in range(first, n):
        best = -1
        best_count = -1
        slot = offsets[v - first]
        for w in range(replicas.shape[1]):
            bits = replicas[v, w]
            while bits != np.uint64(0):
                low = bits & (~bits + np.uint64(1))
                p = w * 64 + popcount64(low - np.uint64(1))
                c = counts[slot]
                slot += 1
                if (c > best_count) or (
                    c == best_count and masters_per_part[p] < masters_per_part[best]
                ):
                    best = p
                    best_count = c
                bits ^= low
        if best < 0:
            best = 0
            for p in range(1, num_parts):
                if masters_per_part[p] < masters_per_part[best]:
                    best = p
        master[v - first] = best
        masters_per_part[best] += 1
    return master, masters_per_part


def choose_masters(
    replicas: np.ndarray, offsets: np.ndarray, counts: np.ndarray, num_parts: int
) -> np.ndarray:
    """The master partition (int32[N]) of every vertex."""
    with stage("masters", log) as info:
        master, per_part = _choose(replicas, offsets, counts, num_parts, 0,
                                   np.zeros(num_parts, dtype=np.int64))
        info.update(max_masters=int(per_part.max()), min_masters=int(per_part.min()))
    return master


def choose_new_masters(
    replicas: np.ndarray, offsets: np.ndarray, counts: np.ndarray, num_parts: int, first: int,
    masters_per_part: np.ndarray,
) -> np.ndarray:
    """Masters (int32) of the vertices ``first ..`` given the existing ``masters_per_part``.

    The same rule as :func:`choose_masters`, continued: existing vertices keep their
    masters, and the new ones are placed in id order with the tie-break on the
    running master counts. ``offsets`` and ``counts`` cover ``replicas[first:]``.
    """
    per_part = np.array(masters_per_part, dtype=np.int64, copy=True)
    master, _ = _choose(replicas, offsets, counts, num_parts, int(first), per_part)
    return master


def masters_needs(run: PartitionConfig, s: RunShape) -> Need:
    """Memory of the masters stage: ``replicas`` uint64[N, W], ``offsets`` int64[N+1], the
    ``popcounts`` int64[N], the packed rows int64[N, W + 1]; then each stream range's
    thread keeps one counter per replica (``int32``, RF·N of them, ``int64`` from 2**31
    edges) and reads its own stream with each batch's ``int16`` partitions; then
    ``master`` int32[N]."""
    held = held_arrays(run, s) + 8 * s.words * s.n + 8 * s.n + 8 * (s.words + 1) * s.n
    counter = 4 if s.e < 2**31 else 8
    return Need(driver=held + max(8 * s.n, s.ways * (counter * s.rf * s.n + s.stream + 2 * s.b) + 4 * s.n))
