"""W parallel assignment streams with periodic merges, simulated in one process.

The assignment (stage ⑥) is one sequential stream whose O(|V|) state must fit one
process. The way past one machine is W streams, each assigning its share of the edges
against its own copy of the state, the copies merged now and then. This module
simulates that faithfully, to measure what the staleness costs before anyone builds it.

The model
---------
* **Shares.** The edge stream (the shards in stream order) is cut into W contiguous
  row ranges of near-equal size, ``[floor(w|E|/W), floor((w+1)|E|/W))`` for stream w.
  A worker of a real Dask mode reads exactly that: the shards (or, inside a shard,
  the row groups) of its range, in order (:func:`stream_shares`, :func:`iter_share`).
* **Epochs.** Every stream assigns ``epoch_edges`` (B) edges of its share per sync
  epoch, with the unchanged kernel (:func:`~asepr.pipeline.assign.kernel.assign_batch`) on
  its own copy of the packed rows and of the k loads. Inside an epoch a stream sees
  its own edges only: the others' are invisible until the merge (a stale view). The
  streams' epochs run in lock-step; the order of the streams inside one epoch does not
  matter, since none reads another's copy.
* **Merge.** After each epoch: replica bitsets OR-ed, the streams' load deltas and
  partial-degree deltas summed into the global state, then every copy reset to it.
  The kernel writes nothing else in the one-pass modes (the degrees, the community
  and home columns are read only), so the merge touches only the replica words and
  the partial degree of the vertices the epoch's edges touched (O(W·B) per merge).
* **Traffic.** What the merges would move, per merge: *full*, each stream sends its
  whole bitset (``N·ceil(k/64)·8`` bytes) and k load counters (plus ``8N`` of partial
  degrees where the mode reads them), and receives the merged ones; *sparse*, each
  stream sends ``(vertex id, word)`` pairs (16 bytes) for the replica words it changed,
  ``(vertex id, delta)`` pairs for the partial degrees (again only where the mode reads
  them) and its k loads, and receives the merged changes in the same form.

W = 1 is the sequential assignment exactly: the kernel's result does not depend on
where the stream is cut into batches, and merging one copy is copying it back.

The two-phase baselines (``2ps-l``, ``2ps-hdrf``) stream the edges twice and are not
simulated. The simulation keeps ``W + 1`` copies of the packed rows (64 bytes per
vertex each up to k = 192), an accumulator of ``8N(ceil(k/64)+3)`` bytes, and per
stream one epoch of edges: O(|V|·W + W·B), never all edges.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numba
import numpy as np

from asepr.pipeline.assign.kernel import GREEDY, TWO_PHASE, assign_batch
from asepr.pipeline.assign.settings import KernelSettings
from asepr.pipeline.assign.state import PDEG, AssignState
from asepr.pipeline.kernels.prefetch import aligned_zeros
from asepr.pipeline.stages.mapping import vertex_terms
from asepr.pipeline.stream import EdgeBatch, warmup_arrays
from asepr.storage.errors import InputError, format_problem
from asepr.storage.inputs.directory import open_parquet
from asepr.storage.locations.fs import Shard

if TYPE_CHECKING:
    from asepr.pipeline.partition import Assignment

__all__ = [
    "MergeTraffic",
    "ParallelResult",
    "ShareSlice",
    "iter_epochs",
    "iter_share",
    "replay_state",
    "simulate_parallel_streams",
    "stream_shares",
]

#: Bytes of one sparse update entry: a vertex id and a 64-bit word (or count).
SPARSE_ENTRY = 16


# --- the shares -------------------------------------------------------------------------------


@dataclass(frozen=True)
class ShareSlice:
    """Rows ``row_start .. row_stop - 1`` of edge shard ``shard_index``, part of one stream's share."""

    shard_index: int
    row_start: int
    row_stop: int


