"""PowerGraph's greedy rules (``greedy``).

Edge (u, v) goes to the least-loaded partition of A(u) ∩ A(v); when both endpoints
have replicas but share none, to the least-loaded replica of the endpoint with more
unassigned edges (exact minus partial degree), else of the other; when only one has
replicas, to its least-loaded replica. "Least loaded" compares loads relative to the
partitions' shares (``floads``, :func:`asepr.pipeline.capacity.load_weights`; the loads
themselves for equal shares). Partitions at their cap are skipped; -1 (no choice)
leaves the edge to the kernel's least-loaded fallback.
"""

from __future__ import annotations

import numba

from asepr.pipeline.assign.state import DEG, PDEG, has_replica

__all__ = ["greedy_choice"]


@numba.njit(cache=True, inline="always")
def _least_loaded_in(vstate, x, y, loads, floads, caps, need_both):
    """Least (relatively) loaded partition below its cap in A(x) (and A(y) when need_both); -1 if none."""
    best = -1
    for p in range(loads.shape[0]):
        if loads[p] >= caps[p]:
            continue
        if not has_replica(vstate, x, p):
            continue
        if need_both and not has_replica(vstate, y, p):
            continue
        if best < 0 or floads[p] < floads[best]:
            best = p
    return best


@numba.njit(cache=True, inline="always")
def _any_replica(vstate, x, words):
    for w in range(words):
        if vstate[x, w] != 0:
            return True
    return False


@numba.njit(cache=True, inline="always")
def greedy_choice(vstate, u, v, words, loads, floads, caps):
    """The ``greedy`` partition of edge (u, v), or -1 for the least-loaded fallback."""
    p = -1
    has_u = _any_replica(vstate, u, words)
    has_v = _any_replica(vstate, v, words)
    if has_u and has_v:
        p = _least_loaded_in(vstate, u, v, loads, floads, caps, True)
        if p < 0:
            # Disjoint: the endpoint with more unassigned edges keeps its replicas.
            rest_u = vstate[u, words + DEG] - vstate[u, words + PDEG]
            rest_v = vstate[v, words + DEG] - vstate[v, words + PDEG]
            first, second = (u, v) if rest_u >= rest_v else (v, u)
            p = _least_loaded_in(vstate, first, first, loads, floads, caps, False)
            if p < 0:
                p = _least_loaded_in(vstate, second, second, loads, floads, caps, False)
    elif has_u:
        p = _least_loaded_in(vstate, u, u, loads, floads, caps, False)
    elif has_v:
        p = _least_loaded_in(vstate, v, v, loads, floads, caps, False)
    return p
