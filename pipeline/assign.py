"""The streaming edge-assignment kernel family (ASEP and its baselines).

One numba function, :func:`assign_batch`, assigns a batch of edges in stream order
and updates O(N) state: a replica bitset of ``ceil(k/64)`` uint64 words per vertex,
partial degrees, and the k loads. The per-vertex state is packed into one row per
vertex (:class:`AssignState`), because on graphs larger than the cache the kernel is
bound by random memory access, not arithmetic. Modes:

``candidates`` (ASEP, 2PS-L)
    Score the partitions of the two endpoints' communities ``{p(c(u)), p(c(v))}``:
    ``g(u,p) + g(v,p) + sc(u,p) + sc(v,p) + beta*[p = home(attr(u))] + beta*[p = home(attr(v))]``
    with HDRF's replication term ``g(x,p) = 1 + (1 - d(x)/(d(u)+d(v)))`` if
    ``p ∈ A(x)`` (exact degrees) and 2PS-L's community term
    ``sc(x,p) = vol(c(x)) / (vol(c(u)) + vol(c(v)))`` if ``p = p(c(x))``.
``all`` (HDRF, 2PS-HDRF, ASEP with ``--scoring hdrf``)
    The same score over all k partitions plus HDRF's balance term
    ``lambda * (maxload - load(p)) / (1 + maxload - minload)``. Plain HDRF uses
    partial degrees and no community or attribute terms. The balance and replication
    terms of all k partitions are computed in one branch-free (vectorised) loop, the
    community and home terms added at their at most four partitions, then the first
    maximum is taken. This dense form beat pruning to the replica sets by 3-4x: on
    skewed graphs the hot vertices that dominate the stream are replicated almost
    everywhere, so pruning saved little and cost a branch per partition.
``hash``, ``dbh``, ``greedy``
    Edge hashing; degree-based hashing (hash of the lower-degree endpoint); and
    PowerGraph's greedy rules (intersection of replica sets, else the replicas of
    the endpoint with more unassigned edges, else the least loaded).

Every mode respects the hard cap ``ceil((1 + epsilon) |E| / k)``: a partition at cap
is never chosen, and if every scored candidate is full the edge goes to the
least-loaded partition. Since ``k * cap >= |E|``, the cap always holds. Ties go to
the lowest partition id, so a run is deterministic for a given stream order.
"""

from __future__ import annotations

import numba
import numpy as np

from pipeline.prefetch import PREFETCH_DISTANCE, aligned_zeros, prefetch_write

__all__ = [
    "MODES",
    "AssignState",
    "assign_batch",
    "edge_hash",
    "replica_sets",
]

MODES = {"candidates": 0, "all": 1, "hash": 2, "dbh": 3, "greedy": 4}
_CANDIDATES, _ALL, _HASH, _DBH, _GREEDY = 0, 1, 2, 3, 4


@numba.njit(cache=True, inline="always")
def _mix(x):
    # splitmix64 finaliser; all arithmetic stays in uint64.
    x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return x ^ (x >> np.uint64(31))


@numba.njit(cache=True)
def edge_hash(u, v, seed):
    """Seeded 64-bit hash of an edge (order-independent)."""
    a = min(u, v)
    b = max(u, v)
    return _mix(np.uint64(a) * np.uint64(0x9E3779B97F4A7C15) ^ _mix(np.uint64(b) + np.uint64(seed)))


# Packed per-vertex state: one int64 row per vertex, so that an endpoint costs one
# cache line instead of one per array (rows start on cache lines, and the kernel
# prefetches the rows of the edge PREFETCH_DISTANCE ahead). Measured on 10M edges of a
# 5M-vertex synth graph, k = 32: 2PS-L candidates 1.9 -> 3.7-4.0M edges/s, ASEP all-k
# 1.25 -> 1.4-1.6M; with prefetch, alignment and dense all-k scoring (50M edges):
# 2PS-L 5.7 -> 19-21M, HDRF 1.7 -> 10.7M, ASEP all-k 1.4 -> 8-10M edges/s.
# Row layout (W = ceil(k/64) replica words):
#   [0, W)   replica bitset words (uint64 bit patterns stored as int64)
#   W        exact degree d(v)
#   W + 1    partial degree (edges of v seen so far)
#   W + 2    partition of v's community p(c(v)), or -1
#   W + 3    volume of v's community vol(c(v))
#   W + 4    home partition of v's attribute cluster, or -1
_DEG, _PDEG, _PART, _VOL, _HOME = 0, 1, 2, 3, 4
_FIELDS = 5


@numba.njit(cache=True, inline="always")
def _has(vstate, x, p):
    return (vstate[x, p >> 6] >> (p & 63)) & 1 != 0


