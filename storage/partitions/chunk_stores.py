"""Zarr stores for partition stores: direct local writes, and reads that require every chunk.

Both are zarr ``Store`` s, so zarr itself encodes, decodes and checks every chunk (the
arrays carry the ``crc32c`` codec, :mod:`asepr.storage.partitions.store`); these only change
where the bytes go and what a missing key means.

:class:`DirectLocalStore` is a :class:`zarr.storage.LocalStore` that writes chunk files
with ``O_DIRECT``, past the page cache. Writing a new file through the page cache can
cost far more than the copy: each fresh page is zeroed (and, on a virtual machine,
faulted in from the host) before the data lands in it (measured in
``docs/results/implementation-choices/README.md``, writes past the page cache). A
partition's node features are most of the bytes a run writes and are not read back by
it. ``O_DIRECT`` needs the buffer, the length and the file offset aligned to the
device's block: a chunk's whole blocks are written from an aligned scratch buffer with
the flag and its tail (the crc32c codec's 4 bytes, for a raw chunk) through the page
cache. Metadata documents (``zarr.json``) keep zarr's own atomic write. It is used only
for a local directory whose filesystem takes the flag (:func:`local_store`; tmpfs does
not); every other location is written by zarr's own stores.

:class:`RequireChunks` wraps any store for reading: a chunk key that is not there
raises :class:`MissingChunkError` instead of reading as the fill value. Every chunk of
a partition store is written (``write_empty_chunks``), so a missing chunk is damage,
even where its content would equal the fill value.
"""

from __future__ import annotations

import asyncio
import fcntl
import os
import threading
from pathlib import Path
from typing import TYPE_CHECKING

from zarr.storage import LocalStore, WrapperStore

from asepr.storage.errors import StoreError, format_problem
from asepr.storage.locations.direct_io import ALIGN, aligned_empty, open_direct, write_at

if TYPE_CHECKING:
    from zarr.abc.buffer import Buffer, BufferPrototype
    from zarr.abc.store import ByteRequest

__all__ = ["METADATA_KEYS", "DirectLocalStore", "MissingChunkError", "RequireChunks", "local_store",
           "takes_direct_io"]

#: The last component of a key that names a metadata document, not a chunk (zarr v3, and
#: the v2 names zarr probes for when it opens a group or an array).
METADATA_KEYS = frozenset({"zarr.json", ".zgroup", ".zarray", ".zattrs", ".zmetadata"})

_scratch = threading.local()


def _is_chunk(key: str) -> bool:
    return key.rsplit("/", 1)[-1] not in METADATA_KEYS


def _aligned_scratch(nbytes: int):
    """This thread's aligned buffer of at least ``nbytes`` (reused across chunks)."""
    buffer = getattr(_scratch, "buffer", None)
    if buffer is None or len(buffer) < nbytes:
        buffer = _scratch.buffer = aligned_empty(max(nbytes, ALIGN))
    return buffer


def _write_direct(path: Path, data: memoryview) -> None:
    """Write ``data`` as the file ``path``: whole blocks with ``O_DIRECT``, the tail without."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, direct = open_direct(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        whole = len(data) - len(data) % ALIGN if direct else 0
        if whole:
            scratch = _aligned_scratch(whole)
            scratch[:whole] = data[:whole]
            write_at(fd, scratch[:whole], 0)
        if whole < len(data):
            if direct:  # the tail is not a whole block: through the page cache
                fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) & ~os.O_DIRECT)
            write_at(fd, data[whole:], whole)
    finally:
        os.close(fd)


class DirectLocalStore(LocalStore):
    """A :class:`zarr.storage.LocalStore` whose chunk files are written with ``O_DIRECT``.

    Reads, listings, deletions and metadata writes are the ``LocalStore``'s own.
    """

    async def set(self, key: str, value: Buffer) -> None:
        if not _is_chunk(key):
            return await super().set(key, value)
        if not self._is_open:
            await self._open()
        self._check_writable()
        view = memoryview(value.as_buffer_like()).cast("B")
        await asyncio.to_thread(_write_direct, self.root / key, view)


def takes_direct_io(directory: str | os.PathLike) -> bool:
    """Whether files under the existing ``directory`` can be opened with ``O_DIRECT``."""
    if not hasattr(os, "O_DIRECT"):
        return False
    probe = Path(directory) / f".direct-probe-{os.getpid()}-{threading.get_ident()}"
    try:
        fd, direct = open_direct(probe, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
        os.close(fd)
        probe.unlink()
    except OSError:
        return False
    return direct


def local_store(path: str | os.PathLike, *, read_only: bool = False) -> LocalStore:
    """The store to write a partition store at the local ``path`` with: a
    :class:`DirectLocalStore` where the filesystem takes ``O_DIRECT``, else zarr's
    ``LocalStore``. The nearest existing directory above ``path`` is probed."""
    path = Path(path)
    probe = path
    while not probe.is_dir() and probe != probe.parent:
        probe = probe.parent
    if not read_only and takes_direct_io(probe):
        return DirectLocalStore(path, read_only=read_only)
    return LocalStore(path, read_only=read_only)


class MissingChunkError(StoreError):
    """A chunk key of an array is not in the store (``key`` names it, from the store's root)."""

    def __init__(self, key: str, store: str):
        self.key, self.store = key, store
        super().__init__(format_problem(
            f"store {store}, chunk {key}", "a chunk file (every chunk of a partition store is written)",
            "none", "the store is damaged; rerun `asepr partition ... --overwrite` (or restore it from a copy)."))


class RequireChunks(WrapperStore):
    """A read-only view of a store in which a missing chunk is an error, not the fill value."""

    async def get(self, key: str, prototype: BufferPrototype, byte_range: ByteRequest | None = None
                  ) -> Buffer | None:
        value = await self._store.get(key, prototype, byte_range)
        if value is None and _is_chunk(key):
            raise MissingChunkError(key, str(self._store))
        return value

    async def get_partial_values(self, prototype: BufferPrototype,
                                 key_ranges) -> list[Buffer | None]:
        key_ranges = list(key_ranges)
        values = await self._store.get_partial_values(prototype, key_ranges)
        for (key, _), value in zip(key_ranges, values):
            if value is None and _is_chunk(key):
                raise MissingChunkError(key, str(self._store))
        return values
