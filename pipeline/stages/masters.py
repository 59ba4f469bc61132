"""Masters: one owning partition per vertex.

The master of v is the partition of A(v) that holds most of v's edges; ties go to
the partition with fewer masters so far relative to its share (``masters_p / (k *
share_p)``, :func:`asepr.pipeline.capacity.load_weights`; the count itself for equal shares),
then the lower id (docs/design.md#masters). Counting
edges per (vertex, partition) naively is O(N·k); here each vertex gets one counter
per replica only (``Σ|A(v)| = RF·N`` counters), addressed by the rank of the
partition among v's replica bits. Isolated vertices (no edges, no replicas) are
mastered by the partition with the fewest masters (relative to its share), so every
node has exactly one.

With shares *(our choice)*, that rule alone does not make the master counts follow
the shares (it does not balance masters with equal shares either: a partition's
masters follow where its vertices' edges are). So :func:`balance_masters` then moves
masters from partitions that are fuller, relative to their share of the vertices, to
replicas on emptier ones, the vertices that lose the fewest of their edges first,
until every partition is within half a percent of its share or no vertex can move.
Equal shares skip it: their masters are the rule above, unchanged.
"""

from __future__ import annotations

import logging

import numba
import numpy as np

from asepr.pipeline.kernels.bitset import popcount64
from asepr.pipeline.capacity import load_weights
from asepr.pipeline.config import PartitionConfig
from asepr.pipeline.planning.needs import Need, RunShape, held_arrays
from asepr.pipeline.kernels.prefetch import PREFETCH_DISTANCE, prefetch_write
from asepr.storage.resources import stage

__all__ = [
    "balance_masters",
    "choose_masters",
    "choose_new_masters",
    "count_edges_per_replica",
    "count_new_edges_per_replica",
    "master_miss",
    "masters_needs",
    "popcounts",
    "replica_offsets",
    "replica_rows",
]

log = logging.getLogger(__name__)

#: How far (relative) a partition's master count may stay from its share once
#: :func:`balance_masters` has moved masters: well inside the edge cap's slack.
MASTER_SLACK = 0.005


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
    endpoints' rows are prefetched :data:`~asepr.pipeline.kernels.prefetch.PREFETCH_DISTANCE` edges
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
    hold the masters for :func:`~asepr.pipeline.stages.metrics.locality_batch`."""
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


@numba.njit(cache=True, inline="always")
def _replica_counts(replicas, v, slot, counts, parts, edges):
    """The partitions of A(v) in ascending order into ``parts`` and v's edges on each
    into ``edges`` (its counters start at ``slot``); returns |A(v)|."""
    m = 0
    for w in range(replicas.shape[1]):
        bits = replicas[v, w]
        while bits != np.uint64(0):
            low = bits & (~bits + np.uint64(1))
            parts[m] = w * 64 + popcount64(low - np.uint64(1))
            edges[m] = counts[slot + m]
            m += 1
            bits ^= low
    return m


@numba.njit(cache=True)
def _choose(replicas, offsets, counts, num_parts, first, masters_per_part, weight):
    n = replicas.shape[0]
    master = np.empty(n - first, dtype=np.int32)
    parts = np.empty(num_parts, dtype=np.int64)
    edges = np.empty(num_parts, dtype=np.int64)
    for v in range(first, n):
        best = -1
        best_count = -1
        for i in range(_replica_counts(replicas, v, offsets[v - first], counts, parts, edges)):
            p, c = parts[i], edges[i]
            if (c > best_count) or (
                c == best_count and masters_per_part[p] * weight[p] < masters_per_part[best] * weight[best]
            ):
                best = p
                best_count = c
        if best < 0:
            best = 0
            for p in range(1, num_parts):
                if masters_per_part[p] * weight[p] < masters_per_part[best] * weight[best]:
                    best = p
        master[v - first] = best
        masters_per_part[best] += 1
    return master, masters_per_part


@numba.njit(cache=True)
def _move_candidates(replicas, offsets, counts, first, master, fill):
    """Per vertex ``>= first`` with a replica emptier than its master (``fill``: masters
    over target per partition): ``(vertex - first, the emptier replica of most edges,
    edges lost by moving)``."""
    n = replicas.shape[0]
    vertex = np.empty(n - first, dtype=np.int64)
    dest = np.empty(n - first, dtype=np.int64)
    loss = np.empty(n - first, dtype=np.int64)
    m = 0
    lowest = fill.min()
    parts = np.empty(fill.shape[0], dtype=np.int64)
    edges = np.empty(fill.shape[0], dtype=np.int64)
    for v in range(first, n):
        own = master[v - first]
        if fill[own] <= lowest:
            continue
        own_count = 0
        best = -1
        best_count = -1
        for i in range(_replica_counts(replicas, v, offsets[v - first], counts, parts, edges)):
            p, c = parts[i], edges[i]
            if p == own:
                own_count = c
            elif fill[p] < fill[own] and c > best_count:
                best = p
                best_count = c
        if best >= 0:
            vertex[m] = v - first
            dest[m] = best
            loss[m] = own_count - best_count
            m += 1
    return vertex[:m], dest[:m], loss[:m]


@numba.njit(cache=True)
def _apply_moves(vertex, dest, order, master, per_part, target):
    """Move each candidate in ``order`` while its source stays at least as full, relative
    to its target, as its destination becomes; returns how many moved. Each move lowers
    ``sum_p per_part_p**2 / target_p``, so moves cannot cycle."""
    moved = 0
    for i in order:
        v = vertex[i]
        own = master[v]
        q = dest[i]
        if (per_part[own] - 1) / target[own] >= (per_part[q] + 1) / target[q]:
            master[v] = q
            per_part[own] -= 1
            per_part[q] += 1
            moved += 1
    return moved


def balance_masters(replicas: np.ndarray, offsets: np.ndarray, counts: np.ndarray, master: np.ndarray,
                    per_part: np.ndarray, shares: tuple[float, ...], first: int = 0) -> int:
    """Move masters of the vertices ``first ..`` towards the shares, in place; return how many moved.

    ``master`` and the counters (``offsets``, ``counts``) cover ``replicas[first:]``,
    ``per_part`` counts every vertex's master. Partition p's target is ``share_p * N``
    and its fill ``masters_p / target_p``. Each round lists, for every vertex, the
    replica of most edges among those emptier than its master, and moves them, fewest
    edges lost first (then by id), while the source stays at least as full as the
    destination becomes; so a partition below its share takes masters from the full
    ones and passes its own on to the emptier ones. Rounds repeat until every fill is
    within :data:`MASTER_SLACK` of 1, or nothing moves (at most ``4k`` rounds). Masters
    stay on replicas.
    """
    target = np.maximum(np.asarray(shares, dtype=np.float64) * float(per_part.sum()), 1.0)
    moved = 0
    for _ in range(4 * len(per_part)):
        fill = per_part / target
        if np.abs(fill - 1.0).max() <= MASTER_SLACK:
            break
        vertex, dest, loss = _move_candidates(replicas, offsets, counts, first, master, fill)
        step = _apply_moves(vertex, dest, np.argsort(loss, kind="stable"), master, per_part, target)
        moved += step
        if step == 0:
            break
    return moved


def master_miss(master: np.ndarray, shares: tuple[float, ...]) -> float:
    """The largest relative miss of a partition's master count from its share."""
    per_part = np.bincount(master, minlength=len(shares)) / max(1, len(master))
    return float(np.abs(per_part / np.asarray(shares) - 1.0).max())