@numba.njit(cache=True, inline="always")
def _score(q, load, max_load, scale, vstate, u, v, gu, gv, pu, pv, scu, scv, hu, hv, beta):
    # The same operations in the same order as a plain scan, so float ties agree.
    s = scale * np.float64(max_load - load)
    s += gu * (1.0 if _has(vstate, u, q) else 0.0)
    s += gv * (1.0 if _has(vstate, v, q) else 0.0)
    if q == pu:
        s += scu
    if q == pv:
        s += scv
    if q == hu:
        s += beta
    if q == hv:
        s += beta
    return s


@numba.njit(cache=True, inline="always")
def _least_loaded(loads):
    best = 0
    for p in range(1, loads.shape[0]):
        if loads[p] < loads[best]:
            best = p
    return best


@numba.njit(cache=True, inline="always")
def _least_loaded_in(vstate, x, y, loads, cap, need_both):
    """Least-loaded partition (below cap) in A(x) (and A(y) when need_both); -1 if none."""
    best = -1
    for p in range(loads.shape[0]):
        if loads[p] >= cap:
            continue
        if not _has(vstate, x, p):
            continue
        if need_both and not _has(vstate, y, p):
            continue
        if best < 0 or loads[p] < loads[best]:
            best = p
    return best


@numba.njit(cache=True, inline="always")
def _any_replica(vstate, x, words):
    for w in range(words):
        if vstate[x, w] != 0:
            return True
    return False


@numba.njit(cache=True, nogil=True)
def assign_batch(src, dst, out, mode, vstate, words, loads, use_partial, beta, lam, cap, seed):
    """Assign ``src[i], dst[i]`` to ``out[i]`` in order, updating the state in place.

    ``vstate`` is the packed per-vertex state of :class:`AssignState`; ``words`` its
    number of replica words. ``beta`` weighs the attribute-home term (homes of -1
    never match), ``lam`` HDRF's balance term; ``use_partial`` scores with partial
    instead of exact degrees (plain HDRF).
    """
    k = loads.shape[0]
    deg_col = words + _DEG
    pdeg_col = words + _PDEG
    part_col = words + _PART
    vol_col = words + _VOL
    home_col = words + _HOME
    # Loads only grow: track the max directly and the min with the count of partitions
    # at it, recomputing only when the last one leaves the min (amortised O(1)).
    max_load = loads[0]
    min_load = loads[0]
    for q in range(1, k):
        max_load = max(max_load, loads[q])
        min_load = min(min_load, loads[q])
    at_min = 0
    for q in range(k):
        if loads[q] == min_load:
            at_min += 1
    scores = np.empty(k, dtype=np.float64)
    floads = loads.astype(np.float64)
    n = src.shape[0]
    for i in range(n):
        if i + PREFETCH_DISTANCE < n:
            prefetch_write(vstate, src[i + PREFETCH_DISTANCE])
            prefetch_write(vstate, dst[i + PREFETCH_DISTANCE])
        u = src[i]
        v = dst[i]
        vstate[u, pdeg_col] += 1
        if v != u:
            vstate[v, pdeg_col] += 1
        p = -1
        if mode == _HASH:
            p = np.int64(edge_hash(u, v, seed) % np.uint64(k))
        elif mode == _DBH:
            x = u
            if vstate[v, deg_col] < vstate[u, deg_col] or (
                vstate[v, deg_col] == vstate[u, deg_col] and v < u
            ):
                x = v
            p = np.int64(_mix(np.uint64(x) + np.uint64(seed)) % np.uint64(k))
        elif mode == _GREEDY:
            has_u = _any_replica(vstate, u, words)
            has_v = _any_replica(vstate, v, words)
            if has_u and has_v:
                p = _least_loaded_in(vstate, u, v, loads, cap, True)
                if p < 0:
                    # Disjoint: the endpoint with more unassigned edges keeps its replicas.
                    rest_u = vstate[u, deg_col] - vstate[u, pdeg_col]
                    rest_v = vstate[v, deg_col] - vstate[v, pdeg_col]
                    first, second = (u, v) if rest_u >= rest_v else (v, u)
                    p = _least_loaded_in(vstate, first, first, loads, cap, False)
                    if p < 0:
                        p = _least_loaded_in(vstate, second, second, loads, cap, False)
            elif has_u:
                p = _least_loaded_in(vstate, u, u, loads, cap, False)
            elif has_v:
                p = _least_loaded_in(vstate, v, v, loads, cap, False)
        else:
            col = pdeg_col if use_partial else deg_col
            du = np.float64(vstate[u, col])
            dv = np.float64(vstate[v, col])
            total = du + dv
            gu = 1.0 + (1.0 - du / total) if total > 0 else 1.0
            gv = 1.0 + (1.0 - dv / total) if total > 0 else 1.0
            pu = vstate[u, part_col]
            pv = vstate[v, part_col]
            scu = 0.0
            scv = 0.0
            if pu >= 0:
                vol = np.float64(vstate[u, vol_col] + vstate[v, vol_col])
                if vol > 0:
                    scu = vstate[u, vol_col] / vol
                    scv = vstate[v, vol_col] / vol
            hu = vstate[u, home_col] if beta != 0.0 else -1
            hv = vstate[v, home_col] if beta != 0.0 else -1
            best_score = -1.0
            if mode == _CANDIDATES:
                for j in range(2):
                    q = pu if j == 0 else pv
                    if j == 1 and q == pu:
                        break
                    if loads[q] >= cap:
                        continue
                    # No balance term here (scale 0): the cap alone balances.
                    s = _score(q, loads[q], max_load, 0.0, vstate, u, v, gu, gv,
                               pu, pv, scu, scv, hu, hv, beta)
                    if s > best_score:
                        best_score = s
                        p = q
            else:
                # Identical floats to _score's sum, in the same order: float(max - load)
                # equals fmax - floads[q] exactly (integers below 2**53), g * 1.0 is g
                # and s + 0.0 is s. So ties, and the assignment, are unchanged.
                scale = lam / (1.0 + np.float64(max_load - min_load))
                fmax = np.float64(max_load)
                for w in range(words):
                    bu = vstate[u, w]
                    bv = vstate[v, w]
                    for q in range(w * 64, min(k, w * 64 + 64)):
                        s = scale * (fmax - floads[q])
                        s += gu if (bu >> (q & 63)) & 1 else 0.0
                        s += gv if (bv >> (q & 63)) & 1 else 0.0
                        scores[q] = s if loads[q] < cap else -1.0
                if pu >= 0 and loads[pu] < cap:
                    scores[pu] += scu
                if pv >= 0 and loads[pv] < cap:
                    scores[pv] += scv
                if hu >= 0 and loads[hu] < cap:
                    scores[hu] += beta
                if hv >= 0 and loads[hv] < cap:
                    scores[hv] += beta
                # The maximum in four independent lanes (exact: max does not round),
                # then its first index: ties go to the lowest partition id.
                t0 = t1 = t2 = t3 = -1.0
                q = 0
                while q + 4 <= k:
                    t0 = max(t0, scores[q])
                    t1 = max(t1, scores[q + 1])
                    t2 = max(t2, scores[q + 2])
                    t3 = max(t3, scores[q + 3])
                    q += 4
                while q < k:
                    t0 = max(t0, scores[q])
                    q += 1
                top = max(max(t0, t1), max(t2, t3))
                if top >= 0.0:  # else every partition is at cap
                    p = 0
                    while scores[p] != top:
                        p += 1
        if p < 0 or loads[p] >= cap:
            p = _least_loaded(loads)
        out[i] = p
        if loads[p] == min_load:
            at_min -= 1
            if at_min == 0:
                min_load = loads[p] + 1
                for q in range(k):
                    if q != p and loads[q] < min_load:
                        min_load = loads[q]
                for q in range(k):
                    load_q = loads[q] + 1 if q == p else loads[q]
                    if load_q == min_load:
                        at_min += 1
        loads[p] += 1
        floads[p] += 1.0
        if loads[p] > max_load:
            max_load = loads[p]
        word = p >> 6
        bit = np.int64(1) << (p & 63)
        vstate[u, word] |= bit
        vstate[v, word] |= bit


