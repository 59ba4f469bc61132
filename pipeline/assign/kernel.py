"""The assignment kernel: one loop over a batch of edges, one choice per algorithm.

:func:`assign_batch` walks the edges in stream order. Per edge it prefetches the rows
of the edge :data:`~asepr.pipeline.kernels.prefetch.PREFETCH_DISTANCE` ahead, counts the partial
degrees, asks the mode's choice function for a partition (:mod:`.hashing`,
:mod:`.greedy`, :mod:`.candidates`, :mod:`.hdrf`, :mod:`.twophase`; each inlined
into this loop), falls back to the least-loaded partition when the choice is -1 or at
its cap, and records the load and the replicas. Since the caps sum to at least |E|,
they always hold.

Each partition has its own cap, and loads are compared relative to the partitions'
shares: the kernel keeps ``floads[p] = loads[p] * weight[p]`` beside the loads, with
``weight[p] = 1 / (k * share_p)`` (:mod:`asepr.pipeline.capacity`), and every "least loaded"
and every balance term reads ``floads``. With equal shares the weights are exactly 1.0,
``floads`` equals the loads, and every comparison and score is the one of the integer
loads, so the assignment is the same.

With shares, partitions also have a floor *(our choice)*: the cap bounds a load from
above only, and with three partitions at ``1 + eps`` times their share the fourth gets
what is left, which is a machine idle for a share of every round. So once the edges
still to come are no more than the floors' total deficit (``floors``: ``(1 - eps)``
times each share of |E|, ``total``: |E| counted over every pass and generation, so
``total - sum(loads)`` are the edges to come), each edge goes to a partition below its
floor: one that holds replicas of both endpoints, else of one, else the least
relatively loaded. Equal shares have no floors: their assignment is the one-sided
cap's, unchanged.

The two-phase baselines (:mod:`.twophase`) stream the edges twice: once in mode
``prepartition``, then in their own mode. An edge that a phase leaves to the other
gets -1 in ``out`` and changes no state (its partial degrees are counted in the phase
that assigns it); :func:`~asepr.pipeline.assign.loop.stream_assign` merges the two.

numba keys the cache of :func:`assign_batch` by this file alone: after editing one of
the choice modules, clear ``pipeline/assign/__pycache__`` (or touch this file).
"""

from __future__ import annotations

from collections import namedtuple

import numba
import numpy as np

from asepr.pipeline.assign.candidates import candidates_choice
from asepr.pipeline.assign.greedy import greedy_choice
from asepr.pipeline.assign.hashing import dbh_choice, hash_choice
from asepr.pipeline.assign.hdrf import all_choice
from asepr.pipeline.assign.refs import borrowed, keep_alive
from asepr.pipeline.assign.state import PART, PDEG, has_replica
from asepr.pipeline.assign.twophase import WAIT, hdrf_phase_choice, linear_phase_choice, prepartition_choice
from asepr.pipeline.kernels.prefetch import PREFETCH_DISTANCE, prefetch_write

__all__ = [
    "ALL", "ALL_PHASE", "CANDIDATES", "DBH", "GREEDY", "HASH", "MODES", "PREPARTITION", "TWO_PHASE", "TWOPS_HDRF", "TWOPS_L",
    "KernelArgs", "assign_batch",
]

#: The kernel modes by name (the ``mode`` argument of :func:`assign_batch`).
MODES = {"candidates": 0, "all": 1, "hash": 2, "dbh": 3, "greedy": 4, "2ps-l": 5, "2ps-hdrf": 6,
         "prepartition": 7, "all-phase": 8}
CANDIDATES, ALL, HASH, DBH, GREEDY, TWOPS_L, TWOPS_HDRF, PREPARTITION, ALL_PHASE = 0, 1, 2, 3, 4, 5, 6, 7, 8
#: The modes whose edges are streamed twice, the first time in mode PREPARTITION.
TWO_PHASE = (TWOPS_L, TWOPS_HDRF, ALL_PHASE)

