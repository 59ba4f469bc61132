"""The hybrid assignment under a memory budget: neighbourhood expansion in memory, streaming for the rest.

As in HEP (Mayer & Jacobsen, SIGMOD 2021), a vertex is *low* when its degree is at most
a threshold; the edges with a low endpoint are *held* in memory and partitioned by
neighbourhood expansion (:mod:`asepr.pipeline.assign.expansion`), and the edges between two
high vertices are streamed through the run's kernel
(:func:`~asepr.pipeline.assign.loop.assign_edges`), which starts from the replicas and loads
the expansion left in the :class:`~asepr.pipeline.assign.state.AssignState`. With
``mixed=False`` only the edges between two low vertices are held, and the kernel streams
those between a low and a high vertex too.

With shares (:mod:`asepr.pipeline.capacity`), partition p's expansion fills up to its share
of the held edges, and the kernel then streams the rest under the partitions' own caps.

Memory *(our choice)*: the threshold is the largest degree whose held subgraph fits
``budget_bytes``, counting every array the hybrid allocates (:func:`held_bytes`, an
upper bound of what :class:`HybridInfo` reports as allocated):

====================  =======================================================================
per vertex            CSR offsets int64, unassigned count int32, boundary mark int16,
                      heap position int32, group int16 (20 bytes)
per low vertex        heap slot int32, group order int32 (8 bytes)
per list entry        neighbour int32, partition int16 (6 bytes; an edge between two low
                      vertices has two entries, one with a high vertex one: <= 12 per edge)
====================  =======================================================================

Budget 0 is exactly the pure streaming assignment (:func:`~asepr.pipeline.assign.loop.stream_assign`);
so is any budget too small to hold one low vertex. The lists are built from the
degrees and one pass over the edge shards (two with ``mixed=False``, whose threshold
needs one more: :func:`choose_threshold`), and a last pass writes the partition of
every edge in stream order to the :class:`~asepr.pipeline.assign.loop.EdgePartSink`: a held
edge's by binary search in its low endpoint's sorted list, a streamed edge's from the
kernel.

Defaults, chosen by measurement (``docs/results/hybrid/``, summarised in
``docs/results/implementation-choices/README.md``): ``mixed=True``, because holding only
the low-low edges replicated more; ``prefer="attr"``, which lowers the RF where the
attributes explain the edges and costs little where they do not.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass

import numpy as np

from asepr.pipeline.assign.expansion import (
    ExpansionState,
    HeldLists,
    build_fill,
    count_lists,
    expand,
    group_order,
    lookup_parts,
    pair_histogram,
    sort_lists,
)
from asepr.pipeline.assign.kernel import TWO_PHASE
from asepr.pipeline.assign.loop import EdgePartSink, assign_edges, stream_assign
from asepr.pipeline.assign.restream import restream_needs
from asepr.pipeline.assign.settings import KernelSettings
from asepr.pipeline.assign.state import FIELDS, HOME, PART, AssignState
from asepr.pipeline.config import PartitionConfig
from asepr.pipeline.planning.needs import Need, RunShape, held_arrays
from asepr.pipeline.stream import iter_edge_batches, warmup_arrays
from asepr.storage.errors import InputError, format_problem
from asepr.storage.locations.fs import Shard
from asepr.storage.resources import stage

__all__ = ["HybridInfo", "assignment_needs", "choose_threshold", "held_bytes", "hybrid_stream_assign"]

log = logging.getLogger(__name__)

#: Bytes per vertex, per low vertex and per list entry of the held subgraph (module docstring).
PER_VERTEX, PER_LOW_VERTEX, PER_ENTRY = 20, 8, 6


@dataclass(frozen=True)
class HybridInfo:
    """What a hybrid assignment held and how long it took.

    Attributes
    ----------
    budget_bytes
        The budget it ran under.
    threshold
        The degree threshold: vertices of degree <= it are low (-1: nothing held).
    low_vertices, held_edges, streamed_edges
        Low vertices (degree > 0), edges with a low endpoint, and the other edges.
    held_bytes
        The bytes of the arrays actually allocated for the held subgraph (<= budget).
    prefer
        What the expansion preferred (``"attr"``, ``"community"``, or ``"none"``).
    build_seconds, expansion_seconds, kernel_seconds
        Building the lists (one edge pass), the expansion, and the streaming kernel.
    """

    budget_bytes: int
    threshold: int
    low_vertices: int
    held_edges: int
    streamed_edges: int
    held_bytes: int
    prefer: str
    build_seconds: float
    expansion_seconds: float
    kernel_seconds: float


def _held_cost(num_nodes, low_vertices, entries, num_parts):
    """The bytes of a held subgraph with at least one low vertex (scalars or arrays)."""
    return PER_VERTEX * num_nodes + 8 + PER_LOW_VERTEX * low_vertices + PER_ENTRY * entries + 16 * (num_parts + 1)


def held_bytes(num_nodes: int, low_vertices: int, entries: int, num_parts: int) -> int:
    """The bytes the hybrid allocates for a held subgraph of this size (module docstring)."""
    return 0 if low_vertices == 0 else int(_held_cost(num_nodes, low_vertices, entries, num_parts))


def choose_threshold(degree: np.ndarray, num_parts: int, budget_bytes: int,
                     pair_hist: np.ndarray | None = None) -> tuple[int, int, int]:
    """The largest degree threshold whose held subgraph fits ``budget_bytes``.

    Returns ``(threshold, low vertices, list entries)``; ``(-1, 0, 0)`` when not even
    the vertices of the smallest degree fit. With ``mixed`` holding (``pair_hist`` None)
    the entries of a threshold t are the sum of the degrees <= t (a low vertex lists all
    its edges); otherwise twice the edges whose larger endpoint degree is <= t
    (``pair_hist``, :func:`~asepr.pipeline.assign.expansion.pair_histogram`).
    """
    counts = np.bincount(degree)
    if len(counts) <= 1:
        return -1, 0, 0
    counts[0] = 0
    low = np.cumsum(counts)
    if pair_hist is None:
        entries = np.cumsum(counts * np.arange(len(counts), dtype=np.int64))
    else:
        entries = 2 * np.cumsum(pair_hist[: len(counts)])
    cost = _held_cost(len(degree), low, entries, num_parts)
    fits = np.flatnonzero((cost <= budget_bytes) & (counts > 0) & (entries > 0))
    if len(fits) == 0:
        return -1, 0, 0
    t = int(fits[-1])
    return t, int(low[t]), int(entries[t])


def _check_args(state: AssignState, edge_shards: list[Shard], degree: np.ndarray, settings: KernelSettings,
                budget_bytes: int) -> None:
    if settings.mode in TWO_PHASE:
        raise InputError(format_problem(
            "hybrid assignment (--memory-budget)", "the asep or hdrf kernel mode",
            f"the two-phase mode {settings.mode}", "run 2ps-l / 2ps-hdrf without --memory-budget."))
    if budget_bytes < 0:
        raise InputError(format_problem("--memory-budget", "a byte count >= 0", str(budget_bytes)))
    if len(degree) != state.vstate.shape[0]:
        raise InputError(format_problem(
            "hybrid assignment", f"one degree per vertex of the state ({state.vstate.shape[0]})",
            f"{len(degree)} degrees", "pass the degrees the state was built with."))
    if len(degree) >= 2**31:
        raise InputError(format_problem(
            "hybrid assignment", "fewer than 2**31 vertices (int32 lists)", f"{len(degree)}",
            "run with --memory-budget 0."))


def _groups(state: AssignState, attr_ids: np.ndarray | None, prefer: str) -> np.ndarray | None:
    """Each vertex's preferred partition for the expansion, or None (no preference).

    ``"attr"``: its attribute cluster's home (a view of the state's HOME column), else
    ``attr_ids % k``; ``"community"``: its community's partition (the PART column).
    """
    k = state.num_parts
    if prefer == "community":
        column = state.vstate[:, state.words + PART]
        return column.astype(np.int16) if (column >= 0).any() else None
    if prefer != "attr":
        return None
    home = state.vstate[:, state.words + HOME]
    if (home >= 0).any():
        return home  # a view of the state's column: no copy
    if attr_ids is None:
        return None
    return (np.asarray(attr_ids, dtype=np.int64) % k).astype(np.int16)


@dataclass
class _Held:
    """The held subgraph: sorted lists of the low vertices and the expansion's scratch."""

    threshold: int
    mixed: bool
    offsets: np.ndarray
    nbr: np.ndarray
    part: np.ndarray
    rem: np.ndarray
    held_edges: int

    @property
    def nbytes(self) -> int:
        return self.offsets.nbytes + self.nbr.nbytes + self.part.nbytes + self.rem.nbytes