def stream_shares(shard_rows: list[int], num_streams: int) -> list[list[ShareSlice]]:
    """Cut the edge stream into ``num_streams`` contiguous row ranges of near-equal size.

    Parameters
    ----------
    shard_rows
        The row count of every edge shard, in stream order.
    num_streams
        W >= 1.

    Returns
    -------
    list of list of ShareSlice
        Per stream, its slices in stream order (empty for a stream past the last row).
    """
    if num_streams < 1:
        raise InputError(format_problem("parallel streams", "W >= 1 streams", repr(num_streams),
                                        "pass --parallel-streams 1 or more."))
    total = int(sum(shard_rows))
    bounds = [total * w // num_streams for w in range(num_streams + 1)]
    offsets = np.concatenate([[0], np.cumsum(shard_rows, dtype=np.int64)])
    shares: list[list[ShareSlice]] = []
    for w in range(num_streams):
        lo, hi = bounds[w], bounds[w + 1]
        share = []
        for index, rows in enumerate(shard_rows):
            start, stop = max(lo, int(offsets[index])), min(hi, int(offsets[index]) + int(rows))
            if start < stop:
                share.append(ShareSlice(index, start - int(offsets[index]), stop - int(offsets[index])))
        shares.append(share)
    return shares


def iter_share(edge_shards: list[Shard], share: list[ShareSlice], batch_rows: int = 1 << 20) -> Iterator[EdgeBatch]:
    """Yield the edge batches of one stream's share, in stream order.

    Only the shards of the share are opened; inside a shard, the batches before
    ``row_start`` are decoded and dropped (a real worker would skip whole row groups).
    ``EdgeBatch.position`` is the row inside the share.
    """
    position = 0
    for piece in share:
        pf = open_parquet(edge_shards[piece.shard_index])
        row0 = 0
        for batch in pf.iter_batches(batch_size=batch_rows, columns=["src", "dst"]):
            rows = batch.num_rows
            lo, hi = max(piece.row_start, row0), min(piece.row_stop, row0 + rows)
            if lo < hi:
                src = batch.column("src").to_numpy()[lo - row0 : hi - row0]
                dst = batch.column("dst").to_numpy()[lo - row0 : hi - row0]
                yield EdgeBatch(piece.shard_index, lo, position, src, dst)
                position += hi - lo
            row0 += rows
            if row0 >= piece.row_stop:
                break


def iter_epochs(batches: Iterator[EdgeBatch], epoch_edges: int) -> Iterator[list[EdgeBatch]]:
    """Regroup ``batches`` into epochs of ``epoch_edges`` edges (the last may be shorter).

    A batch that straddles an epoch boundary is sliced; no edge is copied.
    """
    if epoch_edges < 1:
        raise InputError(format_problem("parallel streams", "a sync epoch B >= 1 edges", repr(epoch_edges),
                                        "pass --sync-edges 1 or more."))
    epoch: list[EdgeBatch] = []
    room = epoch_edges
    for batch in batches:
        start = 0
        n = len(batch.src)
        while start < n:
            take = min(room, n - start)
            epoch.append(EdgeBatch(batch.shard_index, batch.row0 + start, batch.position + start,
                                   batch.src[start : start + take], batch.dst[start : start + take]))
            start += take
            room -= take
            if room == 0:
                yield epoch
                epoch, room = [], epoch_edges
    if epoch:
        yield epoch


# --- the state a replay starts from -----------------------------------------------------------


def replay_state(assignment: Assignment) -> tuple[AssignState, KernelSettings]:
    """A fresh kernel state and the settings of the assignment stage of ``assignment``.

    The per-vertex terms are rebuilt exactly as :func:`asepr.pipeline.partition.partition`
    built them (community partition and volume, attribute home), from the degrees,
    communities, mapping and attribute clusters the run kept.

    Raises
    ------
    InputError
        The run's algorithm streams twice (``2ps-l``, ``2ps-hdrf``, or ``asep`` whose
        two-phase fallback won) or uses METIS (its membership is not kept).
    """
    run = assignment.config
    settings = assignment.kernel
    if settings is None or settings.mode in TWO_PHASE or run.algo == "metis":
        raise InputError(format_problem(
            f"parallel streams of algorithm {run.algo!r}", "a one-pass streaming algorithm with kernel settings",
            run.algo, "simulate asep (with two_phase_fallback=False), hdrf, greedy, dbh or hash."))
    vertex_part = vertex_volume = vertex_home = None
    if assignment.communities is not None and assignment.mapping is not None:
        attr_ids = (np.ascontiguousarray(assignment.attr.attr_cluster_id, dtype=np.int32)
                    if run.uses_attributes else None)
        vertex_part, vertex_volume, vertex_home = vertex_terms(
            assignment.mapping, assignment.communities.community_id, assignment.communities.volume, attr_ids)
    state = AssignState(run.num_parts, assignment.degree, vertex_part, vertex_volume, vertex_home)
    return state, settings


# --- the merge --------------------------------------------------------------------------------


@numba.njit(cache=True)
def _collect(gstate, copies, ends, offsets, words, pcol, acc, stamp, seen, touched, tag):
    """Per stream, the changed replica words and partial degrees of its touched vertices.

    Adds each stream's changes into ``acc`` (``words`` OR-ed delta words, then the
    partial-degree delta) and lists every touched vertex once in ``touched``. Returns
    ``(touched count, changed words summed over streams, (stream, vertex) pairs)``.
    """
    num_touched = 0
    changed = 0
    pairs = 0
    for w in range(copies.shape[0]):
        mark = tag * copies.shape[0] + w + 1
        for i in range(offsets[w], offsets[w + 1]):
            x = ends[i]
            if stamp[x] == mark:
                continue
            stamp[x] = mark
            pairs += 1
            if seen[x] != tag + 1:
                seen[x] = tag + 1
                touched[num_touched] = x
                num_touched += 1
            for j in range(words):
                delta = copies[w, x, j] ^ gstate[x, j]
                if delta != 0:
                    changed += 1
                    acc[x, j] |= delta
            acc[x, words] += copies[w, x, pcol] - gstate[x, pcol]
    return num_touched, changed, pairs


@numba.njit(cache=True)
def _apply(gstate, copies, acc, touched, num_touched, words, pcol):
    """Fold ``acc`` into the global rows and reset every copy's touched rows to them.

    Returns the number of replica words the merge changed (the merged delta).
    """
    changed = 0
    for t in range(num_touched):
        x = touched[t]
        for j in range(words):
            if acc[x, j] != 0:
                changed += 1
                gstate[x, j] |= acc[x, j]
                acc[x, j] = 0
        gstate[x, pcol] += acc[x, words]
        acc[x, words] = 0
        for w in range(copies.shape[0]):
            for j in range(words):
                copies[w, x, j] = gstate[x, j]
            copies[w, x, pcol] = gstate[x, pcol]
    return changed


@dataclass
class MergeTraffic:
    """What the merges of one run would move, counted as the module docstring defines.

    Attributes
    ----------
    merges
        Merges with at least one stream active (after every epoch, the last included).
    full_bytes
        Full bitsets: every stream sends its state and receives the merged one, per merge.
    sparse_up_bytes, sparse_down_bytes
        Sparse updates: what the streams send (their own changes) and receive (the
        merged changes, each stream the whole of them), summed over merges.
    changed_words_up, changed_words_down
        Replica words changed, summed over streams and merges (up) and merged (down).
    touched_vertices
        Distinct vertices per merge, summed over merges.
    """

    merges: int = 0
    full_bytes: int = 0
    sparse_up_bytes: int = 0
    sparse_down_bytes: int = 0
    changed_words_up: int = 0
    changed_words_down: int = 0
    touched_vertices: int = 0

    @property
    def sparse_bytes(self) -> int:
        return self.sparse_up_bytes + self.sparse_down_bytes


@dataclass
class ParallelResult:
    """The merged state after every stream finished, and what the merges cost.

    Attributes
    ----------
    num_streams, epoch_edges
        W and B.
    replicas
        The merged A(v) bitsets, uint64 ``[N, ceil(k/64)]``.
    loads
        The merged loads (edges per partition).
    cap
        The kernel's cap ``ceil((1 + epsilon)|E|/k)``; each stream enforces it on its own view.
    epochs
        Lock-step epochs (the longest share's, in B).
    traffic
        :class:`MergeTraffic`.
    kernel_seconds, critical_seconds
        Kernel time summed over streams, and summed over epochs of the slowest stream
        of each (what W concurrent streams would take); wall clock, load-sensitive.
    merge_seconds
        Time of the merges in this process (wall clock).
    share_edges
        Edges per stream.
    """

    num_streams: int
    epoch_edges: int
    replicas: np.ndarray
    loads: np.ndarray
    cap: int
    epochs: int
    traffic: MergeTraffic
    kernel_seconds: float = 0.0
    critical_seconds: float = 0.0
    merge_seconds: float = 0.0
    share_edges: list[int] = field(default_factory=list)

    @property
    def replication_factor(self) -> float:
        """``Σ_p |V_p| / |V_non-isolated|`` of the merged bitsets."""
        counts = np.bitwise_count(self.replicas).sum(axis=1, dtype=np.int64)
        non_isolated = int(np.count_nonzero(counts))
        return float(counts.sum() / non_isolated) if non_isolated else 1.0

    @property
    def edge_balance(self) -> float:
        """max load / mean load."""
        mean = self.loads.mean() if len(self.loads) else 0.0
        return float(self.loads.max() / mean) if mean > 0 else 1.0

    @property
    def over_cap(self) -> int:
        """Edges the fullest partition holds past the cap (0 when the cap held)."""
        return max(0, int(self.loads.max()) - self.cap)


# --- the simulation ---------------------------------------------------------------------------


class _Streams:
    """The W copies of the state, their epoch buffers and the merge scratch."""

    def __init__(self, state: AssignState, num_streams: int):
        self.state = state
        n, stride = state.vstate.shape
        self.copies = aligned_zeros((num_streams, n, stride), np.int64)
        self.copies[:] = state.vstate[None]
        self.loads = np.repeat(state.loads[None], num_streams, axis=0)
        self.acc = np.zeros((n, state.words + 1), dtype=np.int64)
        self.stamp = np.zeros(n, dtype=np.int64)
        self.seen = np.zeros(n, dtype=np.int64)
        self.pcol = state.words + PDEG

    def merge(self, ends: np.ndarray, offsets: np.ndarray, tag: int) -> tuple[int, int, int, int]:
        """Merge one epoch; returns ``(touched, changed words up, (stream, vertex) pairs, changed words down)``."""
        touched = np.empty(len(ends), dtype=np.int64)
        num_touched, up, pairs = _collect(self.state.vstate, self.copies, ends, offsets, self.state.words,
                                          self.pcol, self.acc, self.stamp, self.seen, touched, tag)
        down = _apply(self.state.vstate, self.copies, self.acc, touched, num_touched, self.state.words, self.pcol)
        self.state.loads += (self.loads - self.state.loads[None]).sum(axis=0)
        self.loads[:] = self.state.loads[None]
        return num_touched, up, pairs, down


def _count_traffic(traffic: MergeTraffic, *, streams: int, num_nodes: int, words: int, k: int, with_pdeg: bool,
                   touched: int, up: int, pairs: int, down: int) -> None:
    """Add one merge's bytes (see the module docstring)."""
    loads = k * 8
    full_state = num_nodes * words * 8 + loads + (num_nodes * 8 if with_pdeg else 0)
    traffic.merges += 1
    traffic.full_bytes += 2 * streams * full_state
    traffic.sparse_up_bytes += SPARSE_ENTRY * (up + (pairs if with_pdeg else 0)) + streams * loads
    traffic.sparse_down_bytes += streams * (SPARSE_ENTRY * (down + (touched if with_pdeg else 0)) + loads)
    traffic.changed_words_up += up
    traffic.changed_words_down += down
    traffic.touched_vertices += touched


def simulate_parallel_streams(
    edge_shards: list[Shard],
    state: AssignState,
    settings: KernelSettings,
    num_streams: int,
    epoch_edges: int,
    *,
    batch_rows: int = 1 << 20,
    observe: Callable[[int, EdgeBatch, np.ndarray], None] | None = None,
) -> ParallelResult:
    """Assign every edge with W streams merged every B edges per stream.

    Parameters
    ----------
    edge_shards
        The edge shards in stream order.
    state
        The global state to start from (:func:`replay_state`); it ends as the merged state.
    settings
        The kernel settings (mode, weights, cap) every stream runs with.
    num_streams, epoch_edges
        W and B.
    batch_rows
        Rows per Parquet batch read.
    observe
        Called as ``observe(stream, piece, parts)`` for every assigned piece of a share.

    Returns
    -------
    ParallelResult
    """
    if settings.mode in TWO_PHASE:
        raise InputError(format_problem("parallel streams", "a one-pass kernel mode", f"mode {settings.mode}",
                                        "simulate asep, hdrf, greedy, dbh or hash."))
    shard_rows = [open_parquet(s).metadata.num_rows for s in edge_shards]
    shares = stream_shares(shard_rows, num_streams)
    for empty in warmup_arrays():
        assign_batch(empty, empty, np.zeros(0, np.int16), state.vstate, state.words, state.loads,
                     settings.kernel_args())
    streams = _Streams(state, num_streams)
    epochs = [iter_epochs(iter_share(edge_shards, share, batch_rows), epoch_edges) for share in shares]
    with_pdeg = bool(settings.use_partial or settings.mode == GREEDY)
    result = ParallelResult(num_streams=num_streams, epoch_edges=epoch_edges, replicas=np.zeros((0, 1), np.uint64),
                            loads=state.loads, cap=settings.cap, epochs=0, traffic=MergeTraffic(),
                            share_edges=[sum(p.row_stop - p.row_start for p in share) for share in shares])
    while True:
        ends, offsets, slowest = [], [0], 0.0
        for w in range(num_streams):
            pieces = next(epochs[w], [])
            t0 = time.perf_counter()
            for piece in pieces:
                out = np.empty(len(piece.src), dtype=np.int16)
                assign_batch(piece.src, piece.dst, out, streams.copies[w], state.words, streams.loads[w],
                             settings.kernel_args())
                ends += [piece.src, piece.dst]
                if observe is not None:
                    observe(w, piece, out)
            seconds = time.perf_counter() - t0
            result.kernel_seconds += seconds
            slowest = max(slowest, seconds)
            offsets.append(sum(len(e) for e in ends))
        if offsets[-1] == 0:
            break
        t0 = time.perf_counter()
        flat = np.concatenate(ends).astype(np.int64, copy=False)
        touched, up, pairs, down = streams.merge(flat, np.asarray(offsets, dtype=np.int64), result.epochs)
        result.merge_seconds += time.perf_counter() - t0
        _count_traffic(result.traffic, streams=num_streams, num_nodes=len(state.vstate), words=state.words,
                       k=state.num_parts, with_pdeg=with_pdeg, touched=touched, up=up, pairs=pairs, down=down)
        result.critical_seconds += slowest
        result.epochs += 1
    result.replicas = state.replicas
    result.loads = state.loads.copy()
    return result
