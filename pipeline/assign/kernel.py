"""The assignment kernel: one loop over a batch of edges, one choice per algorithm.

:func:`assign_batch` walks the edges in stream order. Per edge it prefetches the rows
of the edge :data:`~pipeline.prefetch.PREFETCH_DISTANCE` ahead, counts the partial
degrees, asks the mode's choice function for a partition (:mod:`.hashing`,
:mod:`.greedy`, :mod:`.candidates`, :mod:`.hdrf`, :mod:`.twophase`; each inlined
into this loop), falls back to the least-loaded partition when the choice is -1 or at
the cap, and records the load and the replicas. Since ``k * cap >= |E|``, the cap always holds.

The two-phase baselines (:mod:`.twophase`) stream the edges twice: once in mode
``prepartition``, then in their own mode. An edge that a phase leaves to the other
gets -1 in ``out`` and changes no state (its partial degrees are counted in the phase
that assigns it); :func:`~pipeline.assign.loop.stream_assign` merges the two.

numba keys the cache of :func:`assign_batch` by this file alone: after editing one of
the choice modules, clear ``pipeline/assign/__pycache__`` (or touch this file).
"""

from __future__ import annotations

from collections import namedtuple

import numba
import numpy as np

from pipeline.assign.candidates import candidates_choice
from pipeline.assign.greedy import greedy_choice
from pipeline.assign.hashing import dbh_choice, hash_choice
from pipeline.assign.hdrf import all_choice
from pipeline.assign.refs import borrowed, keep_alive
from pipeline.assign.state import PDEG
from pipeline.assign.twophase import WAIT, hdrf_phase_choice, linear_phase_choice, prepartition_choice
from pipeline.prefetch import PREFETCH_DISTANCE, prefetch_write

__all__ = [
    "ALL", "CANDIDATES", "DBH", "GREEDY", "HASH", "MODES", "PREPARTITION", "TWO_PHASE", "TWOPS_HDRF", "TWOPS_L",
    "KernelArgs", "assign_batch",
]

#: The kernel modes by name (the ``mode`` argument of :func:`assign_batch`).
MODES = {"candidates": 0, "all": 1, "hash": 2, "dbh": 3, "greedy": 4, "2ps-l": 5, "2ps-hdrf": 6,
         "prepartition": 7}
CANDIDATES, ALL, HASH, DBH, GREEDY, TWOPS_L, TWOPS_HDRF, PREPARTITION = 0, 1, 2, 3, 4, 5, 6, 7
#: The modes whose edges are streamed twice, the first time in mode PREPARTITION.
TWO_PHASE = (TWOPS_L, TWOPS_HDRF)

#: How :func:`assign_batch` chooses, besides the state: ``mode`` (one of :data:`MODES`),
#: ``use_partial`` (score with partial instead of exact degrees: plain HDRF), ``beta``
#: and ``lam`` (the weights of the attribute-home term, whose homes of -1 never match,
#: and of HDRF's balance term), ``cap`` (the hard per-partition edge cap: a partition at
#: it is never chosen) and ``seed`` (of the hashing modes).
KernelArgs = namedtuple("KernelArgs", ["mode", "use_partial", "beta", "lam", "cap", "seed"])


@numba.njit(cache=True, inline="always")
def _least_loaded(loads):
    best = 0
    for p in range(1, loads.shape[0]):
        if loads[p] < loads[best]:
            best = p
    return best


@numba.njit(cache=True, inline="always")
def _load_extremes(loads):
    """``(max_load, min_load, at_min)``: at_min counts the partitions at the minimum."""
    max_load = loads[0]
    min_load = loads[0]
    for q in range(1, loads.shape[0]):
        max_load = max(max_load, loads[q])
        min_load = min(min_load, loads[q])
    at_min = 0
    for q in range(loads.shape[0]):
        if loads[q] == min_load:
            at_min += 1
    return max_load, min_load, at_min


@numba.njit(cache=True, inline="always")
def _add_load(loads, floads, p, max_load, min_load, at_min):
    """Count one edge on ``p``; returns the new ``(max_load, min_load, at_min)``.

    Loads only grow: the max is tracked directly and the min with the count of
    partitions at it, recomputed only when the last one leaves the min (amortised O(1)).
    """
    if loads[p] == min_load:
        at_min -= 1
        if at_min == 0:
            min_load = loads[p] + 1
            for q in range(loads.shape[0]):
                if q != p and loads[q] < min_load:
                    min_load = loads[q]
            for q in range(loads.shape[0]):
                load_q = loads[q] + 1 if q == p else loads[q]
                if load_q == min_load:
                    at_min += 1
    loads[p] += 1
    floads[p] += 1.0
    if loads[p] > max_load:
        max_load = loads[p]
    return max_load, min_load, at_min


@numba.njit(cache=True, nogil=True)
def assign_batch(src, dst, out, vstate, words, loads, args):
    """Assign ``src[i], dst[i]`` to ``out[i]`` in order, updating the state in place.

    Parameters
    ----------
    src, dst, out
        The batch's endpoints and its output partitions (int16).
    vstate, words, loads
        The packed rows of :class:`~pipeline.assign.state.AssignState`, its number of
        replica words, and the k loads.
    args
        How to choose (:data:`KernelArgs`).
    """
    mode, use_partial, beta, lam, cap, seed = args
    k = loads.shape[0]
    max_load, min_load, at_min = _load_extremes(loads)
    scores_owner = np.empty(k, dtype=np.float64)
    floads_owner = loads.astype(np.float64)
    # The arrays the inlined choice functions take, without per-edge reference counts
    # (pipeline.assign.refs); the two owned here stay alive to the end of the loop.
    vstate = borrowed(vstate)
    loads = borrowed(loads)
    scores = borrowed(scores_owner)
    floads = borrowed(floads_owner)
    n = src.shape[0]
    for i in range(n):
        if i + PREFETCH_DISTANCE < n:
            prefetch_write(vstate, src[i + PREFETCH_DISTANCE])
            prefetch_write(vstate, dst[i + PREFETCH_DISTANCE])
        u = src[i]
        v = dst[i]
        vstate[u, words + PDEG] += 1
        if v != u:
            vstate[v, words + PDEG] += 1
        if mode == HASH:
            p = hash_choice(u, v, k, seed)
        elif mode == DBH:
            p = dbh_choice(vstate, u, v, words, k, seed)
        elif mode == GREEDY:
            p = greedy_choice(vstate, u, v, words, loads, cap)
        elif mode == CANDIDATES:
            p = candidates_choice(vstate, u, v, words, loads, max_load, cap, use_partial, beta)
        elif mode == ALL:
            p = all_choice(vstate, u, v, words, loads, floads, scores, max_load, min_load, args)
        else:
            if mode == PREPARTITION:
                p = prepartition_choice(vstate, u, v, words, loads, cap)
            elif mode == TWOPS_L:
                p = linear_phase_choice(vstate, u, v, words, loads, cap)
            else:
                p = hdrf_phase_choice(vstate, u, v, words, loads, floads, max_load, cap, lam)
            if p == WAIT:
                out[i] = -1
                vstate[u, words + PDEG] -= 1
                if v != u:
                    vstate[v, words + PDEG] -= 1
                continue
        if p < 0 or loads[p] >= cap:
            p = _least_loaded(loads)
        out[i] = p
        max_load, min_load, at_min = _add_load(loads, floads, p, max_load, min_load, at_min)
        word = p >> 6
        bit = np.int64(1) << (p & 63)
        vstate[u, word] |= bit
        vstate[v, word] |= bit
    keep_alive(scores_owner)
    keep_alive(floads_owner)
