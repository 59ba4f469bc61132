"""The edge stream: record batches of ``(src, dst)`` in a fixed, reproducible order.

The streaming stages (structural clustering, assignment, masters, metrics) are
sequential by nature. Decoding Parquet is not: a background thread decodes the next
batches while the kernel works on the current one (pyarrow releases the GIL), so the
kernel rarely waits. At most ``prefetch`` batches are in flight, so memory stays
bounded by a few batches.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

from storage.fs import Shard
from storage.input import open_parquet

__all__ = ["EdgeBatch", "iter_edge_batches", "warmup_arrays"]


@dataclass(frozen=True)
class EdgeBatch:
    """A slice of one edge shard: rows ``row0 .. row0 + len(src) - 1`` of ``shard_index``."""

    shard_index: int
    row0: int
    position: int  # global stream position of the first row
    src: np.ndarray
    dst: np.ndarray


def _produce(shards: list[Shard], batch_rows: int) -> Iterator[EdgeBatch]:
    position = 0
    for index, shard in enumerate(shards):
        pf = open_parquet(shard)
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


def iter_edge_batches(
    shards: list[Shard], batch_rows: int = 1 << 20, prefetch: int = 2
) -> Iterator[EdgeBatch]:
    """Yield the edge batches of ``shards`` in stream order, decoded ahead in a thread."""
    if prefetch <= 0:
        yield from _produce(shards, batch_rows)
        return
    slots: queue.Queue = queue.Queue(maxsize=prefetch)
    stop = threading.Event()

    def worker() -> None:
        try:
            for item in _produce(shards, batch_rows):
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
    finally:
        stop.set()
        while thread.is_alive():
            try:
                slots.get_nowait()
            except queue.Empty:
                thread.join(timeout=0.05)
