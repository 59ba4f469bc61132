"""The published two-phase baselines: 2PS-L and 2PS-HDRF (Mayer et al., ICDE 2022).

After the clustering (:func:`asepr.pipeline.stages.struct_cluster.published_clusters`) and
the mapping of communities to partitions by descending volume, the edges are streamed
twice:

1. **Pre-partitioning** (``prepartition``): an edge whose endpoints' communities map
   to the same partition ``p(c(u)) = p(c(v))`` goes there; the others wait.
2. **Scoring** (``2ps-l`` or ``2ps-hdrf``): every waiting edge is scored.

   * ``2ps-l`` scores the two candidates ``p(c(u))``, ``p(c(v))``. On a candidate
     ``p``, endpoint ``x`` adds, when it is already replicated on ``p``, HDRF's
     replication term ``g(x) = 1 + (1 - d(x)/(d(u)+d(v)))`` and, when ``p = p(c(x))``,
     the community term ``vol(c(x)) / (vol(c(u)) + vol(c(v)))``. Ties go to
     ``p(c(v))``. No balance term.
   * ``2ps-hdrf`` scores all k partitions by HDRF with exact degrees and the balance
     term ``lambda * (maxload - load(p)) / maxload``; ties go to the lowest id.

Both phases share one fallback: when a target is at its cap (in phase 1 the common
partition, in phase 2 of ``2ps-l`` either candidate), the edge goes to ``x mod k``
for the endpoint ``x`` of higher degree (``v`` on a tie), or to the least-loaded
partition if that one is at its cap too (the kernel's fallback). Full partitions are
never scored. Degrees are exact in both phases.

With shares (:mod:`asepr.pipeline.capacity`) *(our choice)*: each partition has its own cap,
``maxload`` and ``load(p)`` are loads relative to the shares, and ``x mod k`` becomes
the hash bucket of ``x`` (:func:`~asepr.pipeline.assign.hashing.bucket`), each partition
drawn with its share.

Each choice returns :data:`WAIT` for an edge the other phase assigns.
"""

from __future__ import annotations

import numba
import numpy as np

from asepr.pipeline.assign.hashing import bucket, mix
from asepr.pipeline.assign.state import DEG, PART, VOL, has_replica

__all__ = ["WAIT", "hdrf_phase_choice", "linear_phase_choice", "prepartition_choice"]

#: The choice of an edge that the other phase assigns.
WAIT = -2


@numba.njit(cache=True, inline="always")
def _full_fallback(vstate, u, v, words, k, bounds):
    """``x mod k`` for the endpoint ``x`` of higher degree (``v`` on a tie); with shares
    (``bounds`` not empty) the hash bucket of ``x``."""
    x = u if vstate[u, words + DEG] > vstate[v, words + DEG] else v
    if bounds.shape[0] == 0:
        return np.int64(x % k)
    return bucket(mix(np.uint64(x)), k, bounds)


@numba.njit(cache=True, inline="always")
def prepartition_choice(vstate, u, v, words, loads, caps, bounds):
    """Phase 1: ``p(c(u))`` when it equals ``p(c(v))`` (fallback when it is full), else WAIT."""
    pu = vstate[u, words + PART]
    if pu != vstate[v, words + PART]:
        return WAIT
    if loads[pu] >= caps[pu]:
        return _full_fallback(vstate, u, v, words, loads.shape[0], bounds)
    return pu


@numba.njit(cache=True, inline="always")
def _replication_terms(vstate, u, v, words):
    du = np.float64(vstate[u, words + DEG])
    dv = np.float64(vstate[v, words + DEG])
    total = du + dv
    return 1.0 + (1.0 - du / total), 1.0 + (1.0 - dv / total)


@numba.njit(cache=True, inline="always")
def linear_phase_choice(vstate, u, v, words, loads, caps, bounds):
    """Phase 2 of 2PS-L: the better of ``p(c(u))`` and ``p(c(v))``, or WAIT."""
    pu = vstate[u, words + PART]
    pv = vstate[v, words + PART]
    if pu == pv:
        return WAIT
    if loads[pu] >= caps[pu] or loads[pv] >= caps[pv]:
        return _full_fallback(vstate, u, v, words, loads.shape[0], bounds)
    gu, gv = _replication_terms(vstate, u, v, words)
    volumes = np.float64(vstate[u, words + VOL] + vstate[v, words + VOL])
    su = 0.0
    sv = 0.0
    if has_replica(vstate, u, pu):
        su = gu + (gv if has_replica(vstate, v, pu) else 0.0) + vstate[u, words + VOL] / volumes
    elif has_replica(vstate, v, pu):
        su = gv
    if has_replica(vstate, v, pv):
        sv = (gu if has_replica(vstate, u, pv) else 0.0) + gv + vstate[v, words + VOL] / volumes
    elif has_replica(vstate, u, pv):
        sv = gu
    return pv if sv >= su else pu


@numba.njit(cache=True, inline="always")
def hdrf_phase_choice(vstate, u, v, words, loads, floads, fmax, caps, lam):
    """Phase 2 of 2PS-HDRF: the best HDRF score below the caps (first on ties), or WAIT.

    ``floads`` are the loads relative to the shares (float64) and ``fmax`` their
    maximum. Returns -1 when every partition is at its cap (the kernel's fallback).
    """
    if vstate[u, words + PART] == vstate[v, words + PART]:
        return WAIT
    gu, gv = _replication_terms(vstate, u, v, words)
    k = loads.shape[0]
    # The original divides by epsilon + maxload - minload with epsilon = 1 and the
    # minimum pinned to 1: the max load (never 0 once an edge is placed).
    norm = fmax if fmax > 0 else 1.0
    best = -1
    best_score = -1.0
    for w in range(words):
        bu = vstate[u, w]
        bv = vstate[v, w]
        for q in range(w * 64, min(k, w * 64 + 64)):
            if loads[q] >= caps[q]:
                continue
            s = (gu if (bu >> (q & 63)) & 1 else 0.0) + (gv if (bv >> (q & 63)) & 1 else 0.0)
            s += lam * ((fmax - floads[q]) / norm)
            if s > best_score:
                best_score = s
                best = q
    return best
