"""Reads of a partition store's arrays: every chunk checked by zarr, every failure named.

A partition store (:mod:`asepr.storage.partitions.store`, format 3) ends every array's codec
chain with zarr's ``crc32c`` codec, so zarr checks each chunk it decodes against the
CRC-32C stored with it, and the store is opened through
:class:`asepr.storage.partitions.chunk_stores.RequireChunks`, so a missing chunk is an error rather
than the fill value. A :class:`CheckedArray` wraps such a ``zarr.Array`` only to turn
zarr's errors into :class:`StoreError` s that name the partition, the array and the
chunk key, and to read whole chunks (a row selection loads the chunks it touches,
once each). :func:`read_concurrently` reads several arrays whole, in blocks of chunks
on a few threads, for a store across a network (zarr decodes each block into its rows
of the result, checking every chunk as any read does).

Why CRC-32C per chunk: hardware CRC-32C hashes many times faster than a cold read of a
store, so checking every read costs a few percent, where a whole-array sha256 would
cost a large share of the read speed (``docs/results/implementation-choices/README.md``),
and a partial read (a block of ``x``, as ``asepr ingest`` reads it) is checked by its
own chunks. zarr's codec checks the stored bytes as fast as the digests this project
kept outside the arrays before, or faster (``docs/results/zarr-crc32c/``).
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np
import zarr
from zarr.buffer.cpu import NDBuffer
from zarr.codecs import Crc32cCodec

from asepr.storage.errors import StoreError, format_problem
from asepr.storage.integrity.store_values import VALUE_FIX, Rule
from asepr.storage.partitions.chunk_stores import MissingChunkError

__all__ = ["BLOCK_CHUNKS", "DAMAGED_STORE_FIX", "CheckedArray", "has_crc32c", "read_concurrently"]

#: The fix named in every message about a damaged partition store.
DAMAGED_STORE_FIX = ("the store is damaged; rerun `asepr partition ... --overwrite` "
                     "(or restore it from a copy).")
_DECODES = "a chunk that decodes and matches its crc32c (zarr's crc32c codec)"


def has_crc32c(array: zarr.Array) -> bool:
    """Whether ``array``'s codec chain ends with zarr's ``crc32c`` codec (each stored
    chunk then carries the CRC-32C that zarr checks when it decodes the chunk)."""
    codecs = tuple(array.compressors)
    return bool(codecs) and isinstance(codecs[-1], Crc32cCodec)


class CheckedArray:
    """A stored array whose every read is checked, each failure named by its chunk.

    Reads go through ``array[selection]`` (rows first, as for ``zarr.Array``; a
    selection may be an int, a slice, an index array or ``...``, with further axes
    after it) or ``np.asarray(array)``. Each read loads the whole chunks that the rows
    touch through zarr, which checks each chunk's crc32c; a missing chunk, or one that
    does not decode or match its crc32c, raises :class:`StoreError` naming the
    partition, the array and the chunk key.

    Attributes
    ----------
    name
        The layout name (``"nodes/x"``).
    where
        The partition and store, for messages.
    fill_damaged
        False (the default): a damaged chunk raises. True: its rows read as the fill
        value (0), for ``asepr verify`` to scan a store it has already reported
        damaged as far as it reads.
    rule
        The structural invariant every block read must hold
        (:func:`asepr.storage.integrity.store_values.store_rules`); None: none. Not applied
        with ``fill_damaged`` (``asepr verify`` describes what it finds).
    """

    def __init__(self, name: str, array: zarr.Array, where: str, *, fill_damaged: bool = False,
                 rule: Rule | None = None):
        self.name, self.where, self._array, self.fill_damaged = name, where, array, fill_damaged
        self.rule = rule
        self._rows = array.chunks[0]

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

    def read_rows(self, start: int, stop: int, out: np.ndarray | None = None) -> np.ndarray:
        """Rows ``[start, stop)``, chunk-aligned (``start`` a multiple of the chunk rows
        and ``stop`` one too or the end), each chunk checked by zarr as it decodes.

        With ``out`` (C-contiguous, of the rows' shape and the array's dtype), zarr decodes
        the chunks into it, and it is returned.
        """
        if stop <= start:
            return np.empty((0, *self.shape[1:]), dtype=self.dtype) if out is None else out
        try:
            if out is None:
                out = np.ascontiguousarray(self._array.get_basic_selection(slice(start, stop)))
            else:
                self._array.get_basic_selection(slice(start, stop), out=NDBuffer.from_numpy_array(out))
        except Exception as exc:  # noqa: BLE001 - any failure to read is a damaged chunk
            failure = exc
        else:
            self.check_rows(out, start)
            return out
        chunks = range(start // self._rows, -(-stop // self._rows))
        block = np.empty((stop - start, *self.shape[1:]), dtype=self.dtype) if out is None else out
        block[...] = 0  # the fill value, where a damaged chunk is left
        for c in chunks:
            data, problem = self._chunk(c)
            if problem is not None and not self.fill_damaged:
                where, expected, found = problem
                raise StoreError(format_problem(f"{self.where}, {where}", expected, found,
                                                DAMAGED_STORE_FIX)) from failure
            if data is not None:
                block[c * self._rows - start:c * self._rows - start + len(data)] = data
        if self.fill_damaged:
            return block
        # Every chunk read on its own: the failure was not a chunk's.
        raise StoreError(format_problem(f"{self.where}, array {self.name}", "chunks that read",
                                        f"{type(failure).__name__}: {failure}", DAMAGED_STORE_FIX)) from failure

    def unchecked(self) -> CheckedArray:
        """The same array without :attr:`rule` (chunks still checked): for hashing what is stored."""
        return CheckedArray(self.name, self._array, self.where, fill_damaged=self.fill_damaged)

    def check_rows(self, block: np.ndarray, start: int) -> None:
        """Raise StoreError when the rows ``block`` (from row ``start``) break :attr:`rule`,
        naming the partition, the array, the row and its chunk."""
        if self.rule is None or self.fill_damaged:
            return
        problem = self.rule(block, start, int(self.shape[0]))
        if problem is None:
            return
        row, expected, found = problem
        where = f"{self.where}, {self._label((start + row) // self._rows)}, row {start + row}"
        raise StoreError(format_problem(where, expected, found, VALUE_FIX))

    def chunk_problems(self) -> list[str]:
        """Check every chunk on its own: one message per missing chunk or one that does
        not decode or match its crc32c (``array NAME, chunk KEY: expected ..., found
        ...``); empty when all hold."""
        found = []
        for c in range(-(-int(self.shape[0]) // self._rows)):
            problem = self._chunk(c)[1]
            if problem is not None:
                found.append(format_problem(*problem))
        return found

    def _label(self, c: int) -> str:
        grid = tuple(self._array.cdata_shape[1:])
        keys = [self._array.metadata.encode_chunk_key((c, *rest)) for rest in np.ndindex(grid)]
        return f"array {self.name}, chunk {', '.join(keys) if keys else c}"

    def _chunk(self, c: int) -> tuple[np.ndarray | None, tuple[str, str, str] | None]:
        """Chunk row ``c`` read on its own: ``(data, None)``, or ``(None, problem)``."""
        rows = slice(c * self._rows, min(int(self.shape[0]), (c + 1) * self._rows))
        try:
            return np.ascontiguousarray(self._array.get_basic_selection(rows)), None
        except MissingChunkError as exc:
            return None, (self._label(c), "a chunk file (every chunk is written)", f"no file {exc.key}")
        except Exception as exc:  # noqa: BLE001 - the decoder's or the checksum's error is the finding
            return None, (self._label(c), _DECODES, f"{type(exc).__name__}: {exc}")


#: Chunks per task of :func:`read_concurrently`: zarr fetches the chunks of one read
#: concurrently (up to its ``async.concurrency``), so a task keeps this many requests in
#: flight, and ``workers`` tasks at once keep ``workers`` times as many.
BLOCK_CHUNKS = 4


def read_concurrently(arrays: dict[str, CheckedArray], workers: int) -> dict[str, np.ndarray]:
    """Every array of ``arrays`` read whole, as ``array[...]`` reads it, in chunk-aligned
    blocks of :data:`BLOCK_CHUNKS` chunks on ``workers`` threads.

    For a store across a network, where each chunk is a request and a read of one array
    after another leaves the connection idle between them and keeps at most zarr's
    ``async.concurrency`` requests of one array in flight. Each block is decoded by zarr
    into its rows of the result (every chunk checked as :meth:`CheckedArray.read_rows`
    checks it). The first failing block, in the order of ``arrays`` and rows, raises its
    :class:`StoreError`; blocks not yet started are dropped.
    """
    out = {name: np.empty(array.shape, dtype=array.dtype) for name, array in arrays.items()}
    blocks = [(name, start, min(len(array), start + BLOCK_CHUNKS * array.chunks[0]))
              for name, array in arrays.items() for start in range(0, len(array), BLOCK_CHUNKS * array.chunks[0])]
    with ThreadPoolExecutor(max_workers=max(1, workers), thread_name_prefix="asepr-read") as pool:
        futures = [pool.submit(arrays[name].read_rows, start, stop, out[name][start:stop])
                   for name, start, stop in blocks]
        try:
            for future in futures:
                future.result()
        finally:
            for future in futures:
                future.cancel()
    for name, start, _ in blocks:  # each block was checked alone: its first row against the row before
        if start:
            arrays[name].check_rows(out[name][start - 1:start + 1], start - 1)
    return out


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
