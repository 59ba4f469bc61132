"""Structural clustering: one attribute-driven streaming pass in the style of 2PS-L.

Every vertex starts as a singleton community whose volume is its degree. For each
edge ``(u, v)`` whose endpoints lie in different communities, both below the volume
cap ``2|E|/k``, the endpoint in the smaller-volume community moves into the other
one (Hollocou et al.; 2PS-L), if the move keeps the target volume within a limit:

* same attribute cluster (``attr(mover) == attr(other endpoint)``): ``cap``;
* different attribute clusters: ``(1 - alpha) * cap`` *(our choice)*.

So ``alpha = 0`` is exactly 2PS-L, ``alpha = 1`` forbids every cross-attribute move
(by induction, a community then never spans two attribute clusters), and in between
a mismatch costs the share ``alpha`` of the cap: cross-attribute merges still happen
while the target community is small, where they help structure most and cost
homogeneity least.

State is O(N): the community of every vertex and the volume of every community
(community ids are the ids of their founding vertices). The kernel keeps it packed in
one 32-byte row per vertex, :class:`ClusterState`: ``(community, degree, attr,
volume of the community this vertex founded)``. An edge then touches four cache lines
(the rows of u, v and of their two communities) instead of eight separate arrays'
lines, and the kernel prefetches them a fixed distance ahead (about twice as fast as
separate arrays: ``docs/results/implementation-choices/kernel-layout.md``).

The published 2PS-L clustering (Mayer et al., ICDE 2022), which the baselines ``2ps-l``
and ``2ps-hdrf`` run (:func:`published_clusters`), differs in three rules: a vertex
gets a community when the stream first reaches it (community ids count in that
order); the mover is the endpoint whose community has the smaller volume *without
it*, ``vol(c(x)) - d(x)`` (ties: u); and the volume cap is the integer
``floor(2|E|/k)``, which a community may reach.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass

import numba
import numpy as np

from asepr.pipeline.config import PartitionConfig
from asepr.pipeline.planning.needs import Need, RunShape
from asepr.pipeline.kernels.prefetch import PREFETCH_DISTANCE, aligned_zeros, prefetch_write
from asepr.pipeline.stream import iter_edge_batches, warmup_arrays
from asepr.storage.locations.fs import Shard
from asepr.storage.resources import stage

__all__ = ["ClusterState", "Communities", "cluster_batch", "clustering_needs", "published_cluster_batch",
           "published_clusters", "structural_clusters"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Communities:
    """``community_id[v]`` (a founding vertex id) and ``volume[c]`` (sum of member degrees)."""

    community_id: np.ndarray
    volume: np.ndarray
    cap: float
    moves: int
    kernel_seconds: float = 0.0


# Columns of a ClusterState row.
_COMMUNITY, _DEGREE, _ATTR, _VOLUME = 0, 1, 2, 3


@numba.njit(cache=True, nogil=True, inline="always")
def _communities(rows, u, v):
    """The communities of ``u`` and ``v`` and their volumes (a community's volume lives in
    its own row)."""
    cu = rows[u, _COMMUNITY]
    cv = rows[v, _COMMUNITY]
    return cu, cv, rows[cu, _VOLUME], rows[cv, _VOLUME]


@numba.njit(cache=True, nogil=True)
def cluster_batch(src, dst, rows, cap, cross_cap):
    """Apply the clustering rule to one batch of edges; returns the number of moves.

    ``rows`` is :attr:`ClusterState.rows`. A community id is its founder's vertex id,
    so the volume of community ``c`` lives in row ``c``.
    """
    moves = 0
    n = src.shape[0]
    half = PREFETCH_DISTANCE // 2
    for i in range(n):
        # The endpoints' rows PREFETCH_DISTANCE edges ahead; their communities' rows
        # half as far ahead, when the endpoints' rows (holding the ids) have arrived.
        # A move in between only wastes a hint.
        if i + PREFETCH_DISTANCE < n:
            prefetch_write(rows, src[i + PREFETCH_DISTANCE])
            prefetch_write(rows, dst[i + PREFETCH_DISTANCE])
        if i + half < n:
            prefetch_write(rows, rows[src[i + half], _COMMUNITY])
            prefetch_write(rows, rows[dst[i + half], _COMMUNITY])
        u = src[i]
        v = dst[i]
        cu, cv, vol_u, vol_v = _communities(rows, u, v)
        if cu == cv:
            continue
        if vol_u >= cap or vol_v >= cap:
            continue
        if vol_u <= vol_v:
            mover, other, source, target = u, v, cu, cv
        else:
            mover, other, source, target = v, u, cv, cu
        limit = cap if rows[mover, _ATTR] == rows[other, _ATTR] else cross_cap
        d = rows[mover, _DEGREE]
        if rows[target, _VOLUME] + d <= limit:
            rows[source, _VOLUME] -= d
            rows[target, _VOLUME] += d
            rows[mover, _COMMUNITY] = target
            moves += 1
    return moves


@numba.njit(cache=True, nogil=True)
def published_cluster_batch(src, dst, rows, cap, next_id):
    """The published 2PS-L rule on one batch; returns ``(moves, next_id)``.

    ``rows`` is :attr:`ClusterState.rows` with every community -1 (unseen) and every
    volume 0 at the start; a vertex first seen gets community ``next_id``, which then
    grows by one. The volume of community ``c`` lives in row ``c``.
    """
    moves = 0
    n = src.shape[0]
    for i in range(n):
        if i + PREFETCH_DISTANCE < n:
            prefetch_write(rows, src[i + PREFETCH_DISTANCE])
            prefetch_write(rows, dst[i + PREFETCH_DISTANCE])
        u = src[i]
        v = dst[i]
        for x in (u, v):
            if rows[x, _COMMUNITY] < 0:
                rows[x, _COMMUNITY] = next_id
                rows[next_id, _VOLUME] += rows[x, _DEGREE]
                next_id += 1
        cu, cv, vol_u, vol_v = _communities(rows, u, v)
        if cu == cv:
            continue
        if vol_u > cap or vol_v > cap:
            continue
        du = rows[u, _DEGREE]
        dv = rows[v, _DEGREE]
        if vol_u - du <= vol_v - dv:
            if vol_v + du <= cap:
                rows[cu, _VOLUME] -= du
                rows[cv, _VOLUME] += du
                rows[u, _COMMUNITY] = cv
                moves += 1
        elif vol_u + dv <= cap:
            rows[cv, _VOLUME] -= dv
            rows[cu, _VOLUME] += dv
            rows[v, _COMMUNITY] = cu
            moves += 1
    return moves, next_id


class ClusterState:
    """The clustering state, packed one row per vertex (see the module docstring).

    Parameters
    ----------
    degree
        Exact degrees (int64[N]).
    attr
        Attribute cluster per vertex; all zeros makes the rule purely structural.
    community, volume
        A state to continue (incremental ingest); default: singletons, volume = degree.
    """

    def __init__(self, degree: np.ndarray, attr: np.ndarray, community: np.ndarray | None = None,
                 volume: np.ndarray | None = None):
        n = len(degree)
        self.rows = aligned_zeros((n, 4), np.int64)
        self.rows[:, _COMMUNITY] = np.arange(n) if community is None else community
        self.rows[:, _DEGREE] = degree
        self.rows[:, _ATTR] = attr
        self.rows[:, _VOLUME] = degree if volume is None else volume

    def cluster(self, src: np.ndarray, dst: np.ndarray, cap: float, cross_cap: float) -> int:
        """One batch of edges (:func:`cluster_batch`); returns the number of moves."""
        return cluster_batch(src, dst, self.rows, cap, cross_cap)

    @property
    def community(self) -> np.ndarray:
        """``community_id[v]`` (a contiguous copy)."""
        return np.ascontiguousarray(self.rows[:, _COMMUNITY])

    @property
    def volume(self) -> np.ndarray:
        """``volume[c]`` (a contiguous copy)."""
        return np.ascontiguousarray(self.rows[:, _VOLUME])


def structural_clusters(
    edge_shards: list[Shard],
    degree: np.ndarray,
    attr_cluster_id: np.ndarray,
    num_parts: int,
    alpha: float,
    *,
    passes: int = 1,
    batch_rows: int = 1 << 20,
) -> Communities:
    """One streaming clustering pass over ``edge_shards``.

    Parameters
    ----------
    degree
        Exact degrees (int64[N]) from :func:`asepr.pipeline.stages.degrees.compute_degrees`.
    attr_cluster_id
        Attribute cluster per vertex; all zeros makes the rule purely structural.
    alpha
        Attribute weight in [0, 1] (see the module docstring).
    passes
        Streaming passes; later passes re-stream the edges with the state of the
        previous one (re-streaming clustering, as 2PS-L offers).
    """
    cap = float(degree.sum()) / num_parts  # = 2|E|/k
    cross_cap = (1.0 - alpha) * cap
    state = ClusterState(degree, attr_cluster_id)
    moves = 0
    with stage("structural clustering", log) as info:
        for empty in warmup_arrays():  # compile outside the timed loop
            state.cluster(empty, empty, cap, cross_cap)
        kernel_seconds = 0.0
        for _ in range(passes):
            for batch in iter_edge_batches(edge_shards, batch_rows):
                t0 = time.perf_counter()
                moves += state.cluster(batch.src, batch.dst, cap, cross_cap)
                kernel_seconds += time.perf_counter() - t0
        community, volume = state.community, state.volume
        del state
        info.update(moves=moves, communities=int(np.count_nonzero(volume)))
    return Communities(
        community_id=community, volume=volume, cap=cap, moves=moves, kernel_seconds=kernel_seconds
    )


def published_clusters(edge_shards: list[Shard], degree: np.ndarray, num_parts: int, *,
                       batch_rows: int = 1 << 20) -> Communities:
    """The published 2PS-L clustering: one streaming pass (:func:`published_cluster_batch`).

    Parameters
    ----------
    degree
        Exact degrees (int64[N]).
    num_parts
        k; the volume cap is ``floor(sum(degree) / k)`` (= ``floor(2|E|/k)``).

    Returns
    -------
    Communities
        Community ids in order of first appearance; a vertex without edges has an
        empty community of its own.
    """
    cap = int(degree.sum()) // num_parts
    state = ClusterState(degree, np.zeros(len(degree), dtype=np.int32),
                         community=np.full(len(degree), -1, dtype=np.int64),
                         volume=np.zeros(len(degree), dtype=np.int64))
    moves = 0
    next_id = 0
    with stage("structural clustering", log) as info:
        for empty in warmup_arrays():  # compile outside the timed loop
            published_cluster_batch(empty, empty, state.rows, cap, 0)
        kernel_seconds = 0.0
        for batch in iter_edge_batches(edge_shards, batch_rows):
            t0 = time.perf_counter()
            batch_moves, next_id = published_cluster_batch(batch.src, batch.dst, state.rows, cap, next_id)
            moves += batch_moves
            kernel_seconds += time.perf_counter() - t0
        # Vertices without edges: empty communities of their own, after the others.
        unseen = np.flatnonzero(state.rows[:, _COMMUNITY] < 0)
        state.rows[unseen, _COMMUNITY] = next_id + np.arange(len(unseen))
        community, volume = state.community, state.volume
        del state
        info.update(moves=moves, communities=int(np.count_nonzero(volume)))
    return Communities(
        community_id=community, volume=volume, cap=float(cap), moves=moves, kernel_seconds=kernel_seconds
    )


def clustering_needs(run: PartitionConfig, s: RunShape) -> Need:
    """Memory of the structural clustering: ``ClusterState.rows`` int64[N, 4] (32 B per
    node), then the ``community`` and ``volume`` copies int64[N] while the rows live; the
    published 2PS-L rule starts from three more int64/int32 [N] arrays. ASEP first
    measures the attribute lift on a 2M-edge prefix (one batch, no prefetch)."""
    held = 12 * s.n
    published = not run.uses_attributes
    start = 20 * s.n if published else 8 * s.n
    return Need(driver=held + 32 * s.n + max(start, 16 * s.n) + s.stream)
