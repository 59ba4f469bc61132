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
(community ids are the ids of their founding vertices).
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass

import numba
import numpy as np

from pipeline.prefetch import PREFETCH_DISTANCE, prefetch_read, prefetch_write
from pipeline.stream import iter_edge_batches
from storage.fs import Shard
from storage.resources import stage

__all__ = ["Communities", "cluster_batch", "structural_clusters"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Communities:
    """``community_id[v]`` (a founding vertex id) and ``volume[c]`` (sum of member degrees)."""

    community_id: np.ndarray
    volume: np.ndarray
    cap: float
    moves: int
    kernel_seconds: float = 0.0


@numba.njit(cache=True, nogil=True)
def cluster_batch(src, dst, degree, community, volume, attr, cap, cross_cap):
    """Apply the clustering rule to one batch; returns the number of moves."""
    moves = 0
    n = src.shape[0]
    half = PREFETCH_DISTANCE // 2
    for i in range(n):
        # Prefetch the endpoints' state of the edge PREFETCH_DISTANCE ahead, and the
        # volumes of their communities half as far ahead (their ids are in cache by
        # then; a move in between only wastes the hint).
        if i + PREFETCH_DISTANCE < n:
            a = src[i + PREFETCH_DISTANCE]
            b = dst[i + PREFETCH_DISTANCE]
            prefetch_write(community, a)
            prefetch_write(community, b)
            prefetch_read(degree, a)
            prefetch_read(degree, b)
            prefetch_read(attr, a)
            prefetch_read(attr, b)
        if i + half < n:
            prefetch_write(volume, community[src[i + half]])
            prefetch_write(volume, community[dst[i + half]])
        u = src[i]
        v = dst[i]
        cu = community[u]
        cv = community[v]
        if cu == cv:
            continue
        vol_u = volume[cu]
        vol_v = volume[cv]
        if vol_u >= cap or vol_v >= cap:
            continue
        if vol_u <= vol_v:
            mover, other, source, target = u, v, cu, cv
        else:
            mover, other, source, target = v, u, cv, cu
        limit = cap if attr[mover] == attr[other] else cross_cap
        d = degree[mover]
        if volume[target] + d <= limit:
            volume[source] -= d
            volume[target] += d
            community[mover] = target
            moves += 1
    return moves


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
        Exact degrees (int64[N]) from :func:`pipeline.degrees.compute_degrees`.
    attr_cluster_id
        Attribute cluster per vertex; all zeros makes the rule purely structural.
    alpha
        Attribute weight in [0, 1] (see the module docstring).
    passes
        Streaming passes; later passes re-stream the edges with the state of the
        previous one (re-streaming clustering, as 2PS-L offers).
    """
    num_nodes = len(degree)
    community = np.arange(num_nodes, dtype=np.int64)
    volume = degree.astype(np.int64, copy=True)
    cap = float(degree.sum()) / num_parts  # = 2|E|/k
    cross_cap = (1.0 - alpha) * cap
    attr = np.ascontiguousarray(attr_cluster_id, dtype=np.int32)
    moves = 0
    with stage("structural clustering", log) as info:
        empty = np.zeros(0, dtype=np.int64)
        cluster_batch(empty, empty, degree, community, volume, attr, cap, cross_cap)  # JIT
        kernel_seconds = 0.0
        for _ in range(passes):
            for batch in iter_edge_batches(edge_shards, batch_rows):
                t0 = time.perf_counter()
                moves += cluster_batch(
                    batch.src, batch.dst, degree, community, volume, attr, cap, cross_cap
                )
                kernel_seconds += time.perf_counter() - t0
        info.update(moves=moves, communities=int(np.count_nonzero(volume)))
    return Communities(
        community_id=community, volume=volume, cap=cap, moves=moves, kernel_seconds=kernel_seconds
    )