#: How :func:`assign_batch` chooses, besides the state: ``mode`` (one of :data:`MODES`),
#: ``use_partial`` (score with partial instead of exact degrees: plain HDRF), ``beta``
#: and ``lam`` (the weights of the attribute-home term, whose homes of -1 never match,
#: and of HDRF's balance term), ``cap`` (the hard edge cap of every partition: a
#: partition at it is never chosen), ``seed`` (of the hashing modes), and with shares
#: (:mod:`asepr.pipeline.capacity`) ``caps`` (int64[k], each partition's own cap, in place of
#: ``cap``), ``weight`` (float64[k], :func:`~asepr.pipeline.capacity.load_weights`) and
#: ``bounds`` (uint64[k], :func:`~asepr.pipeline.capacity.hash_bounds`), ``floors`` (int64[k],
#: :func:`~asepr.pipeline.capacity.edge_floors`) and ``total`` (the edges the floors are of).
#: Left empty (the default), they are equal shares: ``cap`` for each, weights of 1.0,
#: hashing mod k, no floors.
KernelArgs = namedtuple("KernelArgs", ["mode", "use_partial", "beta", "lam", "cap", "seed", "caps", "weight",
                                       "bounds", "floors", "total"],
                        defaults=(np.zeros(0, np.int64), np.zeros(0, np.float64), np.zeros(0, np.uint64),
                                  np.zeros(0, np.int64), 0))


@numba.njit(cache=True, inline="always")
def _least_loaded(loads, floads, caps):
    """The least relatively loaded partition (first on ties); one below its cap if it is at its own."""
    best = 0
    for p in range(1, loads.shape[0]):
        if floads[p] < floads[best]:
            best = p
    if loads[best] >= caps[best]:
        # Only with shares: rounded caps can leave the relative minimum at its cap.
        for p in range(loads.shape[0]):
            if loads[p] < caps[p] and (loads[best] >= caps[best] or floads[p] < floads[best]):
                best = p
    return best


@numba.njit(cache=True, inline="always")
def _below_floor(vstate, u, v, loads, floads, floors):
    """Among the partitions below their floor, one holding most of the endpoints' replicas
    (both, one, none), then the least relatively loaded (first on ties)."""
    best = -1
    best_held = -1
    for p in range(loads.shape[0]):
        if loads[p] >= floors[p]:
            continue
        held = (1 if has_replica(vstate, u, p) else 0) + (1 if has_replica(vstate, v, p) else 0)
        if held > best_held or (held == best_held and floads[p] < floads[best]):
            best = p
            best_held = held
    return best


@numba.njit(cache=True, inline="always")
def _load_extremes(floads):
    """``(max, min, at_min)`` of the relative loads: at_min counts the partitions at the minimum."""
    fmax = floads[0]
    fmin = floads[0]
    for q in range(1, floads.shape[0]):
        fmax = max(fmax, floads[q])
        fmin = min(fmin, floads[q])
    at_min = 0
    for q in range(floads.shape[0]):
        if floads[q] == fmin:
            at_min += 1
    return fmax, fmin, at_min


@numba.njit(cache=True, inline="always")
def _add_load(loads, floads, weight, p, fmax, fmin, at_min):
    """Count one edge on ``p``; returns the new ``(fmax, fmin, at_min)`` of the relative loads.

    Loads only grow: the max is tracked directly and the min with the count of
    partitions at it, recomputed only when the last one leaves the min (amortised O(1)
    for equal shares, where ties are common).
    """
    grown = np.float64(loads[p] + 1) * weight[p]
    if floads[p] == fmin:
        at_min -= 1
        if at_min == 0:
            fmin = grown
            for q in range(loads.shape[0]):
                if q != p and floads[q] < fmin:
                    fmin = floads[q]
            for q in range(loads.shape[0]):
                load_q = grown if q == p else floads[q]
                if load_q == fmin:
                    at_min += 1
    loads[p] += 1
    floads[p] = grown
    if grown > fmax:
        fmax = grown
    return fmax, fmin, at_min


