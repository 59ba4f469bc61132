"""The per-partition Zarr store: layout, codecs, checksums, and the reader.

One self-contained Zarr v3 group per partition; a trainer opens its own and nothing
else (:func:`asepr.storage.partitions.output_stores.open_partition`). Layout of ``OUT/part-PPPPP.zarr``
(``n`` nodes, ``m`` edges, ``d`` feature width)::

    part-00000.zarr/
      zarr.json                     group attrs: format, format_version, part_id, num_parts,
                                    generation, counts, undirected, halo, array_checksums,
                                    checksum
      nodes/
        global_nid   int64          [n]       sorted, unique: row i is node global_nid[i]
        x            float32        [n, d]    features
        y            int64          [n]       label, -1 unknown
        split        int8           [n]       0 train, 1 val, 2 test, -1 none
        is_master    bool           [n]       this partition is the node's master
      edges/
        indptr       int64          [n + 1]   CSR over part_local_nid (rows = source)
        indices      int32|int64    [m]       destination part_local_nid; int32 when n < 2**31
        is_halo      bool           [m]       (halo 1 only) a copy of another partition's edge

``part_local_nid`` is the row index into ``nodes/*``. The edges of row ``u`` are
``indices[indptr[u]:indptr[u+1]]``, sorted. Every input edge row is stored once, in
the partition that it was assigned to, *as stored in the input*: an undirected input
(each edge stored once, ``attrs["undirected"]``) keeps one direction here too, and the
loader adds the reverse edges. So the union over partitions of the non-halo edges is
exactly the input edge multiset (``asepr verify`` checks it). With ``--halo 1``,
partition ``p`` also holds a copy (``is_halo``) of every edge into one of its masters
(for an undirected input, every edge touching one) that was assigned elsewhere, plus
that edge's other endpoint as a non-master node.

Nodes: the endpoints of the partition's edges plus the nodes mastered here (isolated
nodes have a master too), so every node has exactly one ``is_master`` row overall.

Checksums are over content, not files: ``array_checksums[name]`` is the sha256 of the
array's name, dtype, shape and C-order bytes; ``checksum`` is the sha256 of the sorted
``name:digest`` lines. The checksum does not depend on the codec or the chunking.

Every read is checked (store format 3): every array's codec chain ends with zarr's
``crc32c`` codec, so zarr checks each chunk against the CRC-32C stored with it as it
decodes it, and the reader opens the store through
:class:`asepr.storage.partitions.chunk_stores.RequireChunks`, so a missing chunk is an error, never the
fill value. The reader's arrays are :class:`asepr.storage.integrity.checked_array.CheckedArray` s,
which name the partition, the array and the chunk of any failure. The sha256 stays the
store's identity (manifest, ``asepr verify``, resume). Format 2 kept a CRC-32C of each
chunk's content in the arrays' attrs instead; such stores are refused (partition again).

Codecs and chunks
-----------------
Chosen by measuring write and read throughput and compression ratios of candidate
codecs and chunk sizes on partition-shaped arrays (dense and sparse features, sorted
ids, CSR indices, labels; the table is in
``docs/results/implementation-choices/README.md``): **Blosc lz4, byte shuffle,
clevel 5, chunks of about 4 MiB** (whole rows of ``x``), and bit shuffle for the small
label-like arrays (``y``, ``split``, ``is_master``, ``is_halo``), where it compresses
several times better. Dense features compress little and write slower through blosc,
so an array is stored raw when blosc does not shrink its first chunk by
at least :data:`MIN_SAVING` (:class:`ArrayWriter`); readers see either through zarr's
metadata, and the content digests do not depend on it. A store created at a local
path by :func:`create_store` writes its chunk files with ``O_DIRECT`` where the
filesystem allows (:class:`asepr.storage.partitions.chunk_stores.DirectLocalStore`).
"""

from __future__ import annotations

import hashlib
import logging
import os
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numcodecs
import numpy as np
import zarr
from zarr.codecs import BloscCodec, Crc32cCodec
from zarr.storage import FsspecStore, LocalStore

from asepr.storage.errors import StoreError, format_problem
from asepr.storage.integrity.checked_array import (
    DAMAGED_STORE_FIX,
    CheckedArray,
    has_crc32c,
    read_concurrently,
)
from asepr.storage.integrity.store_values import store_rules
from asepr.storage.locations.fs import resolve
from asepr.storage.locations.location import is_local, is_local_url
from asepr.storage.partitions.chunk_stores import RequireChunks, local_store

