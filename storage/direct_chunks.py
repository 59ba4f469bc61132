"""Raw Zarr chunks written with ``O_DIRECT``, past the page cache.

Writing a new file through the page cache can cost far more than the copy: each fresh
page is zeroed (and, on a virtual machine, faulted in from the host) before the data
lands in it; the measurements are in ``docs/results/implementation-choices/README.md``
(writes past the page cache). A partition's node features are most
of the bytes a run writes and are not read back by it, so an uncompressed array's
chunks go straight to the device.

Only what Zarr itself would write is written: for an array with no codec but the
little-endian bytes codec, a chunk file is the chunk's raw bytes, the edge chunk padded
with the fill value (0) to the full chunk shape, under the default chunk key encoding
(``c/<i>/0`` for whole-row chunks). ``O_DIRECT`` needs the buffer, the length and the
file offset aligned to the device's block; the buffer is an aligned scratch array and
the length a whole chunk, so :func:`direct_chunks` offers a writer only when a chunk is
a multiple of :data:`ALIGN` bytes and the filesystem accepts the flag (tmpfs and other
systems do not: the caller then lets Zarr write).
"""

from __future__ import annotations

import os
import threading
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

import numpy as np
import zarr

from storage.direct_io import ALIGN, aligned_empty, open_direct, write_at

__all__ = ["DirectChunkWriter", "direct_chunks"]


#: Threads that write chunk files for every :class:`DirectChunkWriter` of the process.
IO_THREADS = 2
_io_pool: ThreadPoolExecutor | None = None
_io_lock = threading.Lock()


def _io() -> ThreadPoolExecutor:
    global _io_pool
    with _io_lock:
        if _io_pool is None:
            _io_pool = ThreadPoolExecutor(max_workers=IO_THREADS, thread_name_prefix="asepr-direct-io")
        return _io_pool


def _write_file(path: Path, buffer: np.ndarray) -> None:
    flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_DIRECT | getattr(os, "O_NOFOLLOW", 0)
    fd = os.open(path, flags, 0o644)
    try:
        write_at(fd, buffer, 0)
    finally:
        os.close(fd)


class DirectChunkWriter:
    """Writes whole chunks of one uncompressed array as files, with ``O_DIRECT``.

    A direct write returns only once the device has the bytes (no page cache to absorb
    it), so each chunk is written on one of :data:`IO_THREADS` shared threads from one
    of two buffers while the caller fills the other: the sweep that produces the rows
    does not wait for the device. :meth:`close` waits for the writes and raises the
    first error.
    """

    def __init__(self, root: Path, chunk_rows: int, row_bytes: int, ndim: int):
        self.root, self.chunk_rows, self.row_bytes, self.ndim = root, chunk_rows, row_bytes, ndim
        self._buffers = [aligned_empty(chunk_rows * row_bytes) for _ in range(2)]
        self._pending: list[Future | None] = [None, None]
        self._turn = 0

    def _path(self, index: int) -> Path:
        return self.root / "c" / str(index) / "0" if self.ndim == 2 else self.root / "c" / str(index)

    def write(self, first_row: int, block: np.ndarray) -> None:
        """Write ``block`` (C-contiguous rows from ``first_row``, a chunk boundary)."""
        data = block.view(np.uint8).reshape(-1)
        step = self.chunk_rows * self.row_bytes
        for offset in range(0, len(data), step):
            turn, self._turn = self._turn, 1 - self._turn
            if self._pending[turn] is not None:
                self._pending[turn].result()  # that buffer's last chunk is written
            buffer = self._buffers[turn]
            piece = data[offset:offset + step]
            buffer[:len(piece)] = piece
            buffer[len(piece):] = 0  # the fill value, as Zarr pads an edge chunk
            path = self._path(first_row // self.chunk_rows + offset // step)
            path.parent.mkdir(parents=True, exist_ok=True)
            self._pending[turn] = _io().submit(_write_file, path, buffer)

    def close(self) -> None:
        """Wait for every chunk written so far (raising the first error)."""
        pending, self._pending = self._pending, [None, None]
        for future in pending:
            if future is not None:
                future.result()


def direct_chunks(array: zarr.Array) -> DirectChunkWriter | None:
    """A :class:`DirectChunkWriter` for ``array``, or None where Zarr must write it: a
    codec besides raw bytes, chunks that are not whole rows or not :data:`ALIGN`-sized,
    a store that is not a local directory, no ``O_DIRECT`` here or on its filesystem."""
    if not hasattr(os, "O_DIRECT") or array.ndim not in (1, 2) or array.ndim == 2 and array.chunks[1] != array.shape[1]:
        return None
    if tuple(array.compressors) or tuple(array.filters) or array.metadata.zarr_format != 3:
        return None
    encoding = array.metadata.chunk_key_encoding
    if getattr(encoding, "separator", None) != "/" or type(encoding).__name__ != "DefaultChunkKeyEncoding":
        return None
    root = getattr(array.store, "root", None)
    if root is None or not Path(root).is_dir():
        return None
    row_bytes = array.dtype.itemsize * (array.shape[1] if array.ndim == 2 else 1)
    if (array.chunks[0] * row_bytes) % ALIGN:
        return None
    target = Path(root) / array.path
    try:  # the filesystem must take the flag (tmpfs refuses it)
        probe = target / ".direct-probe"
        fd, direct = open_direct(probe, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
        os.close(fd)
        os.unlink(probe)
    except OSError:
        return None
    return DirectChunkWriter(target, array.chunks[0], row_bytes, array.ndim) if direct else None
