"""Neighbourhood expansion (NE, Zhang et al. KDD'17, pruned as in HEP) on an in-memory CSR.

The held subgraph of the hybrid mode (:mod:`asepr.pipeline.assign.hybrid`) is a CSR over the
*low* vertices (degree <= the threshold): each low vertex lists every neighbour, sorted,
so an edge between two low vertices appears twice and an edge from a low to a high
vertex once (high vertices have empty lists, as in HEP). Per entry the CSR holds the
neighbour (``int32``) and its partition (``int16``, -1 while unassigned): 6 bytes per
entry, at most 12 per edge. Unmixed (``mixed`` False), only the edges between two low
vertices are held, and the lists name low vertices only.

The expansion fills partitions one after another, partition b up to ``target[b]``
edges (the held edges over k, or with shares ``share_b`` of them). Partition b
keeps a core set C and a boundary set S (``in_s[v] == b``). It moves to C the boundary
vertex with the fewest unassigned edges (a min-heap), or a fresh seed when the boundary
is exhausted; a vertex moved to C pulls all its neighbours into S, and a vertex joining
S takes every unassigned edge to S and to the high vertices (HEP treats high vertices as
if they were in every core, so the edges between a low and a high vertex go with the low
vertex's partition, and a high vertex's list is never needed). An edge is assigned by
both of its entries at once: the reverse entry is found by binary search.

Attribute preference *(our choice)*: each vertex may carry a ``group`` (the home
partition of its attribute cluster, or -1). With ``prefer_attr``, partition b seeds in
its own group first, and among boundary vertices with equally few unassigned edges it
takes one of its group first (docs/results/hybrid measures what it changes).

Edges the expansion leaves (when a partition filled up in the middle of a vertex) go to
the partition with the most endpoint replicas among those below their ``target``, then
the least loaded relative to its target. The replicas are the bitset words of the
:class:`~asepr.pipeline.assign.state.AssignState` rows, updated in place.
"""

from __future__ import annotations

from collections import namedtuple

import numba
import numpy as np

__all__ = [
    "ExpansionState", "HeldLists", "build_fill", "count_lists", "expand", "find_entry", "group_order", "is_held",
    "lookup_parts", "pair_histogram", "sort_lists",
]

#: The held CSR as the expansion reads it: ``offsets`` int64[N+1], ``nbr`` int32 and
#: ``part`` int16 (-1 while unassigned) per entry, the exact ``degree`` and the low
#: ``threshold`` (vertices of degree <= it own a list).
HeldLists = namedtuple("HeldLists", ["offsets", "nbr", "part", "degree", "threshold"])

#: What the expansion fills and its scratch: ``target`` (int64[k], the most held edges
#: of each partition), ``loads`` int64[k], ``vstate`` (the
#: :class:`~asepr.pipeline.assign.state.AssignState` rows, replica words first), ``rem``
#: int32[N] (unassigned entries per vertex), ``in_s`` int16[N] of -1, the boundary
#: ``heap`` int32 and ``pos`` int32[N] of -1, the vertices' ``group`` (int16, -1 none)
#: and ``prefer_attr`` (seed and break ties inside the partition's group).
ExpansionState = namedtuple("ExpansionState", ["target", "loads", "vstate", "rem", "in_s", "heap", "pos", "group",
                                               "prefer_attr"])


@numba.njit(cache=True, inline="always")
def _is_low(degree, threshold, v):
    return degree[v] <= threshold


@numba.njit(cache=True)
def find_entry(offsets, nbr, part, x, y, skip, assigned):
    """The first entry of ``y`` in ``x``'s sorted list other than ``skip``, or -1.

    It is the first unassigned one (``part == -1``), or with ``assigned`` the first
    assigned and not yet looked up (``part >= 0``).
    """
    a = offsets[x]
    b = offsets[x + 1]
    hi = b
    while a < b:
        m = (a + b) >> 1
        if nbr[m] < y:
            a = m + 1
        else:
            b = m
    while a < hi and nbr[a] == y:
        if a != skip and ((part[a] >= 0) if assigned else (part[a] == -1)):
            return a
        a += 1
    return -1


