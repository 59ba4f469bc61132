"""The per-edge terms of the ASEP score, shared by both scorings.

For edge (u, v) and a partition p the score sums, per endpoint x:

* HDRF's replication term ``g(x) = 1 + (1 - d(x)/(d(u)+d(v)))`` where ``p ∈ A(x)``
  (exact degrees, or partial degrees for plain HDRF);
* 2PS-L's community term ``sc(x) = vol(c(x)) / (vol(c(u)) + vol(c(v)))`` where
  ``p = p(c(x))``;
* ASEP's attribute-home term ``beta`` where ``p = home(attr(x))``.

:func:`edge_terms` computes the per-endpoint values once per edge; the scorings
(:mod:`asepr.pipeline.assign.candidates`, :mod:`asepr.pipeline.assign.hdrf`) add them at the
partitions they apply to.
"""

from __future__ import annotations

import numba
import numpy as np

from asepr.pipeline.assign.state import DEG, HOME, PART, PDEG, VOL

__all__ = ["edge_terms"]


@numba.njit(cache=True, inline="always")
def edge_terms(vstate, u, v, words, use_partial, beta):
    """``(gu, gv, pu, pv, scu, scv, hu, hv)`` of edge (u, v).

    ``g*`` the replication terms, ``p*`` the community partitions (-1: none), ``sc*``
    the community terms (0 without communities) and ``h*`` the attribute homes (-1
    when ``beta`` is 0, so that they never match).
    """
    col = words + (PDEG if use_partial else DEG)
    du = np.float64(vstate[u, col])
    dv = np.float64(vstate[v, col])
    total = du + dv
    gu = 1.0 + (1.0 - du / total) if total > 0 else 1.0
    gv = 1.0 + (1.0 - dv / total) if total > 0 else 1.0
    pu = vstate[u, words + PART]
    pv = vstate[v, words + PART]
    scu = 0.0
    scv = 0.0
    if pu >= 0:
        vol = np.float64(vstate[u, words + VOL] + vstate[v, words + VOL])
        if vol > 0:
            scu = vstate[u, words + VOL] / vol
            scv = vstate[v, words + VOL] / vol
    hu = vstate[u, words + HOME] if beta != 0.0 else -1
    hv = vstate[v, words + HOME] if beta != 0.0 else -1
    return gu, gv, pu, pv, scu, scv, hu, hv