@numba.njit(cache=True, nogil=True)
def assign_batch(src, dst, out, vstate, words, loads, args):
    """Assign ``src[i], dst[i]`` to ``out[i]`` in order, updating the state in place.

    Parameters
    ----------
    src, dst, out
        The batch's endpoints and its output partitions (int16).
    vstate, words, loads
        The packed rows of :class:`~asepr.pipeline.assign.state.AssignState`, its number of
        replica words, and the k loads.
    args
        How to choose (:data:`KernelArgs`).
    """
    mode, use_partial, beta, lam, cap, seed, caps_arg, weight_arg, bounds, floors_arg, total = args
    k = loads.shape[0]
    caps_owner = caps_arg.copy() if caps_arg.shape[0] == k else np.full(k, cap, dtype=np.int64)
    weight_owner = weight_arg.copy() if weight_arg.shape[0] == k else np.ones(k, dtype=np.float64)
    floors_owner = floors_arg.copy() if floors_arg.shape[0] == k else np.zeros(k, dtype=np.int64)
    # Edges assigned so far and the floors' deficit (0 without floors: never forced).
    assigned = np.int64(0)
    deficit = np.int64(0)
    for q in range(k):
        assigned += loads[q]
        deficit += max(np.int64(0), floors_owner[q] - loads[q])
    scores_owner = np.empty(k, dtype=np.float64)
    floads_owner = loads.astype(np.float64) * weight_owner
    fmax, fmin, at_min = _load_extremes(floads_owner)
    # The arrays the inlined choice functions take, without per-edge reference counts
    # (asepr.pipeline.assign.refs); the ones owned here stay alive to the end of the loop.
    vstate = borrowed(vstate)
    loads = borrowed(loads)
    scores = borrowed(scores_owner)
    floads = borrowed(floads_owner)
    caps = borrowed(caps_owner)
    weight = borrowed(weight_owner)
    floors = borrowed(floors_owner)
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
            p = hash_choice(u, v, k, seed, bounds)
        elif mode == DBH:
            p = dbh_choice(vstate, u, v, words, k, seed, bounds)
        elif mode == GREEDY:
            p = greedy_choice(vstate, u, v, words, loads, floads, caps)
        elif mode == CANDIDATES:
            p = candidates_choice(vstate, u, v, words, loads, floads, fmax, caps, use_partial, beta)
        elif mode == ALL:
            p = all_choice(vstate, u, v, words, loads, floads, scores, fmax, fmin, caps, args)
        else:
            if mode == PREPARTITION:
                p = prepartition_choice(vstate, u, v, words, loads, caps, bounds)
            elif mode == TWOPS_L:
                p = linear_phase_choice(vstate, u, v, words, loads, caps, bounds)
            elif mode == ALL_PHASE:
                # ASEP's all-k scoring of the edges the pre-partitioning left.
                if vstate[u, words + PART] == vstate[v, words + PART]:
                    p = WAIT
                else:
                    p = all_choice(vstate, u, v, words, loads, floads, scores, fmax, fmin, caps, args)
            else:
                p = hdrf_phase_choice(vstate, u, v, words, loads, floads, fmax, caps, lam)
            if p == WAIT:
                out[i] = -1
                vstate[u, words + PDEG] -= 1
                if v != u:
                    vstate[v, words + PDEG] -= 1
                continue
        if deficit > 0 and deficit >= total - assigned:
            p = _below_floor(vstate, u, v, loads, floads, floors)
        elif p < 0 or loads[p] >= caps[p]:
            p = _least_loaded(loads, floads, caps)
        if loads[p] < floors[p]:
            deficit -= 1
        assigned += 1
        out[i] = p
        fmax, fmin, at_min = _add_load(loads, floads, weight, p, fmax, fmin, at_min)
        word = p >> 6
        bit = np.int64(1) << (p & 63)
        vstate[u, word] |= bit
        vstate[v, word] |= bit
    keep_alive(scores_owner)
    keep_alive(floads_owner)
    keep_alive(caps_owner)
    keep_alive(weight_owner)
    keep_alive(floors_owner)
