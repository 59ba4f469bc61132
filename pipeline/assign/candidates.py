"""Two-candidate scoring (``candidates``: ASEP with ``--scoring candidates``).

Only the partitions of the endpoints' communities ``{p(c(u)), p(c(v))}`` are scored,
with the terms of :mod:`asepr.pipeline.assign.terms` and no balance term (the cap alone
balances): O(1) per edge. A candidate at its cap is skipped; ties go to p(c(u)).
"""

from __future__ import annotations

import numba

from asepr.pipeline.assign.state import has_replica
from asepr.pipeline.assign.terms import edge_terms

__all__ = ["candidates_choice"]


@numba.njit(cache=True, inline="always")
def _score(q, fload, fmax, scale, vstate, u, v, terms, beta):
    # The same operations in the same order as a plain scan, so float ties agree.
    gu, gv, pu, pv, scu, scv, hu, hv = terms
    s = scale * (fmax - fload)
    s += gu * (1.0 if has_replica(vstate, u, q) else 0.0)
    s += gv * (1.0 if has_replica(vstate, v, q) else 0.0)
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
def candidates_choice(vstate, u, v, words, loads, floads, fmax, caps, use_partial, beta):
    """The better of p(c(u)) and p(c(v)) below its cap, or -1 for the kernel's fallback."""
    terms = edge_terms(vstate, u, v, words, use_partial, beta)
    pu, pv = terms[2], terms[3]
    p = -1
    best_score = -1.0
    for j in range(2):
        q = pu if j == 0 else pv
        if j == 1 and q == pu:
            break
        if loads[q] >= caps[q]:
            continue
        s = _score(q, floads[q], fmax, 0.0, vstate, u, v, terms, beta)
        if s > best_score:
            best_score = s
            p = q
    return p