def _pair_histogram(edge_shards: list[Shard], degree: np.ndarray, batch_rows: int) -> np.ndarray:
    """One pass: edges per larger endpoint degree (what each threshold would hold, unmixed)."""
    hist = np.zeros(int(degree.max(initial=0)) + 1, dtype=np.int64)
    for batch in iter_edge_batches(edge_shards, batch_rows):
        pair_histogram(batch.src, batch.dst, degree, hist)
    return hist


def _list_lengths(edge_shards: list[Shard], degree: np.ndarray, threshold: int, mixed: bool,
                  batch_rows: int) -> np.ndarray:
    """Entries per vertex (int32): its degree if low (mixed), else one pass counting low neighbours."""
    if mixed:
        length = degree.astype(np.int32)
        length[degree > threshold] = 0
        return length
    length = np.zeros(len(degree), dtype=np.int32)
    for batch in iter_edge_batches(edge_shards, batch_rows):
        count_lists(batch.src, batch.dst, degree, threshold, mixed, length)
    return length


def _build(edge_shards: list[Shard], degree: np.ndarray, threshold: int, mixed: bool, state: AssignState,
           batch_rows: int) -> _Held:
    """The sorted lists of the low vertices (one pass over the edges, two unmixed)."""
    rem = _list_lengths(edge_shards, degree, threshold, mixed, batch_rows)
    offsets = np.zeros(len(degree) + 1, dtype=np.int64)
    np.cumsum(rem, out=offsets[1:])
    nbr = np.empty(int(offsets[-1]), dtype=np.int32)
    pdeg = state.pdeg
    held = 0
    for batch in iter_edge_batches(edge_shards, batch_rows):
        count, bad = build_fill(batch.src, batch.dst, degree, threshold, mixed, offsets, nbr, rem, pdeg)
        held += int(count)
        if bad >= 0:
            raise InputError(format_problem(
                f"edge shard {edge_shards[batch.shard_index]}, row {batch.row0 + bad}",
                "edges matching the degrees the run computed", "more edges at this vertex than its degree",
                "recompute the degrees from these edge shards."))
    if rem.any():
        raise InputError(format_problem(
            "edge shards", "edges matching the degrees the run computed",
            f"{int((rem > 0).sum())} low vertices with fewer edges than their degree",
            "recompute the degrees from these edge shards."))
    sort_lists(offsets, nbr)
    np.subtract(offsets[1:], offsets[:-1], out=rem, casting="unsafe")
    part = np.full(len(nbr), -1, dtype=np.int16)
    return _Held(threshold, mixed, offsets, nbr, part, rem, held)