def choose_masters(
    replicas: np.ndarray, offsets: np.ndarray, counts: np.ndarray, num_parts: int,
    shares: tuple[float, ...] | None = None,
) -> np.ndarray:
    """The master partition (int32[N]) of every vertex (``shares``: each partition's, None
    for equal; with shares :func:`balance_masters` follows)."""
    with stage("masters", log) as info:
        master, per_part = _choose(replicas, offsets, counts, num_parts, 0,
                                   np.zeros(num_parts, dtype=np.int64), load_weights(num_parts, shares))
        if shares is not None:
            info.update(moved_to_shares=balance_masters(replicas, offsets, counts, master, per_part, shares))
        info.update(max_masters=int(per_part.max()), min_masters=int(per_part.min()))
    return master


def choose_new_masters(
    replicas: np.ndarray, offsets: np.ndarray, counts: np.ndarray, num_parts: int, first: int,
    masters_per_part: np.ndarray, shares: tuple[float, ...] | None = None,
) -> np.ndarray:
    """Masters (int32) of the vertices ``first ..`` given the existing ``masters_per_part``.

    The same rule as :func:`choose_masters`, continued: existing vertices keep their
    masters, and the new ones are placed in id order with the tie-break on the
    running master counts (with shares, then balanced among the new vertices only).
    ``offsets`` and ``counts`` cover ``replicas[first:]``.
    """
    per_part = np.array(masters_per_part, dtype=np.int64, copy=True)
    master, per_part = _choose(replicas, offsets, counts, num_parts, int(first), per_part,
                               load_weights(num_parts, shares))
    if shares is not None:
        balance_masters(replicas, offsets, counts, master, per_part, shares, int(first))
    return master


def masters_needs(run: PartitionConfig, s: RunShape) -> Need:
    """Memory of the masters stage: ``replicas`` uint64[N, W], ``offsets`` int64[N+1], the
    ``popcounts`` int64[N], the packed rows int64[N, W + 1]; then each stream range's
    thread keeps one counter per replica (``int32``, RF·N of them, ``int64`` from 2**31
    edges) and reads its own stream with each batch's ``int16`` partitions; then
    ``master`` int32[N]; with shares, :func:`balance_masters`'s candidates (vertex,
    destination, loss and their order, int64 each) beside one summed counter set."""
    held = held_arrays(run, s) + 8 * s.words * s.n + 8 * s.n + 8 * (s.words + 1) * s.n
    counter = 4 if s.e < 2**31 else 8
    balance = counter * s.rf * s.n + 4 * s.n + 32 * s.n if run.shares is not None else 0
    return Need(driver=held + max(8 * s.n, s.ways * (counter * s.rf * s.n + s.stream + 2 * s.b) + 4 * s.n,
                                  balance))
