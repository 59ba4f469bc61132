"""The edge stream: record batches of ``(src, dst)`` in a fixed, reproducible order.

The streaming stages (structural clustering, assignment, masters, metrics) are
sequential by nature. Decoding Parquet is not: a background thread decodes the next
batches while the kernel works on the current one (pyarrow releases the GIL), so the
kernel rarely waits. At most ``prefetch`` batches are in flight, so memory stays
bounded by a few batches.
"""

from __future__ import annotations

import os
import queue
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TypeVar

import numpy as np

from asepr.storage.inputs.decoded import read_decoded
from asepr.storage.inputs.directory import open_parquet
from asepr.storage.locations.fs import Shard
from asepr.storage.progress import Bar, NoBar, carried, current

__all__ = ["EdgeBatch", "iter_edge_batches", "map_shard_ranges", "shard_ranges", "stream_ways", "warmup_arrays"]


@dataclass(frozen=True)
class EdgeBatch:
    """A slice of one edge shard: rows ``row0 .. row0 + len(src) - 1`` of ``shard_index``."""

    shard_index: int
    row0: int
    position: int  # global stream position of the first row
    src: np.ndarray
    dst: np.ndarray


def _decoded_rows(shard: Shard) -> int:
    return os.stat(shard.decoded[0]).st_size // np.dtype(shard.decoded[2]).itemsize


def _produce(shards: list[Shard], batch_rows: int, first_shard: int = 0,
             bar: Bar | None = None) -> Iterator[EdgeBatch]:
    """The batches; the rows they hold are announced to ``bar`` (the consumer's stage):
    all at once for decoded copies (a stat each), else as each shard's footer is read."""
    bar = bar or NoBar()
    position = 0
    every_decoded = all(shard.decoded is not None for shard in shards)
    if every_decoded:
        bar.expect(sum(_decoded_rows(shard) for shard in shards))
    for index, shard in enumerate(shards, start=first_shard):
        if shard.decoded is not None:  # the validator's raw copy (asepr.storage.inputs.decoded)
            if not every_decoded:
                bar.expect(_decoded_rows(shard))
            for row0, src, dst in read_decoded(shard, batch_rows):
                yield EdgeBatch(index, row0, position, src, dst)
                position += len(src)
            continue
        pf = open_parquet(shard)
        bar.expect(pf.metadata.num_rows)
        row0 = 0
        for batch in pf.iter_batches(batch_size=batch_rows, columns=["src", "dst"]):
            src = batch.column("src").to_numpy()
            dst = batch.column("dst").to_numpy()
            yield EdgeBatch(index, row0, position, src, dst)
            row0 += len(src)
            position += len(src)


def warmup_arrays() -> tuple[np.ndarray, np.ndarray]:
    """Zero-length int64 arrays, one writable and one read-only.

    Batches decoded from Parquet are read-only views of Arrow buffers, and numba
    compiles a separate specialisation for read-only arrays. Calling a kernel on both
    of these compiles (or loads from numba's cache) every variant it will meet, so
    none of that lands inside a timed loop.
    """
    writable = np.zeros(0, dtype=np.int64)
    readonly = np.zeros(0, dtype=np.int64)
    readonly.flags.writeable = False
    return writable, readonly


_DONE = object()
T = TypeVar("T")


def iter_edge_batches(
    shards: list[Shard], batch_rows: int = 1 << 20, prefetch: int = 2, first_shard: int = 0
) -> Iterator[EdgeBatch]:
    """Yield the edge batches of ``shards`` in stream order, decoded ahead in a thread.

    ``first_shard`` is the index of ``shards[0]`` in the whole stream (a range of it,
    :func:`shard_ranges`): the batches' ``shard_index`` count from there, their
    ``position`` from the range's start. The rows are counted into the progress of the
    stage that consumes them (:mod:`asepr.storage.progress`) as they are handed over.
    """
    bar = current()
    if prefetch <= 0:
        for item in _produce(shards, batch_rows, first_shard, bar):
            yield item
            bar.update(len(item.src))
        return
    slots: queue.Queue = queue.Queue(maxsize=prefetch)
    stop = threading.Event()

    def worker() -> None:
        try:
            for item in _produce(shards, batch_rows, first_shard, bar):
                while not stop.is_set():
                    try:
                        slots.put(item, timeout=0.1)
                        break
                    except queue.Full:
                        continue
                if stop.is_set():
                    return
            slots.put(_DONE)
        except BaseException as exc:  # handed to the consumer, which re-raises it
            slots.put(exc)

    thread = threading.Thread(target=worker, name="asepr-edge-decoder", daemon=True)
    thread.start()
    try:
        while True:
            item = slots.get()
            if item is _DONE:
                return
            if isinstance(item, BaseException):
                raise item
            yield item
            bar.update(len(item.src))
    finally:
        stop.set()
        while thread.is_alive():
            try:
                slots.get_nowait()
            except queue.Empty:
                thread.join(timeout=0.05)


def stream_ways() -> int:
    """Threads that share an order-free pass over the edges (a count, a sum): one per
    core, at most 4."""
    return max(1, min(4, os.cpu_count() or 1))


def shard_ranges(shards: list[Shard], ways: int) -> list[range]:
    """At most ``ways`` contiguous, non-empty ranges of shard indices covering ``shards``,
    with about equal rows each (whole shards: one shard is never split)."""
    if not shards:
        return []
    rows = np.array([open_parquet(s).metadata.num_rows for s in shards], dtype=np.int64)
    total = int(rows.sum())
    ways = max(1, min(int(ways), len(shards)))
    # Cut after the shard whose cumulative rows first reach each multiple of total/ways.
    ends = np.cumsum(rows)
    cuts = sorted({int(np.searchsorted(ends, total * w / ways)) + 1 for w in range(1, ways)} | {len(shards)})
    ranges, start = [], 0
    for stop in cuts:
        stop = min(stop, len(shards))
        if stop > start:
            ranges.append(range(start, stop))
            start = stop
    return ranges


def map_shard_ranges(shards: list[Shard], fn: Callable[[range], T], ways: int | None = None) -> list[T]:
    """``fn(r)`` for each range of :func:`shard_ranges` (``ways`` default
    :func:`stream_ways`), on one thread per range; the results in stream order.

    For passes whose result does not depend on the order of the edges (counts, sums),
    with kernels that release the GIL. Every thread is finished before an error
    propagates.
    """
    ranges = shard_ranges(shards, stream_ways() if ways is None else ways)
    if len(ranges) <= 1:
        return [fn(r) for r in ranges]
    bar = current()  # the threads count into the calling stage's progress

    def counted(r: range) -> T:
        with carried(bar):
            return fn(r)

    with ThreadPoolExecutor(max_workers=len(ranges), thread_name_prefix="asepr-stream-range") as pool:
        futures = [pool.submit(counted, r) for r in ranges]
        return [f.result() for f in futures]
