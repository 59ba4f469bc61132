"""The streaming edge-assignment kernel family (ASEP and its baselines).

One numba function, :func:`assign_batch`, assigns a batch of edges in stream order
and updates O(N) state: a replica bitset of ``ceil(k/64)`` uint64 words per vertex,
partial degrees, and the k loads. Modes:

``candidates`` (ASEP, 2PS-L)
    Score the partitions of the two endpoints' communities ``{p(c(u)), p(c(v))}``:
    ``g(u,p) + g(v,p) + sc(u,p) + sc(v,p) + beta*[p = home(attr(u))] + beta*[p = home(attr(v))]``
    with HDRF's replication term ``g(x,p) = 1 + (1 - d(x)/(d(u)+d(v)))`` if
    ``p ∈ A(x)`` (exact degrees) and 2PS-L's community term
    ``sc(x,p) = vol(c(x)) / (vol(c(u)) + vol(c(v)))`` if ``p = p(c(x))``.
``all`` (HDRF, 2PS-HDRF, ASEP with ``--scoring hdrf``)
    The same score over all k partitions plus HDRF's balance term
    ``lambda * (maxload - load(p)) / (1 + maxload - minload)``. Plain HDRF uses
    partial degrees and no community or attribute terms.
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


@numba.njit(cache=True, inline="always")
def _has(replicas, x, p):
    return (replicas[x, p >> 6] >> np.uint64(p & 63)) & np.uint64(1) != np.uint64(0)


@numba.njit(cache=True, inline="always")
def _least_loaded(loads):
    best = 0
    for p in range(1, loads.shape[0]):
        if loads[p] < loads[best]:
            best = p
    return best


@numba.njit(cache=True, inline="always")
def _least_loaded_in(replicas, x, y, loads, cap, need_both):
    """Least-loaded partition (below cap) in A(x) (and A(y) when need_both); -1 if none."""
    best = -1
    for p in range(loads.shape[0]):
        if loads[p] >= cap:
            continue
        if not _has(replicas, x, p):
            continue
        if need_both and not _has(replicas, y, p):
            continue
        if best < 0 or loads[p] < loads[best]:
            best = p
    return best


@numba.njit(cache=True, inline="always")
def _any_replica(replicas, x):
    for w in range(replicas.shape[1]):
        if replicas[x, w] != np.uint64(0):
            return True
    return False


@numba.njit(cache=True, nogil=True)
def assign_batch(
    src, dst, out, mode, replicas, loads, degree, pdeg, use_partial,
    community, comm_part, comm_vol, use_comm,
    attr, attr_home, beta, lam, cap, seed,
):
    """Assign ``src[i], dst[i]`` to ``out[i]`` in order, updating the state in place."""
    k = loads.shape[0]
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
    for i in range(src.shape[0]):
        u = src[i]
        v = dst[i]
        pdeg[u] += 1
        if v != u:
            pdeg[v] += 1
        p = -1
        if mode == _HASH:
            p = np.int64(edge_hash(u, v, seed) % np.uint64(k))
        elif mode == _DBH:
            x = u
            if degree[v] < degree[u] or (degree[v] == degree[u] and v < u):
                x = v
            p = np.int64(_mix(np.uint64(x) + np.uint64(seed)) % np.uint64(k))
        elif mode == _GREEDY:
            has_u = _any_replica(replicas, u)
            has_v = _any_replica(replicas, v)
            if has_u and has_v:
                p = _least_loaded_in(replicas, u, v, loads, cap, True)
                if p < 0:
                    # Disjoint: the endpoint with more unassigned edges keeps its replicas.
                    rest_u = degree[u] - pdeg[u]
                    rest_v = degree[v] - pdeg[v]
                    first, second = (u, v) if rest_u >= rest_v else (v, u)
                    p = _least_loaded_in(replicas, first, first, loads, cap, False)
                    if p < 0:
                        p = _least_loaded_in(replicas, second, second, loads, cap, False)
            elif has_u:
                p = _least_loaded_in(replicas, u, u, loads, cap, False)
            elif has_v:
                p = _least_loaded_in(replicas, v, v, loads, cap, False)
        else:
            if use_partial:
                du = np.float64(pdeg[u])
                dv = np.float64(pdeg[v])
            else:
                du = np.float64(degree[u])
                dv = np.float64(degree[v])
            total = du + dv
            gu = 1.0 + (1.0 - du / total) if total > 0 else 1.0
            gv = 1.0 + (1.0 - dv / total) if total > 0 else 1.0
            pu = -1
            pv = -1
            scu = 0.0
            scv = 0.0
            if use_comm:
                cu = community[u]
                cv = community[v]
                pu = comm_part[cu]
                pv = comm_part[cv]
                vol = np.float64(comm_vol[cu] + comm_vol[cv])
                if vol > 0:
                    scu = comm_vol[cu] / vol
                    scv = comm_vol[cv] / vol
            hu = attr_home[attr[u]] if beta != 0.0 else -1
            hv = attr_home[attr[v]] if beta != 0.0 else -1
            best_score = -1.0
            if mode == _CANDIDATES:
                for j in range(2):
                    q = pu if j == 0 else pv
                    if j == 1 and q == pu:
                        break
                    if loads[q] >= cap:
                        continue
                    s = 0.0
                    if _has(replicas, u, q):
                        s += gu
                    if _has(replicas, v, q):
                        s += gv
                    if q == pu:
                        s += scu
                    if q == pv:
                        s += scv
                    if q == hu:
                        s += beta
                    if q == hv:
                        s += beta
                    if s > best_score:
                        best_score = s
                        p = q
            else:
                scale = lam / (1.0 + np.float64(max_load - min_load))
                for w in range(replicas.shape[1]):
                    word_u = replicas[u, w]
                    word_v = replicas[v, w]
                    q0 = w * 64
                    q1 = min(k, q0 + 64)
                    for q in range(q0, q1):
                        load = loads[q]
                        if load >= cap:
                            continue
                        shift = np.uint64(q - q0)
                        s = scale * np.float64(max_load - load)
                        s += gu * np.float64((word_u >> shift) & np.uint64(1))
                        s += gv * np.float64((word_v >> shift) & np.uint64(1))
                        if q == pu:
                            s += scu
                        if q == pv:
                            s += scv
                        if q == hu:
                            s += beta
                        if q == hv:
                            s += beta
                        if s > best_score:
                            best_score = s
                            p = q
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
        if loads[p] > max_load:
            max_load = loads[p]
        word = p >> 6
        bit = np.uint64(1) << np.uint64(p & 63)
        replicas[u, word] |= bit
        replicas[v, word] |= bit


class AssignState:
    """The O(N) state of a streaming assignment (resumable across batches and ingests)."""

    def __init__(self, num_nodes: int, num_parts: int):
        self.num_parts = num_parts
        self.words = (num_parts + 63) // 64
        self.replicas = np.zeros((num_nodes, self.words), dtype=np.uint64)
        self.loads = np.zeros(num_parts, dtype=np.int64)
        self.pdeg = np.zeros(num_nodes, dtype=np.int64)


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
