"""Run-private files written and read with ``O_DIRECT``, past the page cache.

A partition run writes its decoded copies once (the validator's edge copy and node
table, :mod:`asepr.storage.inputs.decoded`, :mod:`asepr.storage.inputs.node_table`) and reads them back a few
times. Through the page cache every byte of a new file lands in a freshly allocated
page, and fresh pages cost system time far beyond the copy, while ``O_DIRECT`` writes
and reads cost almost none (measured in
``docs/results/implementation-choices/README.md``). So these files are written in aligned
blocks with ``O_DIRECT`` (:class:`DirectWriter`) and read back the same way
(:func:`pread_into`).

``O_DIRECT`` needs the buffer address, the length and the file offset aligned to the
device's block (:data:`ALIGN` covers 512 and 4096 B blocks). A writer therefore keeps
an aligned buffer, writes it whenever it is full, and writes its unaligned tail through
the page cache on :meth:`DirectWriter.close` (after clearing the flag); a reader widens
its range to aligned bounds and slices. Where the filesystem refuses the flag (tmpfs)
the same calls go through the page cache. The kernel keeps the two paths coherent
(a direct read first writes back the dirty cached pages it covers).
"""

from __future__ import annotations

import errno
import fcntl
import os

import numpy as np

__all__ = ["ALIGN", "WRITE_BUFFER", "DirectWriter", "aligned_empty", "open_direct", "pread_into", "write_at"]

#: Alignment of ``O_DIRECT`` buffers, lengths and offsets (covers 512 and 4096 B blocks).
ALIGN = 4096
#: Bytes a :class:`DirectWriter` buffers before it writes them.
WRITE_BUFFER = 2 << 20
_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)


def aligned_empty(nbytes: int) -> np.ndarray:
    """An uninitialised ``uint8`` array of ``nbytes`` whose first byte is :data:`ALIGN`-aligned."""
    raw = np.empty(nbytes + ALIGN, dtype=np.uint8)
    start = (-raw.ctypes.data) % ALIGN
    return raw[start:start + nbytes]


def open_direct(path: str | os.PathLike, flags: int, mode: int = 0o600) -> tuple[int, bool]:
    """``os.open(path, flags | O_NOFOLLOW | O_DIRECT)``, or without ``O_DIRECT`` where the
    filesystem refuses it; ``(fd, direct)``."""
    flags |= _NOFOLLOW
    direct = getattr(os, "O_DIRECT", 0)
    if direct:
        try:
            return os.open(path, flags | direct, mode), True
        except OSError as error:
            if error.errno != errno.EINVAL:
                raise
    return os.open(path, flags, mode), False


def write_at(fd: int, data, offset: int) -> None:
    """Write all of ``data`` (an array, any dtype, or a byte buffer) at ``offset`` of ``fd``."""
    view = memoryview(np.ascontiguousarray(data).reshape(-1).view(np.uint8)) \
        if isinstance(data, np.ndarray) else memoryview(data).cast("B")
    while view:
        written = os.pwrite(fd, view, offset)
        view, offset = view[written:], offset + written


class DirectWriter:
    """Writes bytes to ``fd`` from file offset ``start`` on, in order, with ``O_DIRECT``
    where ``fd`` has it (``start`` must then be a multiple of :data:`ALIGN`).

    The caller owns ``fd`` and closes it after :meth:`close`.
    """

    def __init__(self, fd: int, direct: bool, start: int = 0, buffer_bytes: int = WRITE_BUFFER):
        if direct and start % ALIGN:
            raise ValueError(f"an O_DIRECT writer starts at a multiple of {ALIGN}, not {start}")
        self.fd, self.direct = fd, direct
        self.position = start  # file offset of the buffer's first byte
        self._buffer = aligned_empty(buffer_bytes - buffer_bytes % ALIGN or ALIGN) if direct else None
        self._used = 0

    @property
    def offset(self) -> int:
        """File offset of the next byte written."""
        return self.position + self._used

    def write(self, data: np.ndarray) -> None:
        """Append ``data`` (any array, structured ones included; its bytes in C order)."""
        view = memoryview(np.ascontiguousarray(data).reshape(-1).view(np.uint8))
        if self._buffer is None:
            write_at(self.fd, view, self.position)
            self.position += len(view)
            return
        while view:
            take = min(len(view), len(self._buffer) - self._used)
            self._buffer[self._used:self._used + take] = np.frombuffer(view[:take], dtype=np.uint8)
            self._used += take
            view = view[take:]
            if self._used == len(self._buffer):
                self._flush_blocks()

    def _flush_blocks(self) -> None:
        """Write the buffer's whole blocks with ``O_DIRECT``; keep the partial block."""
        whole = self._used - self._used % ALIGN
        if whole:
            write_at(self.fd, self._buffer[:whole], self.position)
            rest = self._used - whole
            self._buffer[:rest] = self._buffer[whole:self._used]
            self.position += whole
            self._used = rest

    def close(self) -> None:
        """Write what is buffered; an unaligned tail goes through the page cache. The
        flag is cleared either way, so ``fd`` takes any write afterwards."""
        if self._buffer is None:
            return
        self._flush_blocks()
        flags = fcntl.fcntl(self.fd, fcntl.F_GETFL)
        fcntl.fcntl(self.fd, fcntl.F_SETFL, flags & ~os.O_DIRECT)
        if self._used:
            write_at(self.fd, self._buffer[:self._used], self.position)
            self.position += self._used
            self._used = 0
        self._buffer = None


def pread_into(fd: int, offset: int, nbytes: int, scratch: np.ndarray | None = None) -> np.ndarray:
    """Bytes ``offset .. offset + nbytes`` of ``fd`` as a ``uint8`` view.

    The read covers the aligned blocks around the range, into ``scratch`` (an
    :func:`aligned_empty` array of at least ``nbytes + 2 * ALIGN`` bytes, reused across
    calls) or a new aligned array. Fewer bytes come back where the file ends first.
    """
    lo = offset - offset % ALIGN
    hi = -(-(offset + nbytes) // ALIGN) * ALIGN
    if scratch is None or len(scratch) < hi - lo:
        scratch = aligned_empty(hi - lo)
    got = 0
    while got < hi - lo:
        count = os.preadv(fd, [memoryview(scratch[got:hi - lo])], lo + got)
        got += max(0, count)
        if count <= 0 or got % ALIGN:  # the file ends here
            break
    end = max(0, min(got, offset - lo + nbytes))
    return scratch[offset - lo:end] if end > offset - lo else scratch[:0]