@numba.njit(cache=True, inline="always")
def is_held(degree, threshold, mixed, u, v):
    """Whether edge (u, v) is held: both endpoints low, or (``mixed``, as HEP) either."""
    low_u = degree[u] <= threshold
    low_v = degree[v] <= threshold
    return (low_u and low_v) or (mixed and (low_u or low_v))


@numba.njit(cache=True)
def pair_histogram(src, dst, degree, hist):
    """``hist[m] += 1`` per edge, ``m`` the larger endpoint degree (the smallest threshold holding it)."""
    for i in range(src.shape[0]):
        hist[max(degree[src[i]], degree[dst[i]])] += 1


@numba.njit(cache=True)
def count_lists(src, dst, degree, threshold, mixed, length):
    """``length[v] +=`` the list entries of v for the held edges of a batch."""
    for i in range(src.shape[0]):
        u = src[i]
        v = dst[i]
        if is_held(degree, threshold, mixed, u, v):
            if degree[u] <= threshold:
                length[u] += 1
            if degree[v] <= threshold:
                length[v] += 1


@numba.njit(cache=True)
def build_fill(src, dst, degree, threshold, mixed, offsets, nbr, rem, pdeg):
    """Append the held edges of a batch to the lists; returns ``(held edges, overflow row)``.

    ``rem[v]`` counts down the free slots of v's list (its length in): an edge beyond
    it means the edges changed since the lists were sized, and its row is returned (-1
    when none) before anything is written out of bounds. A self-loop of a low vertex is
    listed twice (its degree counts it twice). ``pdeg`` counts the held edges as the
    kernel counts partial degrees.
    """
    held = 0
    for i in range(src.shape[0]):
        u = src[i]
        v = dst[i]
        if not is_held(degree, threshold, mixed, u, v):
            continue
        low_u = degree[u] <= threshold
        low_v = degree[v] <= threshold
        need_u = (2 if u == v else 1) if low_u else 0
        if (low_u and rem[u] < need_u) or (low_v and u != v and rem[v] < 1):
            return held, i
        if low_u:
            nbr[offsets[u + 1] - rem[u]] = v
            rem[u] -= 1
        if low_v:
            nbr[offsets[v + 1] - rem[v]] = u
            rem[v] -= 1
        pdeg[u] += 1
        if v != u:
            pdeg[v] += 1
        held += 1
    return held, -1


@numba.njit(cache=True)
def group_order(group, degree, threshold, k):
    """The low vertices with a group in ``[0, k)``, sorted by group (int32), and each group's start."""
    start = np.zeros(k + 1, dtype=np.int64)
    for v in range(group.shape[0]):
        g = group[v]
        if g >= 0 and g < k and degree[v] > 0 and degree[v] <= threshold:
            start[g + 1] += 1
    for g in range(k):
        start[g + 1] += start[g]
    order = np.empty(start[k], dtype=np.int32)
    fill = start[:k].copy()
    for v in range(group.shape[0]):
        g = group[v]
        if g >= 0 and g < k and degree[v] > 0 and degree[v] <= threshold:
            order[fill[g]] = v
            fill[g] += 1
    return order, start


@numba.njit(cache=True)
def sort_lists(offsets, nbr):
    """Sort every vertex's neighbour list in place."""
    for v in range(offsets.shape[0] - 1):
        if offsets[v + 1] - offsets[v] > 1:
            nbr[offsets[v] : offsets[v + 1]].sort()


# --- the heap of boundary vertices, keyed by (unassigned edges, not of the group) ----------


@numba.njit(cache=True, inline="always")
def _key(v, b, rem, group, prefer_attr):
    k = np.int64(rem[v]) * 2
    if prefer_attr and group[v] != b:
        k += 1
    return k


@numba.njit(cache=True)
def _sift_up(heap, pos, i, b, rem, group, prefer_attr):
    v = heap[i]
    kv = _key(v, b, rem, group, prefer_attr)
    while i > 0:
        parent = (i - 1) >> 1
        w = heap[parent]
        if _key(w, b, rem, group, prefer_attr) <= kv:
            break
        heap[i] = w
        pos[w] = i
        i = parent
    heap[i] = v
    pos[v] = i


