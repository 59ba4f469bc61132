"""All-k scoring (``all``: HDRF, and ASEP with ``--scoring hdrf``).

Every partition is scored with the terms of :mod:`asepr.pipeline.assign.terms` plus HDRF's
balance term ``lambda * (maxload - load(p)) / (1 + maxload - minload)``, over loads
relative to the partitions' shares (``load(p) / (k * share_p)``,
:func:`asepr.pipeline.capacity.load_weights`: the loads themselves for equal shares, so a
partition is preferred in proportion to how far it is below its share); plain HDRF
runs with partial degrees and no community or attribute terms. The balance and
replication terms of all k partitions are computed in one branch-free (vectorisable)
loop, the community and home terms added at their at most four partitions, then the
first maximum is taken. This dense form beats pruning to the replica sets: on skewed
graphs the hot vertices that dominate the stream are replicated almost everywhere, so
pruning saves little and costs a branch per partition.
"""

from __future__ import annotations

import numba

from asepr.pipeline.assign.terms import edge_terms

__all__ = ["all_choice"]


@numba.njit(cache=True, inline="always")
def _first_max(scores, k):
    """Index of the first maximum of ``scores`` (>= 0), or -1 when all are -1 (at cap)."""
    # The maximum in four independent lanes (exact: max does not round), then its
    # first index: ties go to the lowest partition id.
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
    p = -1
    if top >= 0.0:
        p = 0
        while scores[p] != top:
            p += 1
    return p


@numba.njit(cache=True, inline="always")
def all_choice(vstate, u, v, words, loads, floads, scores, fmax, fmin, caps, args):
    """The best-scoring partition below its cap, or -1 when every partition is at it.

    ``floads`` are the loads relative to the shares (float64), ``fmax`` and ``fmin``
    their extremes, ``caps`` the partitions' edge caps and ``scores`` a scratch array
    of k; ``args`` are the kernel's (:data:`~asepr.pipeline.assign.kernel.KernelArgs`).
    """
    use_partial, beta, lam = args.use_partial, args.beta, args.lam
    gu, gv, pu, pv, scu, scv, hu, hv = edge_terms(vstate, u, v, words, use_partial, beta)
    k = loads.shape[0]
    # The floats of a plain per-partition sum, in the same order: with equal shares
    # float(max - load) equals fmax - floads[q] exactly (integers below 2**53), g * 1.0
    # is g and s + 0.0 is s, so ties, and the assignment, agree with a scalar scan.
    scale = lam / (1.0 + (fmax - fmin))
    for w in range(words):
        bu = vstate[u, w]
        bv = vstate[v, w]
        for q in range(w * 64, min(k, w * 64 + 64)):
            s = scale * (fmax - floads[q])
            s += gu if (bu >> (q & 63)) & 1 else 0.0
            s += gv if (bv >> (q & 63)) & 1 else 0.0
            scores[q] = s if loads[q] < caps[q] else -1.0
    if pu >= 0 and loads[pu] < caps[pu]:
        scores[pu] += scu
    if pv >= 0 and loads[pv] < caps[pv]:
        scores[pv] += scv
    if hu >= 0 and loads[hu] < caps[hu]:
        scores[hu] += beta
    if hv >= 0 and loads[hv] < caps[hv]:
        scores[hv] += beta
    return _first_max(scores, k)