def _targets(held_edges: int, k: int, shares: tuple[float, ...] | None) -> np.ndarray:
    """``int64[k]``: the held edges each partition's expansion fills up to: an equal
    ``ceil(held / k)`` each, or with shares ``ceil(share_p * held)``."""
    if shares is None:
        return np.full(k, -(-held_edges // k), dtype=np.int64)
    return np.ceil(np.asarray(shares, dtype=np.float64) * held_edges).astype(np.int64)


def _expand(held: _Held, degree: np.ndarray, state: AssignState, groups: np.ndarray | None,
            shares: tuple[float, ...] | None) -> int:
    """Run the expansion into ``state`` (replicas, loads); returns the scratch bytes allocated."""
    k = state.num_parts
    n = len(degree)
    low_vertices = int(np.count_nonzero(held.rem))
    target = _targets(held.held_edges, k, shares)
    in_s = np.full(n, -1, dtype=np.int16)
    heap = np.empty(max(low_vertices, 1), dtype=np.int32)
    pos = np.full(n, -1, dtype=np.int32)
    prefer = groups is not None
    group = groups if prefer else np.full(1, -1, dtype=np.int16)
    own_group = prefer and group.base is None
    order, group_start = (group_order(group, degree, held.threshold, k) if prefer
                          else (np.zeros(0, np.int32), np.zeros(k + 1, np.int64)))
    loads = np.zeros(k, dtype=np.int64)
    expand(HeldLists(held.offsets, held.nbr, held.part, degree, held.threshold),
           ExpansionState(target, loads, state.vstate, held.rem, in_s, heap, pos, group, prefer), order, group_start)
    state.loads += loads
    return in_s.nbytes + heap.nbytes + pos.nbytes + (group.nbytes if own_group else 0) + order.nbytes \
        + group_start.nbytes + loads.nbytes


def _final_pass(held: _Held, edge_shards: list[Shard], degree: np.ndarray, state: AssignState,
                settings: KernelSettings, sink: EdgePartSink, batch_rows: int) -> tuple[int, float]:
    """Write every edge's partition in stream order; returns ``(streamed edges, kernel seconds)``."""
    for empty in warmup_arrays():
        assign_edges(state, empty, empty, np.zeros(0, np.int16), settings)
    streamed = 0
    kernel_seconds = 0.0
    for batch in iter_edge_batches(edge_shards, batch_rows):
        out = np.empty(len(batch.src), dtype=np.int16)
        bad = lookup_parts(batch.src, batch.dst, degree, held.threshold, held.mixed, held.offsets, held.nbr,
                           held.part, out)
        if bad >= 0:
            raise InputError(format_problem(
                f"edge shard {edge_shards[batch.shard_index]}, row {batch.row0 + bad}",
                "the edges of the first pass", "an edge that was not there", "do not modify the input while "
                "it is being partitioned."))
        rest = out < 0
        if rest.any():
            src, dst = batch.src[rest], batch.dst[rest]
            parts = np.empty(len(src), dtype=np.int16)
            t0 = time.perf_counter()
            assign_edges(state, src, dst, parts, settings)
            kernel_seconds += time.perf_counter() - t0
            out[rest] = parts
            streamed += len(src)
        sink.write(batch.shard_index, batch.row0, out)
    sink.finish()
    return streamed, kernel_seconds


def hybrid_stream_assign(state: AssignState, edge_shards: list[Shard], degree: np.ndarray,
                         settings: KernelSettings, sink: EdgePartSink, *, budget_bytes: int,
                         attr_ids: np.ndarray | None = None, batch_rows: int = 1 << 20,
                         prefer: str = "attr", mixed: bool = True) -> HybridInfo:
    """Assign every edge, holding the low-degree subgraph within ``budget_bytes`` (module docstring).

    Parameters
    ----------
    state
        The kernel state (degrees, community and home terms), updated in place.
    edge_shards
        The edge shards, in stream order.
    degree
        Exact degrees (int64[N]), those of ``state``.
    settings
        The run's kernel settings (``asep`` or ``hdrf`` modes; not the two-phase ones).
    sink
        Receives every edge shard's partitions; finished at the end.
    budget_bytes
        The most bytes held for the in-memory part; 0 is pure streaming.
    attr_ids
        Attribute cluster per vertex (None: none); groups the vertices when the state
        has no attribute homes.
    batch_rows
        Rows per edge batch.
    prefer
        What the expansion prefers when it seeds a partition and breaks ties
        (:func:`_groups`): ``"attr"``, ``"community"`` or ``"none"``.
    mixed
        Hold the edges between a low and a high vertex too, as HEP does (else only
        those between two low vertices, and the threshold is chosen from one extra
        pass's histogram).

    Returns
    -------
    HybridInfo

    Raises
    ------
    InputError
        A two-phase mode, a negative budget, or edges that do not match the degrees.
    """
    _check_args(state, edge_shards, degree, settings, budget_bytes)
    degree = np.ascontiguousarray(degree, dtype=np.int64)
    pair_hist = None
    if budget_bytes > 0 and not mixed:
        pair_hist = _pair_histogram(edge_shards, degree, batch_rows)
    threshold, low_vertices, entries = choose_threshold(degree, state.num_parts, budget_bytes, pair_hist)
    del pair_hist
    if budget_bytes == 0 or low_vertices == 0:
        seconds = stream_assign(state, lambda: iter_edge_batches(edge_shards, batch_rows), settings, sink)
        return HybridInfo(budget_bytes, -1, 0, 0, int(degree.sum() // 2), 0, "none", 0.0, 0.0, seconds)
    with stage("hybrid assignment", log) as info:
        t0 = time.perf_counter()
        held = _build(edge_shards, degree, threshold, mixed, state, batch_rows)
        t1 = time.perf_counter()
        groups = _groups(state, attr_ids, prefer)
        scratch = _expand(held, degree, state, groups, settings.shares)
        t2 = time.perf_counter()
        allocated = held.nbytes + scratch
        streamed, kernel_seconds = _final_pass(held, edge_shards, degree, state, settings, sink, batch_rows)
        result = HybridInfo(
            budget_bytes=int(budget_bytes), threshold=threshold, low_vertices=low_vertices,
            held_edges=held.held_edges, streamed_edges=streamed, held_bytes=int(allocated),
            prefer=prefer if groups is not None else "none", build_seconds=t1 - t0, expansion_seconds=t2 - t1,
            kernel_seconds=kernel_seconds,
        )
        info.update(threshold=threshold, held_edges=held.held_edges, streamed_edges=streamed,
                    held_mib=round(allocated / 2**20, 1))
    return result


def assignment_needs(run: PartitionConfig, s: RunShape) -> Need:
    """Memory and disk of the assignment stage: ``AssignState.vstate`` int64[N, stride]
    (stride 8 words up to k = 192: 64 B per node), the steering arrays (16 B per node)
    until it is built, and at the end the contiguous ``replicas`` uint64[N, W]; the
    stream, the ``int16`` output and its bytes, and the hybrid's held subgraph (at most
    ``memory_budget``). Two-phase baselines also write (and remove) a first-phase file."""
    width = s.words + FIELDS
    stride = 8 if width <= 8 else -(-width // 8) * 8
    steering = 16 * s.n if run.uses_communities or run.algo == "metis" else 0
    driver = held_arrays(run, s) + 8 * stride * s.n + max(steering, 8 * s.words * s.n) + s.stream + 4 * s.b
    # The hybrid holds at most its budget beyond this, and at most the whole graph.
    if run.memory_budget > 0:
        driver += min(run.memory_budget, held_bytes(s.n, s.n, 2 * s.e, s.k))
    first_phase = 2 * s.e if run.algo in ("2ps-l", "2ps-hdrf") else 0
    restream = restream_needs(run, s, 8 * stride * s.n)  # ASEP's restreams: their masters, their files
    return Need(driver=max(driver, restream.driver), written=2 * s.e + first_phase + restream.written,
                removed=first_phase + restream.removed)