@numba.njit(cache=True, inline="always")
def _sift_down(heap, pos, i, v, n, b, rem, group, prefer_attr):
    """Place ``v`` at slot ``i`` of the heap's first ``n`` slots and move it down to its place."""
    kv = _key(v, b, rem, group, prefer_attr)
    while True:
        c = 2 * i + 1
        if c >= n:
            break
        kc = _key(heap[c], b, rem, group, prefer_attr)
        if c + 1 < n:
            k2 = _key(heap[c + 1], b, rem, group, prefer_attr)
            if k2 < kc:
                c += 1
                kc = k2
        if kv <= kc:
            break
        heap[i] = heap[c]
        pos[heap[i]] = i
        i = c
    heap[i] = v
    pos[v] = i


@numba.njit(cache=True)
def _pop(heap, pos, size, b, rem, group, prefer_attr):
    """Remove and return the minimum; the caller decrements ``size``."""
    top = heap[0]
    pos[top] = -1
    size -= 1
    if size == 0:
        return top
    _sift_down(heap, pos, 0, heap[size], size, b, rem, group, prefer_attr)
    return top


# --- assigning edges ---------------------------------------------------------------------------


@numba.njit(cache=True, inline="always")
def _set_replica(vstate, x, p):
    vstate[x, p >> 6] |= np.int64(1) << (p & 63)


@numba.njit(cache=True)
def _assign(e, x, b, lists, st, prefer_attr):
    """Assign entry ``e`` of low vertex ``x`` (and its reverse entry) to partition ``b``."""
    part, rem, heap, pos, group = lists.part, st.rem, st.heap, st.pos, st.group
    y = lists.nbr[e]
    part[e] = b
    rem[x] -= 1
    if _is_low(lists.degree, lists.threshold, y):
        r = find_entry(lists.offsets, lists.nbr, part, y, x, e, False)
        part[r] = b
        rem[y] -= 1
        if pos[y] >= 0:
            _sift_up(heap, pos, pos[y], b, rem, group, prefer_attr)
    if pos[x] >= 0:
        _sift_up(heap, pos, pos[x], b, rem, group, prefer_attr)
    st.loads[b] += 1
    _set_replica(st.vstate, x, b)
    _set_replica(st.vstate, y, b)


@numba.njit(cache=True)
def _add_boundary(v, b, size, lists, st):
    """Put ``v`` into S of partition ``b``; assign its edges to S and to high vertices. Returns the heap size."""
    in_s, rem, heap, pos = st.in_s, st.rem, st.heap, st.pos
    if in_s[v] == b:
        return size
    in_s[v] = b
    if not _is_low(lists.degree, lists.threshold, v):
        return size
    if rem[v] > 0 and pos[v] < 0:
        heap[size] = v
        pos[v] = size
        size += 1
        _sift_up(heap, pos, size - 1, b, rem, st.group, st.prefer_attr)
    for e in range(lists.offsets[v], lists.offsets[v + 1]):
        if rem[v] == 0 or st.loads[b] >= st.target[b]:
            break
        if lists.part[e] >= 0:
            continue
        u = lists.nbr[e]
        if in_s[u] == b or not _is_low(lists.degree, lists.threshold, u):
            _assign(e, v, b, lists, st, st.prefer_attr)
    return size


@numba.njit(cache=True)
def _next_seed(cursor, order, rem, b, group_start, group_cursor, prefer_attr):
    """A low vertex with unassigned edges (its group first with ``prefer_attr``), or -1."""
    if prefer_attr:
        i = group_cursor[b]
        while i < group_start[b + 1] and rem[order[i]] == 0:
            i += 1
        group_cursor[b] = i
        if i < group_start[b + 1]:
            return order[i]
    v = cursor[0]
    n = rem.shape[0]
    while v < n and rem[v] == 0:
        v += 1
    cursor[0] = v
    return v if v < n else -1


