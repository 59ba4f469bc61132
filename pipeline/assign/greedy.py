"""PowerGraph's greedy rules (``greedy``).

Edge (u, v) goes to the least-loaded partition of A(u) ∩ A(v); when both endpoints
have replicas but share none, to the least-loaded replica of the endpoint with more
unassigned edges (exact minus partial degree), else of the other; when only one has
replicas, to its least-loaded replica. Partitions at the cap are skipped; -1 (no
choice) leaves the edge to the kernel's least-loaded fallback.
"""

from __future__ import annotations

import numba

from pipeline.assign.state import DEG, PDEG, has_replica

__all__ = ["greedy_choice"]


@numba.njit(cache=True, inline="always")
def _least_loaded_in(vstate, x, y, loads, cap, need_both):
    """Least-loaded partition (below cap) in A(x) (and A(y) when need_both); -1 if none."""
    best = -1
    for p in range(loads.shape[0]):
        if loads[p] >= cap:
            continue
        if not has_replica(vstate, x, p):
            continue
        if need_both and not has_replica(vstate, y, p):
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


@numba.njit(cache=True, inline="always")
def greedy_choice(vstate, u, v, words, loads, cap):
    """The ``greedy`` partition of edge (u, v), or -1 for the least-loaded fallback."""
    p = -1
    has_u = _any_replica(vstate, u, words)
    has_v = _any_replica(vstate, v, words)
    if has_u and has_v:
        p = _least_loaded_in(vstate, u, v, loads, cap, True)
        if p < 0:
            # Disjoint: the endpoint with more unassigned edges keeps its replicas.
            rest_u = vstate[u, words + DEG] - vstate[u, words + PDEG]
            rest_v = vstate[v, words + DEG] - vstate[v, words + PDEG]
            first, second = (u, v) if rest_u >= rest_v else (v, u)
            p = _least_loaded_in(vstate, first, first, loads, cap, False)
            if p < 0:
                p = _least_loaded_in(vstate, second, second, loads, cap, False)
    elif has_u:
        p = _least_loaded_in(vstate, u, u, loads, cap, False)
    elif has_v:
        p = _least_loaded_in(vstate, v, v, loads, cap, False)
    return p