__all__ = [
    "CHUNK_BYTES",
    "EDGE_ARRAYS",
    "NODE_ARRAYS",
    "REMOTE_READ_WORKERS",
    "STORE_FORMAT",
    "STORE_VERSION",
    "ArrayWriter",
    "PartitionStore",
    "array_digest",
    "checksum_problems",
    "combine_digests",
    "create_store",
    "open_finished_group",
    "open_group_readonly",
    "open_store",
    "stored_ratio",
    "write_array",
    "zarr_array_digest",
]

log = logging.getLogger(__name__)

STORE_FORMAT = "asepr-partition"
#: 3: every array's codec chain ends with zarr's ``crc32c`` codec (2 kept a CRC-32C of
#: each chunk's content in the array's attrs).
STORE_VERSION = 3
#: Target uncompressed bytes per chunk (see the module docstring for the measurement).
CHUNK_BYTES = 4 << 20
#: Threads over which :meth:`PartitionStore.to_numpy` reads a store on an object store
#: (:func:`asepr.storage.integrity.checked_array.read_concurrently`): every chunk is a request there, and
#: this many blocks of chunks are in flight at once, across all the arrays.
REMOTE_READ_WORKERS = 8

NODE_ARRAYS = ("nodes/global_nid", "nodes/x", "nodes/y", "nodes/split", "nodes/is_master")
EDGE_ARRAYS = ("edges/indptr", "edges/indices")
OPTIONAL_ARRAYS = ("edges/is_halo",)

_DTYPES = {
    "nodes/global_nid": (np.int64,),
    "nodes/x": (np.float32,),
    "nodes/y": (np.int64,),
    "nodes/split": (np.int8,),
    "nodes/is_master": (np.bool_,),
    "edges/indptr": (np.int64,),
    "edges/indices": (np.int32, np.int64),
    "edges/is_halo": (np.bool_,),
}
_BITSHUFFLED = {"nodes/y", "nodes/split", "nodes/is_master", "edges/is_halo"}


def _codec(name: str) -> BloscCodec:
    # Names, not zarr's enums: every zarr 3 release takes them (newer ones deprecate the enums).
    shuffle = "bitshuffle" if name in _BITSHUFFLED else "shuffle"
    return BloscCodec(cname="lz4", clevel=5, shuffle=shuffle)


#: A chunk is stored compressed only if blosc makes it at least this much smaller (the
#: first chunk of an array decides for all of it). Random float features shrink little,
#: at a cost that would be most of the cost of writing them
#: (``docs/results/implementation-choices/README.md``).
MIN_SAVING = 1 / 8


def _packed_bytes(name: str, sample: np.ndarray) -> tuple[int, int]:
    """``(raw, packed)`` bytes of ``sample`` under blosc with :func:`_codec`'s settings."""
    shuffle = numcodecs.Blosc.BITSHUFFLE if name in _BITSHUFFLED else numcodecs.Blosc.SHUFFLE
    raw = np.ascontiguousarray(sample)
    return raw.nbytes, len(numcodecs.Blosc(cname="lz4", clevel=5, shuffle=shuffle).encode(raw))


def _compressible(name: str, sample: np.ndarray) -> bool:
    """Whether blosc (:func:`_codec`'s settings) saves :data:`MIN_SAVING` on ``sample``."""
    raw, packed = _packed_bytes(name, sample)
    return packed <= (1 - MIN_SAVING) * raw


def stored_ratio(name: str, sample: np.ndarray) -> float:
    """How many times smaller than its raw bytes array ``name`` is stored, judged on
    ``sample`` (rows of it, about one chunk): blosc's ratio where :class:`ArrayWriter`
    would compress, 1.0 where it would store the array raw. A plan sizes the stores
    with it before any is written (:mod:`asepr.pipeline.planning.plan`)."""
    if not np.asarray(sample).size:
        return 1.0
    raw, packed = _packed_bytes(name, sample)
    return raw / max(1, packed) if packed <= (1 - MIN_SAVING) * raw else 1.0


