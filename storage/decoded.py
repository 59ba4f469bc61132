"""Decoded copies of the edge shards, for the passes that stream the edges again.

A partition run reads every edge six to eight times (validation, the clustering and
assignment streams, the fallback's two, masters, metrics). Decoding Parquet (ZSTD,
dictionary pages) is most of a pass's cost once the kernels are fast: 0.57 CPU seconds
per pass over the 20M-edge ``asepr synth`` graph against 0.03 s to read the same
columns back as raw ``int64`` files (``docs/results/scale/micro.md``).
So the validator, which decodes every batch anyway, can write each shard's checked
``src`` and ``dst`` to two raw files (:class:`DecodedWriter`), and the stream reads
those instead (:func:`read_decoded`). A copy is 16 bytes per edge on local disk; the
run removes it when it ends.

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

__all__ = ["DECODED_PREFIX", "DECODED_ROW", "DecodedWriter", "decoded_shards", "read_decoded", "remove_decoded"]

#: Name prefix of a run's decoded-copy directory inside the output directory.
DECODED_PREFIX = ".asepr-decoded-"

_ITEM = np.dtype(np.int64).itemsize
#: Bytes of one edge in a decoded copy (``src`` and ``dst``, ``int64`` each).
DECODED_ROW = 2 * _ITEM


def _paths(directory: str | Path, index: int) -> tuple[str, str]:
    base = Path(directory) / f"edges-{index:05d}"
    return f"{base}.src", f"{base}.dst"


class DecodedWriter:
    """Appends checked edge batches to the raw ``src``/``dst`` files of their shard.

    Batches must arrive in stream order; a shard without rows still gets empty files.
    """

    def __init__(self, directory: str | Path, num_shards: int):
        self.directory = Path(directory)
        self._files: dict[int, tuple[int, int]] = {}
        self._num_shards = num_shards

    def _open(self, index: int) -> tuple[int, int]:
        if index not in self._files:
            flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0)
            self._files[index] = tuple(os.open(p, flags, 0o600) for p in _paths(self.directory, index))
        return self._files[index]

    def add(self, index: int, src: np.ndarray, dst: np.ndarray) -> None:
        """Append one batch of shard ``index``."""
        for fd, column in zip(self._open(index), (src, dst)):
            data = memoryview(np.ascontiguousarray(column, dtype=np.int64)).cast("B")
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
        for path in shard.decoded or ():
            if os.path.lexists(path):
                os.unlink(path)


def decoded_shards(shards: list[Shard], rows: list[int], directory: str | Path) -> list[Shard]:
    """``shards`` with their decoded copies in ``directory`` attached (``Shard.decoded``).

    Raises
    ------
    StoreError
        Naming the file: a copy is missing or its size is not 8 bytes per row.
    """
    out = []
    for index, (shard, count) in enumerate(zip(shards, rows)):
        paths = _paths(directory, index)
        for path in paths:
            size = os.stat(path, follow_symlinks=False).st_size if os.path.lexists(path) else -1
            if size != count * _ITEM:
                raise StoreError(format_problem(
                    f"decoded edge copy {path} (of {shard.url})", f"{count * _ITEM:,} bytes ({count:,} rows)",
                    "no file" if size < 0 else f"{size:,} bytes", "rerun the command: the copy is rewritten."))
        out.append(dataclasses.replace(shard, decoded=paths))
    return out


def read_decoded(shard: Shard, batch_rows: int) -> Iterator[tuple[int, np.ndarray, np.ndarray]]:
    """Yield ``(row0, src, dst)`` batches of ``shard``'s decoded copy."""
    src_path, dst_path = shard.decoded
    with open(src_path, "rb") as fs, open(dst_path, "rb") as fd:
        row0 = 0
        while True:
            src = np.fromfile(fs, dtype=np.int64, count=batch_rows)
            if not len(src):
                return
            dst = np.fromfile(fd, dtype=np.int64, count=len(src))
            if len(dst) != len(src):
                raise StoreError(format_problem(
                    f"decoded edge copy {dst_path} (of {shard.url})", f"{len(src):,} rows from row {row0:,}",
                    f"{len(dst):,}", "rerun the command: the copy is rewritten."))
            yield row0, src, dst
            row0 += len(src)
