"""The streaming-assignment loop, shared by a full run and an incremental ingest.

:func:`stream_assign` feeds the edge batches to the kernel in stream order and hands
each batch's partitions to an :class:`EdgePartSink`, which writes one ``int16`` file
per edge shard (:func:`edge_parts_path`), aligned with the shard's rows. The two-phase
baselines' first phase (:mod:`asepr.pipeline.assign.twophase`) goes to a sink of its own in
the subdirectory ``prepartition`` of the sink's directory, which the second phase reads
back, merges and removes.
"""

from __future__ import annotations

import logging
import shutil
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import replace
from pathlib import Path

import numpy as np

from asepr.pipeline.assign.kernel import MODES, TWO_PHASE, assign_batch
from asepr.pipeline.assign.settings import KernelSettings
from asepr.pipeline.assign.state import AssignState
from asepr.pipeline.stream import EdgeBatch, iter_edge_batches, warmup_arrays
from asepr.storage.inputs.npy import load_npy, save_npy
from asepr.storage.locations.fs import Shard
from asepr.storage.resources import stage

__all__ = ["EdgePartSink", "assign_edges", "edge_parts_path", "iter_assigned", "stream_assign"]

log = logging.getLogger(__name__)


def edge_parts_path(workdir: str | Path, shard_index: int) -> Path:
    """The file of the partitions of edge shard ``shard_index`` (int16 ``.npy``) in ``workdir``."""
    return Path(workdir) / f"edge-parts-{shard_index:05d}.npy"


