"""Exact, out-of-core detection of duplicate edges.

Holding every edge key in memory is O(|E|), which the pipeline must never do. Instead,
each edge's key is hashed into one of ``B`` spill files (``B = ceil(|E| / bucket_rows)``)
together with its global stream position. Every bucket is then sorted on its own, so
memory is O(bucket_rows), and duplicates are found exactly: all occurrences of a key
but the first in stream order are duplicates.

The spill files each have exactly one writer (this process) and live in a private
temporary directory that is removed on :meth:`EdgeDedup.close`.
"""

from __future__ import annotations

import math
import os
import shutil
import tempfile
from collections.abc import Iterator

import numpy as np

from asepr.storage.errors import InputError, format_problem
from asepr.storage.inputs.npy import write_array

__all__ = ["EdgeDedup", "edge_keys"]

_MAX_NODES = 1 << 32
MAX_BUCKETS = 512
_MIX = np.uint64(0x9E3779B97F4A7C15)


def edge_keys(src: np.ndarray, dst: np.ndarray, undirected: bool) -> np.ndarray:
    """One uint64 key per edge; ``(u, v)`` and ``(v, u)`` share a key when undirected."""
    src = src.astype(np.uint64, copy=False)
    dst = dst.astype(np.uint64, copy=False)
    if undirected:
        src, dst = np.minimum(src, dst), np.maximum(src, dst)
    return (src << np.uint64(32)) | dst


class EdgeDedup:
    """Counts (and locates) duplicate edges of a stream with bounded memory.

    Parameters
    ----------
    num_nodes
        Node count; ids must lie in ``[0, num_nodes)`` (checked by the caller).
    num_edges
        Total edge rows that will be added (from Parquet metadata), to size the buckets.
    undirected
        Treat ``(u, v)`` and ``(v, u)`` as the same edge.
    bucket_rows
        Target rows per bucket: the peak memory is about ``40 * bucket_rows`` bytes.
    spill_dir
        Parent directory for the spill files (default: the system temp directory).
    """

    def __init__(
        self,
        num_nodes: int,
        num_edges: int,
        *,
        undirected: bool,
        bucket_rows: int = 1 << 21,
        spill_dir: str | None = None,
    ):
        if num_nodes > _MAX_NODES:
            raise InputError(
                format_problem(
                    "duplicate-edge check",
                    f"at most {_MAX_NODES} nodes",
                    f"{num_nodes} nodes",
                    "disable the duplicate check (--no-duplicate-check).",
                )
            )
        self.undirected = undirected
        # At most MAX_BUCKETS open files; past ~1B edges buckets grow instead (memory
        # about 40 bytes per row of the largest bucket).
        self.num_buckets = min(MAX_BUCKETS, max(1, math.ceil(num_edges / max(1, bucket_rows))))
        self._dir = tempfile.mkdtemp(prefix="asepr-dedup-", dir=spill_dir)
        self._files = []
        self._finished = False
        try:
            for b in range(self.num_buckets):
                self._files.append(open(os.path.join(self._dir, f"bucket-{b:05d}.bin"), "wb"))
        except BaseException:
            self.close()
            raise

    def add(self, src: np.ndarray, dst: np.ndarray, position: np.ndarray) -> None:
        """Spill a batch of edges with their global stream positions."""
        keys = edge_keys(src, dst, self.undirected)
        rows = np.empty(len(keys), dtype=[("key", "<u8"), ("pos", "<i8")])
        rows["key"] = keys
        rows["pos"] = position
        if self.num_buckets == 1:
            write_array(self._files[0], rows)
            return
        bucket = ((keys * _MIX) >> np.uint64(40)) % np.uint64(self.num_buckets)
        order = np.argsort(bucket, kind="stable")
        bucket = bucket[order]
        rows = rows[order]
        bounds = np.searchsorted(bucket, np.arange(self.num_buckets + 1, dtype=np.uint64))
        for b in range(self.num_buckets):
            lo, hi = bounds[b], bounds[b + 1]
            if hi > lo:
                write_array(self._files[b], rows[lo:hi])

    def _finish_writes(self) -> None:
        if not self._finished:
            for fh in self._files:
                fh.close()
            self._finished = True

    def duplicate_positions(self) -> Iterator[np.ndarray]:
        """Per bucket, the sorted stream positions of the duplicates (not first occurrences)."""
        self._finish_writes()
        for b in range(self.num_buckets):
            rows = np.fromfile(
                os.path.join(self._dir, f"bucket-{b:05d}.bin"), dtype=[("key", "<u8"), ("pos", "<i8")]
            )
            if len(rows) < 2:
                continue
            order = np.lexsort((rows["pos"], rows["key"]))
            keys = rows["key"][order]
            pos = rows["pos"][order]
            dup = np.flatnonzero(keys[1:] == keys[:-1]) + 1
            if len(dup):
                yield np.sort(pos[dup])

    def count(self) -> int:
        """Number of duplicate edge rows (every occurrence after the first)."""
        return int(sum(len(p) for p in self.duplicate_positions()))

    def close(self) -> None:
        self._finish_writes()
        shutil.rmtree(self._dir, ignore_errors=True)

    def __enter__(self) -> "EdgeDedup":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