class AssignState:
    """The O(N) state of a streaming assignment, packed one row per vertex.

    Parameters
    ----------
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
        width = self.words + _FIELDS
        stride = 8 if width <= 8 else -(-width // 8) * 8  # whole cache lines per row
        self.vstate = aligned_zeros((num_nodes, stride), np.int64)
        w = self.words
        self.vstate[:, w + _DEG] = degree
        self.vstate[:, w + _PART] = -1 if vertex_part is None else vertex_part
        self.vstate[:, w + _VOL] = 0 if vertex_volume is None else vertex_volume
        self.vstate[:, w + _HOME] = -1 if vertex_home is None else vertex_home
        self.loads = np.zeros(num_parts, dtype=np.int64)

    @property
    def replicas(self) -> np.ndarray:
        """A(v) as uint64 bitsets ``[N, W]`` (a contiguous copy)."""
        return np.ascontiguousarray(self.vstate[:, : self.words]).view(np.uint64)

    @property
    def pdeg(self) -> np.ndarray:
        return self.vstate[:, self.words + _PDEG]

    def assign(self, src, dst, out, mode: int, *, use_partial=False, beta=0.0, lam=1.0,
               cap: int, seed: int = 0) -> None:
        """Assign one batch (see :func:`assign_batch`)."""
        assign_batch(src, dst, out, mode, self.vstate, self.words, self.loads,
                     use_partial, beta, lam, cap, seed)


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