def iter_assigned(edge_shards: list[Shard], workdir: str | Path, batch_rows: int = 1 << 20,
                  first_shard: int = 0) -> Iterator[tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """Yield ``(src, dst, part)`` batches in stream order, ``part`` read from ``workdir``'s files
    (``first_shard``: the stream index of ``edge_shards[0]``, as in
    :func:`~asepr.pipeline.stream.iter_edge_batches`)."""
    for batch in iter_edge_batches(edge_shards, batch_rows, first_shard=first_shard):
        parts = load_npy(edge_parts_path(workdir, batch.shard_index), mmap_mode="r")
        yield batch.src, batch.dst, np.asarray(parts[batch.row0 : batch.row0 + len(batch.src)])


def assign_edges(state: AssignState, src: np.ndarray, dst: np.ndarray, out: np.ndarray,
                 settings: KernelSettings) -> None:
    """Assign one batch ``(src, dst)`` into ``out`` (:func:`~asepr.pipeline.assign.kernel.assign_batch`)."""
    assign_batch(src, dst, out, state.vstate, state.words, state.loads, settings.kernel_args())


class EdgePartSink:
    """Writes the partitions of each edge shard to :func:`edge_parts_path`, append-only.

    Plain sequential writes, not memmaps: dirty mapped pages would count in the RSS and
    grow with |E|. Batches must arrive in shard and row order; a shard without a batch
    (an empty one) still gets its (empty) file.

    Parameters
    ----------
    workdir
        The directory of the files.
    shard_rows
        The row count of every edge shard, in stream order.
    """

    def __init__(self, workdir: str | Path, shard_rows: list[int]):
        self.workdir = Path(workdir)
        self.shard_rows = shard_rows
        self._index = -1
        self._handle = None
        self._written = 0

    def _save_empty(self, upto: int) -> None:
        for skipped in range(self._index + 1, upto):
            save_npy(edge_parts_path(self.workdir, skipped), np.zeros(0, np.int16))

    def _open(self, index: int) -> None:
        self.close()
        self._save_empty(index)
        self._index = index
        self._handle = open(edge_parts_path(self.workdir, index), "wb")
        header = {"descr": "<i2", "fortran_order": False, "shape": (self.shard_rows[index],)}
        np.lib.format.write_array_header_1_0(self._handle, header)
        self._written = 0

    def write(self, index: int, row0: int, parts: np.ndarray) -> None:
        """Append ``parts``, the partitions of rows ``row0 ..`` of edge shard ``index``."""
        if index != self._index:
            self._open(index)
        if row0 != self._written:
            raise RuntimeError(f"edge shard {index}: batch at row {row0}, expected {self._written}")
        self._handle.write(parts.astype("<i2", copy=False).tobytes())
        self._written += len(parts)

    def close(self) -> None:
        """Close the current file, checking that it holds all of its shard's rows."""
        if self._handle is not None:
            self._handle.close()
            self._handle = None
            if self._written != self.shard_rows[self._index]:
                raise RuntimeError(
                    f"edge shard {self._index}: wrote {self._written} rows, "
                    f"expected {self.shard_rows[self._index]}"
                )

    def finish(self) -> None:
        """Close the last file and write the empty files of the shards after it."""
        self.close()
        self._save_empty(len(self.shard_rows))


def _assign_pass(state: AssignState, batches: Iterable[EdgeBatch], settings: KernelSettings, sink: EdgePartSink,
                 observe: Callable[[EdgeBatch, np.ndarray], None] | None,
                 first_phase: Path | None) -> tuple[int, float]:
    """One pass over ``batches``; returns ``(edges, kernel seconds)``.

    With ``first_phase`` (the first phase's directory), an edge the kernel leaves (-1)
    takes the first phase's partition.
    """
    kernel_seconds = 0.0
    edges = 0
    for batch in batches:
        out = np.empty(len(batch.src), dtype=np.int16)
        t0 = time.perf_counter()
        assign_edges(state, batch.src, batch.dst, out, settings)
        kernel_seconds += time.perf_counter() - t0
        if first_phase is not None:
            earlier = load_npy(edge_parts_path(first_phase, batch.shard_index), mmap_mode="r")
            waiting = out < 0
            out[waiting] = earlier[batch.row0 : batch.row0 + len(out)][waiting]
        edges += len(out)
        sink.write(batch.shard_index, batch.row0, out)
        if observe is not None:
            observe(batch, out)
    sink.finish()
    return edges, kernel_seconds


def stream_assign(
    state: AssignState,
    batches: Callable[[], Iterable[EdgeBatch]],
    settings: KernelSettings,
    sink: EdgePartSink,
    observe: Callable[[EdgeBatch, np.ndarray], None] | None = None,
) -> float:
    """Assign every batch in order, writing the partitions to ``sink``.

    The kernel is compiled (or loaded from numba's cache) before the first batch, so
    the returned time is the kernel's alone.

    Parameters
    ----------
    state
        The kernel state, updated in place.
    batches
        Returns the edge batches in stream order
        (:func:`~asepr.pipeline.stream.iter_edge_batches`); called once per pass (twice
        for the two-phase baselines).
    settings
        The kernel settings (mode, weights, cap).
    sink
        Receives each batch's partitions; finished after the last batch.
    observe
        Called as ``observe(batch, parts)`` after each batch (for statistics).

    Returns
    -------
    float
        Seconds spent in the kernel.
    """
    with stage("assignment", log) as info:
        for empty in warmup_arrays():
            assign_edges(state, empty, empty, np.zeros(0, np.int16), settings)
        first_phase = None
        kernel_seconds = 0.0
        try:
            if settings.mode in TWO_PHASE:
                first_phase = sink.workdir / "prepartition"
                first_phase.mkdir(exist_ok=True)
                prepartition = replace(settings, mode=MODES["prepartition"])
                _, kernel_seconds = _assign_pass(state, batches(), prepartition,
                                                 EdgePartSink(first_phase, sink.shard_rows), None, None)
            edges, seconds = _assign_pass(state, batches(), settings, sink, observe, first_phase)
        finally:
            if first_phase is not None:
                shutil.rmtree(first_phase, ignore_errors=True)
        kernel_seconds += seconds
        info.update(edges=edges, kernel_edges_per_s=int(edges / max(kernel_seconds, 1e-9)))
    return kernel_seconds
