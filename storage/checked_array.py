"""Checked reads of a partition store's arrays: every chunk against its crc32c.

A partition store (:mod:`storage.partition_store`, format 2) records in each array's
attrs ``chunk_crc32c``, the CRC-32C of each chunk's content in chunk order, written by
:class:`ChunkCrcs` as the array is written. A :class:`CheckedArray` wraps the stored
``zarr.Array`` and checks every read: it loads whole chunks, requires each chunk's file
to exist (zarr returns the fill value for a missing chunk; every chunk is written, so a
missing file is damage), and compares each chunk's CRC-32C before it returns a row. A
missing, undecodable or altered chunk raises :class:`StoreError` naming the partition,
the array and the chunk key.

Why CRC-32C per chunk: hardware CRC-32C (``google_crc32c``) hashes many times faster
than a cold read of a store, so checking every read costs a few percent, where a
whole-array sha256 or ``zlib.crc32`` would cost a large share of the read speed
(measured in ``docs/results/implementation-choices/README.md``). And a
partial read (a block of ``x``, as ``asepr ingest`` reads it) is checked by its own
chunks, where a whole-array digest needs the whole array.
"""

from __future__ import annotations

from typing import Any

import google_crc32c
import numpy as np
import zarr
from zarr.core.sync import sync

from storage.errors import StoreError, format_problem

__all__ = ["CHUNK_DIGESTS", "DAMAGED_STORE_FIX", "CheckedArray", "ChunkCrcs", "StoredKeys"]

#: The array attribute that lists the CRC-32C of each chunk's content, in chunk order.
CHUNK_DIGESTS = "chunk_crc32c"
#: The fix named in every message about a damaged partition store.
DAMAGED_STORE_FIX = ("the store is damaged; rerun `asepr partition ... --overwrite` "
                     "(or restore it from a copy).")


class ChunkCrcs:
    """The CRC-32C of each chunk's content, from consecutive row blocks of any length.

    ``add`` the rows of an array in order (a block may end inside a chunk), then
    ``close`` for the list stored as ``attrs["chunk_crc32c"]``.
    """

    def __init__(self, chunk_rows: int):
        self.chunk_rows = chunk_rows
        self._crcs: list[int] = []
        self._crc = 0
        self._rows = 0

    def add(self, block: np.ndarray) -> None:
        """Extend the running CRC-32C of the current chunk; close each chunk it completes."""
        pos = 0
        while pos < len(block):
            take = min(len(block) - pos, self.chunk_rows - self._rows % self.chunk_rows)
            self._crc = google_crc32c.extend(self._crc, block[pos : pos + take].reshape(-1).view(np.uint8))
            pos, self._rows = pos + take, self._rows + take
            if self._rows % self.chunk_rows == 0:
                self._crcs.append(self._crc)
                self._crc = 0

    def close(self) -> list[int]:
        """The CRC-32C of every chunk, the last (partial) one included."""
        if self._rows % self.chunk_rows:
            self._crcs.append(self._crc)
        return self._crcs


