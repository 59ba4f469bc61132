"""Decoded copies of the edge shards, for the passes that stream the edges again.

A partition run reads every edge six to eight times (validation, the clustering and
assignment streams, the fallback's two, masters, metrics). Decoding Parquet (ZSTD,
dictionary pages) is most of a pass's cost once the kernels are fast: 0.57 CPU seconds
per pass over the 20M-edge ``asepr synth`` graph against 0.03 s to read the same
columns back as raw ``int64`` files (``docs/results/scale/micro.md``).
So the validator, which decodes every batch anyway, can write each shard's checked
``src`` and ``dst`` to two raw files (:class:`DecodedWriter`), and the stream reads
those instead (:func:`read_decoded`). The ids are stored as ``int32`` while every id
fits (N <= 2**31), else ``int64``, and read back as ``int64``: a copy is 8 (or 16)
bytes per edge on local disk, half of it for the 20M-edge graph the cost of writing
it (the page cache's first touch dominates). The run removes it once the route has
read it.

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

from storage.errors import StoreError, format_problem
from storage.fs import Shard

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
    """Appends checked edge batches to the raw ``src``/``dst`` files of their shard.

    Batches must arrive in stream order; a shard without rows still gets empty files.
    """

    def __init__(self, directory: str | Path, num_shards: int, num_nodes: int):
        self.directory = Path(directory)
        self._files: dict[int, tuple[int, int]] = {}
        self._num_shards = num_shards
        self._dtype = decoded_dtype(num_nodes)

    def _open(self, index: int) -> tuple[int, int]:
        if index not in self._files:
            flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0)
            self._files[index] = tuple(os.open(p, flags, 0o600) for p in _paths(self.directory, index))
        return self._files[index]

    def add(self, index: int, src: np.ndarray, dst: np.ndarray) -> None:
        """Append one batch of shard ``index``."""
        for fd, column in zip(self._open(index), (src, dst)):
            data = memoryview(np.ascontiguousarray(column, dtype=self._dtype)).cast("B")
            while data:
                data = data[os.write(fd, data):]

    def close(self) -> None:
        """Close every file (creating the empty ones of shards without rows)."""
        for index in range(self._num_shards):
            self._open(index)
        for fds in self._files.values():
            for fd in fds:
                os.close(fd)
        self._files = {}


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
    """Yield ``(row0, src, dst)`` batches (``int64``) of ``shard``'s decoded copy."""
    src_path, dst_path, dtype = shard.decoded
    with open(src_path, "rb") as fs, open(dst_path, "rb") as fd:
        row0 = 0
        while True:
            src = np.fromfile(fs, dtype=dtype, count=batch_rows)
            if not len(src):
                return
            dst = np.fromfile(fd, dtype=dtype, count=len(src))
            if len(dst) != len(src):
                raise StoreError(format_problem(
                    f"decoded edge copy {dst_path} (of {shard.url})", f"{len(src):,} rows from row {row0:,}",
                    f"{len(dst):,}", "rerun the command: the copy is rewritten."))
            yield row0, src.astype(np.int64, copy=False), dst.astype(np.int64, copy=False)
            row0 += len(src)