def _chunks(shape: tuple[int, ...], itemsize: int) -> tuple[int, ...]:
    row_bytes = itemsize * int(np.prod(shape[1:], dtype=np.int64)) if len(shape) > 1 else itemsize
    rows = max(1, CHUNK_BYTES // max(1, row_bytes))
    return (max(1, min(rows, shape[0])),) + tuple(max(1, s) for s in shape[1:])


# --- checksums ------------------------------------------------------------------------


def _digest_header(name: str, dtype: np.dtype, shape: tuple[int, ...]) -> bytes:
    return f"{name}|{np.dtype(dtype).str}|{','.join(map(str, shape))}\n".encode()


def array_digest(name: str, data: np.ndarray) -> str:
    """sha256 (hex) of an array's name, dtype, shape and C-order bytes."""
    h = hashlib.sha256(_digest_header(name, data.dtype, data.shape))
    h.update(np.ascontiguousarray(data).view(np.uint8).reshape(-1) if data.size else b"")
    return h.hexdigest()


def zarr_array_digest(name: str, array: zarr.Array | CheckedArray, block_bytes: int = 64 << 20) -> str:
    """:func:`array_digest` of a stored array, read in blocks of whole rows."""
    shape = tuple(array.shape)
    h = hashlib.sha256(_digest_header(name, array.dtype, shape))
    if not shape or shape[0] == 0:
        return h.hexdigest()
    row_bytes = array.dtype.itemsize * int(np.prod(shape[1:], dtype=np.int64))
    chunk_rows = array.chunks[0]
    rows = max(chunk_rows, (block_bytes // max(1, row_bytes)) // chunk_rows * chunk_rows)
    for start in range(0, shape[0], rows):
        block = np.ascontiguousarray(array[start : start + rows])
        h.update(block.view(np.uint8).reshape(-1))
    return h.hexdigest()


def combine_digests(digests: dict[str, str]) -> str:
    """The store checksum: sha256 of the sorted ``name:digest`` lines."""
    lines = "".join(f"{k}:{digests[k]}\n" for k in sorted(digests))
    return "sha256:" + hashlib.sha256(lines.encode()).hexdigest()


# --- writing ----------------------------------------------------------------------------


def checksum_problems(store: PartitionStore) -> list[str]:
    """Recompute every array's content digest; describe each mismatch (empty: all match).

    A damaged array of a checked store is described chunk by chunk
    (:meth:`CheckedArray.chunk_problems`): which chunk is missing, or does not decode or
    match its crc32c.
    """
    recorded = dict(store.attrs.get("array_checksums") or {})
    problems = []
    if sorted(recorded) != sorted(store.arrays):
        problems.append(
            f"attrs array_checksums cover {sorted(recorded)}, the store holds {sorted(store.arrays)}"
        )
    for name, array in store.arrays.items():
        if isinstance(array, CheckedArray):
            array = array.unchecked()  # the digest decides; a value the layout excludes is its mismatch
        try:
            digest = zarr_array_digest(name, array)
        except StoreError as exc:
            problems += (array.chunk_problems() if isinstance(array, CheckedArray) else []) or [str(exc)]
            continue
        except Exception as exc:  # noqa: BLE001 - an unreadable array is what we look for
            problems.append(f"array {name} is unreadable ({type(exc).__name__}: {exc})")
            continue
        if name in recorded and digest != recorded[name]:
            problems.append(f"array {name} has content sha256 {digest[:16]}…, attrs say {recorded[name][:16]}…")
    if recorded and combine_digests(recorded) != store.attrs.get("checksum"):
        problems.append("attrs checksum does not combine the array checksums")
    return problems


def create_store(path: str | Path) -> zarr.Group:
    """Create an empty partition store (``nodes/`` and ``edges/`` groups) at a local path,
    on :func:`asepr.storage.partitions.chunk_stores.local_store` (chunk files past the page cache where the
    filesystem allows)."""
    group = zarr.open_group(store=local_store(path), mode="w")
    group.create_group("nodes")
    group.create_group("edges")
    return group


def _checked_dtype(name: str, dtype: np.dtype) -> np.dtype:
    allowed = _DTYPES.get(name)
    if allowed is None:
        raise StoreError(f"partition store: {name!r} is not part of the layout {list(_DTYPES)}.")
    if np.dtype(dtype).type not in allowed:
        raise StoreError(
            format_problem(
                f"partition array {name}",
                f"dtype {' or '.join(np.dtype(t).name for t in allowed)}",
                f"dtype {np.dtype(dtype)}",
            )
        )
    return np.dtype(dtype)


class ArrayWriter:
    """Writes one layout array in consecutive row blocks and hashes it on the way.

    Blocks should be whole multiples of :attr:`block_rows` (chunk-aligned), so each
    chunk is written once; :meth:`close` checks every row was written and returns
    the content digest (as :func:`array_digest` of the whole array).
    """

    def __init__(self, group: zarr.Group, name: str, shape: tuple[int, ...], dtype, block_bytes: int = 64 << 20):
        self.name = name
        self.dtype = _checked_dtype(name, dtype)
        self.shape = tuple(int(s) for s in shape)
        self._group = group
        self._chunks = _chunks(self.shape, self.dtype.itemsize)
        # Created at the first block, whose first chunk decides the compression.
        self.array: zarr.Array | None = None
        chunk_rows = self._chunks[0]
        row_bytes = self.dtype.itemsize * int(np.prod(self.shape[1:], dtype=np.int64))
        self.block_rows = chunk_rows * max(1, block_bytes // max(1, chunk_rows * row_bytes))
        self._hash = hashlib.sha256(_digest_header(name, self.dtype, self.shape))
        self._next = 0

    def _create(self, sample: np.ndarray | None) -> zarr.Array:
        compress = sample is None or _compressible(self.name, sample)
        return self._group.create_array(
            self.name,
            shape=self.shape,
            dtype=self.dtype,
            chunks=self._chunks,
            # zarr's crc32c last: every stored chunk carries the CRC-32C that zarr checks on
            # every decode (the module docstring).
            compressors=[_codec(self.name), Crc32cCodec()] if compress else [Crc32cCodec()],
            fill_value=0,
            # Every chunk is written, so a lost chunk file is an error rather than zeros.
            config={"write_empty_chunks": True},
        )

    def write(self, block: np.ndarray) -> None:
        block = np.ascontiguousarray(block, dtype=self.dtype)
        if block.shape[1:] != self.shape[1:] or self._next + len(block) > self.shape[0]:
            raise StoreError(
                f"partition array {self.name}: block of shape {block.shape} does not fit at row "
                f"{self._next} of {self.shape}."
            )
        if len(block):
            if self.array is None:
                self.array = self._create(block[: self._chunks[0]])
            _write_block(self.array, self._next, block)
            self._hash.update(block.view(np.uint8).reshape(-1))
            self._next += len(block)

    def close(self) -> str:
        """Check every row was written; return the content digest."""
        if self._next != self.shape[0]:
            raise StoreError(f"partition array {self.name}: {self._next} of {self.shape[0]} rows written.")
        if self.array is None:  # no rows
            self.array = self._create(None)
        return self._hash.hexdigest()


def _write_block(array: zarr.Array, start: int, block: np.ndarray) -> None:
    array[start : start + len(block)] = block


def write_array(group: zarr.Group, name: str, data: np.ndarray) -> str:
    """Write one array of the layout into ``group``; return its content digest.

    ``name`` is a layout path such as ``"nodes/x"``; the dtype must be the layout's.
    """
    data = np.asarray(data)
    writer = ArrayWriter(group, name, data.shape, data.dtype)
    for start in range(0, len(data), writer.block_rows):
        writer.write(data[start : start + writer.block_rows])
    return writer.close()


# --- reading ----------------------------------------------------------------------------

@dataclass(frozen=True)
class PartitionStore:
    """One partition, opened lazily: ``arrays`` are :class:`CheckedArray` s, read (and
    checked) on access.

    Attributes
    ----------
    part_id, num_parts, generation
        From the store's attributes (checked against the manifest).
    path
        Where the store is (URL or local path).
    attrs
        All group attributes (``counts``, ``undirected``, ``halo``, ``checksum``, ...).
    arrays
        ``"nodes/global_nid"``, ``"nodes/x"``, ... → :class:`CheckedArray`.
    manifest
        The output's manifest (None when opened with :func:`open_store`).
    read_workers
        Threads over which :meth:`to_numpy` reads (1: one array after another);
        :data:`REMOTE_READ_WORKERS` for a store on an object store.
    """

    part_id: int
    num_parts: int
    generation: int
    path: str
    attrs: dict[str, Any]
    arrays: dict[str, CheckedArray] = field(repr=False)
    manifest: dict[str, Any] | None = field(default=None, repr=False)
    read_workers: int = field(default=1, repr=False)

    def __getitem__(self, name: str) -> CheckedArray:
        return self.arrays[name]

    @property
    def global_nid(self) -> CheckedArray:
        return self.arrays["nodes/global_nid"]

    @property
    def x(self) -> CheckedArray:
        return self.arrays["nodes/x"]

    @property
    def y(self) -> CheckedArray:
        return self.arrays["nodes/y"]

    @property
    def split(self) -> CheckedArray:
        return self.arrays["nodes/split"]

    @property
    def is_master(self) -> CheckedArray:
        return self.arrays["nodes/is_master"]

    @property
    def indptr(self) -> CheckedArray:
        return self.arrays["edges/indptr"]

    @property
    def indices(self) -> CheckedArray:
        return self.arrays["edges/indices"]

    @property
    def is_halo(self) -> CheckedArray | None:
        return self.arrays.get("edges/is_halo")

    @property
    def num_nodes(self) -> int:
        return int(self.arrays["nodes/global_nid"].shape[0])

    @property
    def num_edges(self) -> int:
        return int(self.arrays["edges/indices"].shape[0])

    @property
    def undirected(self) -> bool:
        return bool(self.attrs.get("undirected", False))

    def to_numpy(self, names: list[str] | None = None) -> dict[str, np.ndarray]:
        """Read arrays (all by default) into memory, every chunk checked.

        With :attr:`read_workers` above 1 (a store on an object store), blocks of all the
        arrays are read at once (:func:`asepr.storage.integrity.checked_array.read_concurrently`), else
        one array after another.
        """
        selected = {name: self.arrays[name] for name in (names or list(self.arrays))}
        if self.read_workers > 1:
            return read_concurrently(selected, self.read_workers)
        return {name: array[...] for name, array in selected.items()}

    def checksum_mismatch(self, entry: dict[str, Any]) -> bool:
        """Whether a manifest entry names another checksum than the store's attrs (or none)."""
        return entry.get("checksum") != self.attrs.get("checksum")


def open_group_readonly(url: str, storage_options: dict | None = None, *,
                        require_chunks: bool = False) -> zarr.Group:
    """Open a Zarr group for reading: zarr's ``LocalStore`` locally, else its
    ``FsspecStore``; with ``require_chunks``, through
    :class:`asepr.storage.partitions.chunk_stores.RequireChunks` (a missing chunk is an error).

    Opened as Zarr format 3 first, as this project writes every group: zarr then reads
    the group's ``zarr.json`` alone instead of also asking for the format 2 documents
    (four requests to an object store for one); a group that is not format 3 is left to
    zarr's own detection.
    """
    fs, path = resolve(url, storage_options)
    if is_local(fs):
        if not os.path.isdir(path):
            raise FileNotFoundError(f"no directory {path}")
        store = LocalStore(path, read_only=True)
    else:
        store = FsspecStore.from_url(str(url), storage_options=storage_options, read_only=True)
    store = RequireChunks(store) if require_chunks else store
    try:
        return zarr.open_group(store=store, mode="r", zarr_format=3)
    except zarr.errors.GroupNotFoundError:
        return zarr.open_group(store=store, mode="r")


def open_finished_group(url: str, storage_options: dict | None, *, what: str, fmt: str, noun: str,
                        written_by: str, fix_unreadable: str, fix_unfinished: str,
                        require_chunks: bool = False) -> zarr.Group:
    """Open a group that a writer finished: readable, attrs ``format == fmt`` and a
    checksum (set last). StoreError naming ``what`` and ``url`` otherwise."""
    try:
        group = open_group_readonly(url, storage_options, require_chunks=require_chunks)
    except (FileNotFoundError, zarr.errors.GroupNotFoundError, ValueError, OSError) as exc:
        raise StoreError(
            format_problem(f"{what} {url}", written_by, f"nothing readable ({type(exc).__name__}: {exc})",
                           fix_unreadable)
        ) from exc
    attrs = dict(group.attrs)
    if attrs.get("format") != fmt or "checksum" not in attrs:
        raise StoreError(
            format_problem(f"{what} {url}", f'a finished {noun} (attrs format "{fmt}" and a checksum)',
                           f"attrs {sorted(attrs)}", fix_unfinished)
        )
    return group


def open_store(path: str | Path, *, storage_options: dict | None = None,
               verify: bool = True) -> PartitionStore:
    """Open one store directly (no manifest): for the writer and for ``asepr verify``.

    Parameters
    ----------
    verify
        True (the default): every read of a damaged chunk raises. False: a damaged
        chunk's rows read as the fill value (:attr:`CheckedArray.fill_damaged`); only
        for ``asepr verify``, to describe a store it has already reported damaged.

    Raises
    ------
    StoreError
        The directory is not a finished partition store of this format version (an
        older one names the fix: partition again), its checksums are absent or null,
        or an array's codecs do not end with zarr's crc32c codec.
    """
    url = str(path)
    group = open_finished_group(
        url, storage_options, what="partition store", fmt=STORE_FORMAT, noun="store",
        written_by="a Zarr group written by `asepr partition`",
        fix_unreadable="rerun `asepr partition ... --overwrite` to rewrite the output.",
        fix_unfinished="the store is unfinished or foreign; rerun `asepr partition`.",
        require_chunks=True,
    )
    attrs = dict(group.attrs)
    if attrs.get("format_version") != STORE_VERSION:
        raise StoreError(format_problem(
            f"partition store {url}, attrs format_version",
            f"{STORE_VERSION} (chunks checked by zarr's crc32c codec)", repr(attrs.get("format_version")),
            "this store was written by another version of asepr (format 2 kept its chunk digests in "
            "attrs); partition the input again with this version: `asepr partition INPUT OUT ... "
            "--overwrite`."))
    names = [*NODE_ARRAYS, *EDGE_ARRAYS] + (["edges/is_halo"] if attrs.get("halo") else [])
    _require_checksums(url, attrs, names)
    where = f"partition {attrs.get('part_id')} ({url})"
    workers = 1 if is_local_url(url, storage_options) else REMOTE_READ_WORKERS
    arrays = {}
    for name, array in zip(names, _open_arrays(group, names, workers)):
        if isinstance(array, Exception):  # a missing or unparsable array is the finding
            found = "no such array" if isinstance(array, KeyError) else f"{type(array).__name__}: {array}"
            raise StoreError(format_problem(f"partition store {url}", f"an array {name}", found,
                                            DAMAGED_STORE_FIX)) from array
        if not has_crc32c(array):
            raise StoreError(format_problem(
                f"{where}, array {name}, zarr.json codecs", "a chain that ends with zarr's crc32c codec",
                repr([type(c).__name__ for c in array.compressors]), DAMAGED_STORE_FIX))
        arrays[name] = CheckedArray(name, array, where, fill_damaged=not verify)
    rules = store_rules(len(arrays["nodes/global_nid"]), len(arrays["edges/indices"]))
    for name, array in arrays.items():
        array.rule = rules.get(name)  # every read checked against the layout (not with verify=False)
    return PartitionStore(
        part_id=int(attrs["part_id"]),
        num_parts=int(attrs["num_parts"]),
        generation=int(attrs["generation"]),
        path=url,
        attrs=attrs,
        arrays=arrays,
        read_workers=workers,
    )


def _open_arrays(group: zarr.Group, names: list[str], workers: int) -> list[zarr.Array | Exception]:
    """``group[name]`` of each name, or the exception it raised; with ``workers`` above 1,
    that many at once (each is a request for the array's ``zarr.json`` on an object store)."""
    def one(name: str) -> zarr.Array | Exception:
        try:
            return group[name]
        except Exception as exc:  # noqa: BLE001 - returned, for the caller to name
            return exc

    if workers <= 1:
        return [one(name) for name in names]
    with ThreadPoolExecutor(max_workers=min(workers, len(names)), thread_name_prefix="asepr-open") as pool:
        return list(pool.map(one, names))


def _require_checksums(url: str, attrs: dict[str, Any], names: list[str]) -> None:
    """A finished store has a content digest per array and the checksum that combines them."""
    recorded = attrs.get("array_checksums")
    if not isinstance(recorded, dict) or sorted(recorded) != sorted(names) or not all(
            isinstance(v, str) and len(v) == 64 for v in recorded.values()):
        found = sorted(recorded) if isinstance(recorded, dict) else repr(recorded)
        raise StoreError(format_problem(f"partition store {url}, attrs array_checksums",
                                        f"a sha256 for each of {names}", f"{found}", DAMAGED_STORE_FIX))
    if attrs.get("checksum") != combine_digests(recorded):
        raise StoreError(format_problem(f"partition store {url}, attrs checksum",
                                        "the sha256 that combines array_checksums",
                                        repr(attrs.get("checksum")), DAMAGED_STORE_FIX))
