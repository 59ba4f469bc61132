"""Chunk integrity by external digests (store format 2) against zarr's crc32c codec.

Side by side in one run, on the arrays of one partition store (read into memory first):

write
  * ``format 2``: ``write_array`` of the format-2 writer (blosc or raw as the first chunk
    decides, raw chunks written with ``O_DIRECT`` by ``DirectChunkWriter``, a CRC-32C of
    every chunk's content kept in the array's attrs);
  * ``crc32c, LocalStore``: zarr's own write, the same chunks and compressors followed by
    ``Crc32cCodec``, through ``zarr.storage.LocalStore``;
  * ``crc32c, DirectLocalStore``: the same through ``storage.chunk_stores.DirectLocalStore``.

read (every array whole, then every array chunk by chunk as the trainers' feature store
reads it), cold (each file dropped from the page cache with ``posix_fadvise`` first) and
warm (read again at once):
  * ``format 2``: ``CheckedArray`` over the format-2 store (a listing of the store, zarr's
    read, a CRC-32C over each decoded chunk);
  * ``crc32c``: plain zarr arrays whose codec chain checks each chunk, opened through
    ``storage.chunk_stores.RequireChunks`` (a missing chunk is an error);
  * ``unchecked``: plain zarr over the format-2 store, no check at all (the floor).

It needs the format-2 modules (``storage/checked_array.py`` with ``ChunkCrcs`` and
``StoredKeys``, ``storage/direct_chunks.py``), which store format 3 removed, next to
the first ``storage/chunk_stores.py`` (the commit of store format 3), and a format-2 store to take the arrays from; the
README of this directory gives the commands.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np
import zarr
from zarr.codecs import Crc32cCodec
from zarr.storage import LocalStore

# The tree of store format 2 (see the docstring): its flat storage/ layout.
from storage.checked_array import CheckedArray, StoredKeys
from storage.chunk_stores import DirectLocalStore, RequireChunks
from storage.partition_store import create_store, open_store, write_array

BLOCK_BYTES = 64 << 20


def _files(root: Path) -> list[Path]:
    return [p for p in root.rglob("*") if p.is_file()]


def _fsync_all(root: Path) -> None:
    for path in _files(root):
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def _drop_cache(root: Path) -> None:
    for path in _files(root):
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


def _timed(fn) -> tuple[float, float]:
    wall, cpu = time.perf_counter(), time.process_time()
    fn()
    return time.perf_counter() - wall, time.process_time() - cpu


def write_format2(root: Path, data: dict[str, np.ndarray]) -> None:
    group = create_store(root)
    for name, array in data.items():
        write_array(group, name, array)


def write_crc32c(root: Path, data, compressors, store_cls) -> None:
    group = zarr.open_group(store=store_cls(root), mode="w")
    group.create_group("nodes")
    group.create_group("edges")
    for name, array in data.items():
        chunks, codecs = compressors[name]
        target = group.create_array(name, shape=array.shape, dtype=array.dtype, chunks=chunks,
                                    compressors=[*codecs, Crc32cCodec()], fill_value=0,
                                    config={"write_empty_chunks": True})
        row_bytes = max(1, array[:1].nbytes)
        rows = max(chunks[0], BLOCK_BYTES // row_bytes // chunks[0] * chunks[0])
        for start in range(0, len(array), rows):
            target[start:start + rows] = array[start:start + rows]


def _read_all(arrays) -> int:
    return sum(np.asarray(a[...]).nbytes for a in arrays.values())


def _read_chunks(arrays) -> int:
    total = 0
    for a in arrays.values():
        rows = a.chunks[0]
        for start in range(0, a.shape[0], rows):
            total += np.asarray(a[start:start + rows]).nbytes
    return total


def open_format2(root: Path, names) -> dict:
    group = zarr.open_group(str(root), mode="r")
    stored = StoredKeys(group.store_path.store)
    return {n: CheckedArray(n, group[n], "bench", stored) for n in names}


def open_crc32c(root: Path, names) -> dict:
    group = zarr.open_group(store=RequireChunks(LocalStore(root, read_only=True)), mode="r")
    return {n: group[n] for n in names}


def open_unchecked(root: Path, names) -> dict:
    group = zarr.open_group(str(root), mode="r")
    return {n: group[n] for n in names}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("store", help="a partition store (format 2) to take the arrays from")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--tmp", default=None, help="where to write (default: next to the store)")
    args = parser.parse_args()
    data = open_store(args.store).to_numpy()
    nbytes = sum(a.nbytes for a in data.values())
    tmp = Path(tempfile.mkdtemp(prefix="crc-bench-", dir=args.tmp or Path(args.store).parent))
    print(f"arrays: {', '.join(f'{n} {a.dtype}{list(a.shape)}' for n, a in data.items())}")
    print(f"{nbytes / 1e6:.1f} MB decoded; {args.rounds} rounds; files under {tmp}")
    results: dict[str, list[tuple[float, float]]] = {}

    def record(label, fn):
        results.setdefault(label, []).append(_timed(fn))

    writers = {"format 2": None, "crc32c, LocalStore": LocalStore, "crc32c, DirectLocalStore": DirectLocalStore}
    for _ in range(args.rounds):
        paths = {label: tmp / f"w{i}" for i, label in enumerate(writers)}
        for path in paths.values():
            shutil.rmtree(path, ignore_errors=True)
        record("write, format 2", lambda: write_format2(paths["format 2"], data))
        record("fsync, format 2", lambda: _fsync_all(paths["format 2"]))
        g = zarr.open_group(str(paths["format 2"]), mode="r")
        compressors = {n: (g[n].chunks, tuple(g[n].compressors)) for n in data}
        for label, cls in list(writers.items())[1:]:
            record(f"write, {label}", lambda: write_crc32c(paths[label], data, compressors, cls))
            record(f"fsync, {label}", lambda: _fsync_all(paths[label]))
        readers = {"format 2": (open_format2, paths["format 2"]),
                   "crc32c": (open_crc32c, paths["crc32c, LocalStore"]),
                   "unchecked": (open_unchecked, paths["format 2"])}
        for how, read in (("whole", _read_all), ("by chunk", _read_chunks)):
            for label, (opener, root) in readers.items():
                _drop_cache(root)
                record(f"read {how} cold, {label}", lambda: read(opener(root, list(data))))
                record(f"read {how} warm, {label}", lambda: read(opener(root, list(data))))
    shutil.rmtree(tmp, ignore_errors=True)
    for label in writers:
        results[f"write + fsync, {label}"] = [
            (w[0] + f[0], w[1] + f[1]) for w, f in zip(results[f"write, {label}"], results[f"fsync, {label}"])]
    print("\n| step | median s | min-max s | median CPU s | MB/s (median) |")
    print("|---|---|---|---|---|")
    for label, runs in results.items():
        walls, cpus = [r[0] for r in runs], [r[1] for r in runs]
        med = statistics.median(walls)
        print(f"| {label} | {med:.3f} | {min(walls):.3f}-{max(walls):.3f} | {statistics.median(cpus):.3f} "
              f"| {nbytes / 1e6 / med:,.0f} |")


if __name__ == "__main__":
    main()