class CheckedArray:
    """A stored array whose every read is checked against its chunk digests.

    Reads go through ``array[selection]`` (rows first, as for ``zarr.Array``; a
    selection may be an int, a slice, an index array or ``...``, with further axes
    after it) or ``np.asarray(array)``. Each read loads the whole chunks that the rows
    touch, requires each chunk's file to exist (zarr would return the fill value for a
    missing one), compares each chunk's CRC-32C with ``attrs["chunk_crc32c"]``, and only
    then returns the selected rows. Any difference, a missing chunk or a chunk that
    does not decode raises :class:`StoreError` naming the partition, the array and
    the chunk key.

    Attributes
    ----------
    name
        The layout name (``"nodes/x"``).
    where
        The partition and store, for messages.
    """

    def __init__(self, name: str, array: zarr.Array, where: str, stored: StoredKeys | None = None):
        self.name, self.where, self._array = name, where, array
        self._rows = array.chunks[0]
        self._digests = _chunk_digests(name, array, where)
        self._stored = stored if stored is not None else StoredKeys(array.store_path.store)
        self._prefix = array.store_path.path.strip("/")

    shape = property(lambda self: tuple(self._array.shape), doc="The array's shape.")
    dtype = property(lambda self: self._array.dtype, doc="The array's numpy dtype.")
    chunks = property(lambda self: tuple(self._array.chunks), doc="The chunk shape (whole rows).")
    ndim = property(lambda self: self._array.ndim, doc="The number of axes.")
    size = property(lambda self: self._array.size, doc="The number of elements.")
    nbytes = property(lambda self: self._array.nbytes, doc="Bytes of the decoded array.")

    def __len__(self) -> int:
        return int(self.shape[0])

    def __repr__(self) -> str:
        return f"CheckedArray({self.name!r}, shape={self.shape}, dtype={self.dtype}, {self.where})"

    def __array__(self, dtype=None, copy=None) -> np.ndarray:
        data = self[...]
        return data if dtype is None else data.astype(dtype, copy=False)

    def __getitem__(self, key) -> np.ndarray:
        key = Ellipsis if isinstance(key, tuple) and not key else key
        first, rest = (key[0], key[1:]) if isinstance(key, tuple) else (key, ())
        n = int(self.shape[0])
        if first is Ellipsis:
            lo, hi, first, rest = 0, n, slice(None), () if key is Ellipsis else key
        else:
            first, lo, hi = _row_selection(first, n)
        start = lo // self._rows * self._rows
        stop = min(n, -(-hi // self._rows) * self._rows) if hi > lo else start
        block = self.read_rows(start, stop)
        if isinstance(first, slice):
            first = slice(first.start - start, first.stop - start) if first.start is not None else first
        else:
            first = first - start
        return block[(first, *rest)]

    def read_rows(self, start: int, stop: int) -> np.ndarray:
        """Rows ``[start, stop)``, chunk-aligned (``start`` a multiple of the chunk rows
        and ``stop`` one too or the end), checked chunk by chunk."""
        if stop <= start:
            return np.empty((0, *self.shape[1:]), dtype=self.dtype)
        chunks = range(start // self._rows, -(-stop // self._rows))
        for c in chunks:
            self._raise(self._missing(c))
        try:
            block = np.ascontiguousarray(self._array.get_basic_selection(slice(start, stop)))
        except Exception as exc:  # noqa: BLE001 - any decoder failure is a damaged chunk
            for c in chunks:
                self._raise(self._chunk(c)[1])
            raise StoreError(format_problem(f"{self.where}, array {self.name}", "chunks that decode",
                                            f"{type(exc).__name__}: {exc}", DAMAGED_STORE_FIX)) from exc
        for c in chunks:
            rows = slice(c * self._rows - start, min(stop, (c + 1) * self._rows) - start)
            self._raise(self._altered(c, block[rows]))
        return block

    def chunk_problems(self) -> list[str]:
        """Check every chunk on its own: one message per missing, undecodable or altered
        chunk (``array NAME, chunk KEY: expected ..., found ...``); empty when all hold."""
        found = []
        for c in range(len(self._digests)):
            problem = self._missing(c)
            if problem is None:
                data, problem = self._chunk(c)
                problem = problem or self._altered(c, data)
            if problem is not None:
                found.append(format_problem(*problem))
        return found

    def _label(self, c: int) -> str:
        grid = tuple(self._array.cdata_shape[1:])
        keys = [self._array.metadata.encode_chunk_key((c, *rest)) for rest in np.ndindex(grid)]
        return f"array {self.name}, chunk {', '.join(keys) if keys else c}"

    def _raise(self, problem: tuple[str, str, str] | None) -> None:
        if problem is not None:
            where, expected, found = problem
            raise StoreError(format_problem(f"{self.where}, {where}", expected, found, DAMAGED_STORE_FIX))

    def _missing(self, c: int) -> tuple[str, str, str] | None:
        for rest in np.ndindex(tuple(self._array.cdata_shape[1:])):
            key = f"{self._prefix}/{self._array.metadata.encode_chunk_key((c, *rest))}".lstrip("/")
            if key not in self._stored:
                return self._label(c), "a chunk file (every chunk is written)", f"no file {key}"
        return None

    def _chunk(self, c: int) -> tuple[np.ndarray | None, tuple[str, str, str] | None]:
        rows = slice(c * self._rows, min(int(self.shape[0]), (c + 1) * self._rows))
        try:
            return np.ascontiguousarray(self._array.get_basic_selection(rows)), None
        except Exception as exc:  # noqa: BLE001 - the decoder's own error is the finding
            return None, (self._label(c), "a chunk that decodes", f"{type(exc).__name__}: {exc}")

    def _altered(self, c: int, data: np.ndarray) -> tuple[str, str, str] | None:
        crc = google_crc32c.extend(0, data.reshape(-1).view(np.uint8))
        if crc == self._digests[c]:
            return None
        return (self._label(c), f"content with CRC-32C {self._digests[c]} (attrs {CHUNK_DIGESTS})",
                f"CRC-32C {crc}: the chunk was altered")


def _row_selection(first, n: int) -> tuple[Any, int, int]:
    """A selection on the rows as (selection, lo, hi): the rows ``[lo, hi)`` that it touches."""
    if isinstance(first, slice):
        start, stop, step = first.indices(n)
        if step == 1:
            return slice(start, max(start, stop)), start, max(start, stop)
        first = np.arange(start, stop, step)
    elif isinstance(first, (int, np.integer)):
        if not -n <= int(first) < n:
            raise IndexError(f"index {int(first)} is out of bounds for axis 0 with size {n}")
        row = int(first) % n
        return row, row, row + 1
    index = np.asarray(first)
    if index.dtype == np.bool_:
        if index.shape != (n,):
            raise IndexError(f"boolean index of shape {index.shape} for axis 0 with size {n}")
        index = np.flatnonzero(index)
    index = np.where(index < 0, index + n, index).astype(np.int64)
    if len(index) and (index.min() < 0 or index.max() >= n):
        raise IndexError(f"index out of bounds for axis 0 with size {n}")
    return index, (int(index.min()) if len(index) else 0), (int(index.max()) + 1 if len(index) else 0)


def _chunk_digests(name: str, array: zarr.Array, where: str) -> list[int]:
    """The array's ``chunk_crc32c`` attribute, one int per chunk of rows; StoreError otherwise."""
    digests = array.attrs.get(CHUNK_DIGESTS)
    want = -(-int(array.shape[0]) // array.chunks[0])
    if not isinstance(digests, list) or len(digests) != want or not all(
            isinstance(d, int) and not isinstance(d, bool) for d in digests):
        found = f"{len(digests)} values" if isinstance(digests, list) else repr(digests)
        raise StoreError(format_problem(
            f"{where}, array {name}, attrs {CHUNK_DIGESTS}",
            f"a list of {want} CRC-32C values (one per chunk)", found, DAMAGED_STORE_FIX))
    return digests


class StoredKeys:
    """The keys of every object in a Zarr store, listed once, on first use.

    One listing serves all the arrays of a partition store: a chunk key that is not
    listed is a missing chunk.
    """

    def __init__(self, store):
        self._store = store
        self._keys: set[str] | None = None

    def __contains__(self, key: str) -> bool:
        if self._keys is None:
            self._keys = sync(_list_keys(self._store))
        return key in self._keys


async def _list_keys(store) -> set[str]:
    return {key async for key in store.list_prefix("")}
