"""Decoded copies of the edge shards, for the passes that stream the edges again.

A partition run reads every edge six to eight times (validation, the clustering and
assignment streams, the fallback's two, masters, metrics). Decoding Parquet (ZSTD,
dictionary pages) is most of a pass's cost once the kernels are fast, and reading the
same columns back from raw files costs a small fraction of it
(``docs/results/implementation-choices/README.md``).
So the validator, which decodes every batch anyway, can write each shard's checked
``src`` and ``dst`` to two raw files (:class:`DecodedWriter`), and the stream reads
those instead (:func:`read_decoded`). The ids are stored as ``int32`` while every id
fits (N <= 2**31), else ``int64``, and read back as ``int64``: a copy is 8 (or 16)
bytes per edge on local disk, written and read back with ``O_DIRECT`` where the
filesystem takes it (:mod:`asepr.storage.locations.direct_io`: through the page cache, writing the
20M-edge graph's copy cost as much again as decoding it, all of it the first touch of
fresh pages). The run removes it once the route has read it.

The files are written by this process into a directory it created, opened with
``O_EXCL | O_NOFOLLOW``, and their sizes are checked against the shard's rows before
they are read.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Iterator
from pathlib import Path

import numpy as np

from asepr.storage.errors import StoreError, format_problem
from asepr.storage.locations.direct_io import ALIGN, DirectWriter, aligned_empty, open_direct, pread_into
from asepr.storage.locations.fs import Shard

__all__ = ["DECODED_PREFIX", "DecodedWriter", "decoded_dtype", "decoded_row", "decoded_shards", "read_decoded",
           "remove_decoded"]

#: Name prefix of a run's decoded-copy directory inside the output directory.
DECODED_PREFIX = ".asepr-decoded-"


def decoded_dtype(num_nodes: int) -> np.dtype:
    """The id type of a decoded copy: ``int32`` while every id ``< N`` fits, else ``int64``."""
    return np.dtype(np.int32 if num_nodes <= 2**31 else np.int64)


def decoded_row(num_nodes: int) -> int:
    """Bytes of one edge in a decoded copy (``src`` and ``dst``)."""
    return 2 * decoded_dtype(num_nodes).itemsize


def _paths(directory: str | Path, index: int) -> tuple[str, str]:
    base = Path(directory) / f"edges-{index:05d}"
    return f"{base}.src", f"{base}.dst"


class DecodedWriter:
    """Appends checked edge batches to the raw ``src``/``dst`` files of their shard,
    with ``O_DIRECT`` where the filesystem takes it (:mod:`asepr.storage.locations.direct_io`).

    Batches must arrive in stream order (a shard's files are finished when the next
    shard's first batch comes); a shard without rows still gets empty files.
    """

    def __init__(self, directory: str | Path, num_shards: int, num_nodes: int):
        self.directory = Path(directory)
        self._num_shards = num_shards
        self._dtype = decoded_dtype(num_nodes)
        self._index = -1  # the shard being written
        self._open: list[tuple[int, DirectWriter]] = []

    def _finish(self) -> None:
        for fd, writer in self._open:
            try:
                writer.close()
            finally:
                os.close(fd)
        self._open = []

    def _start(self, index: int) -> None:
        """Finish the files of the shards before ``index`` (empty ones for those without
        rows) and open ``index``'s."""
        if index < self._index:
            raise ValueError(f"edge batches out of stream order: shard {index} after shard {self._index}")
        while self._index < index:
            self._finish()
            self._index += 1
            for path in _paths(self.directory, self._index):
                fd, direct = open_direct(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL)
                self._open.append((fd, DirectWriter(fd, direct)))

    def add(self, index: int, src: np.ndarray, dst: np.ndarray) -> None:
        """Append one batch of shard ``index``."""
        self._start(index)
        for (_, writer), column in zip(self._open, (src, dst)):
            writer.write(np.asarray(column, dtype=self._dtype))

    def close(self) -> None:
        """Finish every file (creating the empty ones of shards without rows)."""
        self._start(self._num_shards - 1)
        self._finish()


def remove_decoded(shards: list[Shard]) -> None:
    """Delete the decoded copies attached to ``shards`` (other files stay)."""
    for shard in shards:
        for path in (shard.decoded or ())[:2]:
            if os.path.lexists(path):
                os.unlink(path)


def decoded_shards(shards: list[Shard], rows: list[int], directory: str | Path, num_nodes: int) -> list[Shard]:
    """``shards`` with their decoded copies in ``directory`` attached (``Shard.decoded``:
    the two paths and the id type, :func:`decoded_dtype` of ``num_nodes``).

    Raises
    ------
    StoreError
        Naming the file: a copy is missing or its size is not the one of its rows.
    """
    dtype = decoded_dtype(num_nodes)
    out = []
    for index, (shard, count) in enumerate(zip(shards, rows)):
        paths = _paths(directory, index)
        for path in paths:
            size = os.stat(path, follow_symlinks=False).st_size if os.path.lexists(path) else -1
            if size != count * dtype.itemsize:
                raise StoreError(format_problem(
                    f"decoded edge copy {path} (of {shard.url})",
                    f"{count * dtype.itemsize:,} bytes ({count:,} rows of {dtype.name})",
                    "no file" if size < 0 else f"{size:,} bytes", "rerun the command: the copy is rewritten."))
        out.append(dataclasses.replace(shard, decoded=(*paths, dtype.name)))
    return out


def read_decoded(shard: Shard, batch_rows: int) -> Iterator[tuple[int, np.ndarray, np.ndarray]]:
    """Yield ``(row0, src, dst)`` batches (new ``int64`` arrays) of ``shard``'s decoded
    copy, read with ``O_DIRECT`` where the filesystem takes it into two reused buffers."""
    src_path, dst_path, dtype = shard.decoded
    dtype = np.dtype(dtype)
    size = os.stat(src_path, follow_symlinks=False).st_size
    step = batch_rows * dtype.itemsize
    fds: list[int] = []
    try:
        for path in (src_path, dst_path):
            fds.append(open_direct(path, os.O_RDONLY)[0])
        scratch = [aligned_empty(step + 2 * ALIGN) for _ in fds]
        for offset in range(0, size, step):
            want = min(step, size - offset)
            src, dst = (pread_into(fd, offset, want, buffer) for fd, buffer in zip(fds, scratch))
            if len(src) != want or len(dst) != want:
                path, got = (src_path, len(src)) if len(src) != want else (dst_path, len(dst))
                raise StoreError(format_problem(
                    f"decoded edge copy {path} (of {shard.url})", f"{want:,} bytes from byte {offset:,}",
                    f"{got:,}", "rerun the command: the copy is rewritten."))
            yield (offset // dtype.itemsize, src.view(dtype).astype(np.int64),
                   dst.view(dtype).astype(np.int64))
    finally:
        for fd in fds:
            os.close(fd)