@numba.njit(cache=True)
def _leftovers(lists, st):
    """Assign the entries the expansion left: most endpoint replicas below ``target``, then least
    load relative to the target."""
    rem, vstate, loads, target = st.rem, st.vstate, st.loads, st.target
    k = loads.shape[0]
    for x in range(rem.shape[0]):
        if rem[x] == 0:
            continue
        for e in range(lists.offsets[x], lists.offsets[x + 1]):
            if lists.part[e] >= 0:
                continue
            y = lists.nbr[e]
            best = -1
            best_score = -1
            for p in range(k):
                if loads[p] >= target[p]:
                    continue
                s = 0
                s += 2 * k if (vstate[x, p >> 6] >> (p & 63)) & 1 else 0
                s += 2 * k if (vstate[y, p >> 6] >> (p & 63)) & 1 else 0
                s += k - 1 - min(k - 1, np.int64(loads[p] * k // max(target[p], 1)))
                if s > best_score:
                    best_score = s
                    best = p
            if best < 0:
                best = 0
                for p in range(1, k):  # every partition at its target: the least relatively loaded
                    if np.float64(loads[p]) / max(target[p], 1) < np.float64(loads[best]) / max(target[best], 1):
                        best = p
            _assign(e, x, best, lists, st, False)


@numba.njit(cache=True)
def expand(lists, st, order, group_start):
    """Partition the held entries by neighbourhood expansion (see the module docstring).

    Parameters
    ----------
    lists
        The held CSR (:data:`HeldLists`; ``part`` initialised to -1, filled in).
    st
        The :data:`ExpansionState`: ``target`` sums to >= the held edges; ``loads`` zeros in,
        the held edges per partition out; ``rem`` each vertex's list length in; the
        replica words of ``vstate`` updated in place.
    order, group_start
        The low vertices sorted by group, and the start of each group's run in
        ``order`` (int64[k+1]).
    """
    offsets, nbr, part = lists.offsets, lists.nbr, lists.part
    loads, rem, heap, pos, group, prefer_attr, target = st.loads, st.rem, st.heap, st.pos, st.group, \
        st.prefer_attr, st.target
    k = loads.shape[0]
    cursor = np.zeros(1, dtype=np.int64)
    group_cursor = group_start[:k].copy()
    for b in range(k):
        size = 0
        while loads[b] < target[b]:
            if size == 0:
                x = _next_seed(cursor, order, rem, b, group_start, group_cursor, prefer_attr)
                if x < 0:
                    break
            else:
                x = _pop(heap, pos, size, b, rem, group, prefer_attr)
                size -= 1
                if rem[x] == 0:
                    continue
            size = _add_boundary(x, b, size, lists, st)
            if pos[x] >= 0:  # x moves to the core: out of the boundary heap
                _remove(heap, pos, size, x, b, rem, group, prefer_attr)
                size -= 1
            for e in range(offsets[x], offsets[x + 1]):
                if loads[b] >= target[b]:
                    break
                if part[e] < 0:
                    size = _add_boundary(nbr[e], b, size, lists, st)
        for i in range(size):
            pos[heap[i]] = -1
        if cursor[0] >= rem.shape[0]:
            break
    _leftovers(lists, st)


@numba.njit(cache=True)
def _remove(heap, pos, size, v, b, rem, group, prefer_attr):
    """Remove ``v`` from the heap (the caller decrements ``size``)."""
    i = pos[v]
    pos[v] = -1
    last = heap[size - 1]
    if i == size - 1:
        return
    heap[i] = last
    pos[last] = i
    # Move ``last`` up or down from i.
    _sift_up(heap, pos, i, b, rem, group, prefer_attr)
    _sift_down(heap, pos, pos[last], last, size - 1, b, rem, group, prefer_attr)


@numba.njit(cache=True)
def lookup_parts(src, dst, degree, threshold, mixed, offsets, nbr, part, out):
    """Write the partition of every held edge of a batch into ``out``, -1 for the others.

    Returns the first row whose entry is missing (the edges changed since the lists
    were built), or -1.

    Each lookup consumes one entry of the low endpoint's list (the smaller id when both
    are low; ``part`` becomes ``-2 - part``), so the copies of a duplicated edge get the
    partitions of its entries once each; a self-loop consumes its two entries.
    """
    for i in range(src.shape[0]):
        u = src[i]
        v = dst[i]
        if not is_held(degree, threshold, mixed, u, v):
            out[i] = -1
            continue
        low_u = degree[u] <= threshold
        low_v = degree[v] <= threshold
        # The same side for every copy of an edge, whichever way it is stored.
        if not low_u or (low_v and v < u):
            u, v = v, u
        e = find_entry(offsets, nbr, part, u, v, -1, True)
        if e < 0:
            return i
        p = part[e]
        out[i] = p
        part[e] = -2 - p
        if u == v:
            a = offsets[u]
            while not (nbr[a] == u and part[a] == p):
                a += 1
            part[a] = -2 - p
    return -1
