"""The hashing baselines: edge hashing (``hash``) and degree-based hashing (``dbh``).

``hash`` places an edge by a seeded hash of its endpoint pair; ``dbh`` by a seeded
hash of its lower-degree endpoint (exact degrees, ties to the lower id), so a hub's
edges spread while a low-degree vertex's edges stay together.

A hash picks its partition by :func:`bucket`: ``h mod k`` for equal shares, else the
partition whose range of the 64-bit hash values is its share
(:func:`asepr.pipeline.capacity.hash_bounds`), so that each partition's expected load is its
share of the edges.
"""

from __future__ import annotations

import numba
import numpy as np

from asepr.pipeline.assign.state import DEG

__all__ = ["bucket", "dbh_choice", "edge_hash", "hash_choice", "mix"]


@numba.njit(cache=True, inline="always")
def mix(x):
    """The splitmix64 finaliser; all arithmetic stays in uint64."""
    x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return x ^ (x >> np.uint64(31))


@numba.njit(cache=True)
def edge_hash(u, v, seed):
    """Seeded 64-bit hash of an edge (order-independent)."""
    a = min(u, v)
    b = max(u, v)
    return mix(np.uint64(a) * np.uint64(0x9E3779B97F4A7C15) ^ mix(np.uint64(b) + np.uint64(seed)))


@numba.njit(cache=True, inline="always")
def bucket(h, k, bounds):
    """The partition of 64-bit hash ``h``: ``h mod k`` when ``bounds`` is empty (equal
    shares), else the first p with ``h < bounds[p]``."""
    if bounds.shape[0] == 0:
        return np.int64(h % np.uint64(k))
    lo = 0
    hi = bounds.shape[0] - 1
    while lo < hi:
        mid = (lo + hi) >> 1
        if h < bounds[mid]:
            hi = mid
        else:
            lo = mid + 1
    return np.int64(lo)


@numba.njit(cache=True, inline="always")
def hash_choice(u, v, k, seed, bounds):
    """The ``hash`` partition of edge (u, v)."""
    return bucket(edge_hash(u, v, seed), k, bounds)


@numba.njit(cache=True, inline="always")
def dbh_choice(vstate, u, v, words, k, seed, bounds):
    """The ``dbh`` partition of edge (u, v): the hash of its lower-degree endpoint."""
    deg_col = words + DEG
    x = u
    if vstate[v, deg_col] < vstate[u, deg_col] or (vstate[v, deg_col] == vstate[u, deg_col] and v < u):
        x = v
    return bucket(mix(np.uint64(x) + np.uint64(seed)), k, bounds)
