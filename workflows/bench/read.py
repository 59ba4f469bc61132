"""`asepr bench read`: how fast one partition's store loads back into numpy.

What a trainer does at start-up: :func:`asepr.storage.open_partition` then ``to_numpy()`` of
every array, each chunk checked as every read is. Throughput is raw (decoded) bytes
over wall seconds. ``warm`` reads with the store's files in the page cache (a second
read); ``cold`` first asks the kernel to drop the store's cached pages
(``posix_fadvise(DONTNEED)``, local stores only, no root needed), so the files come
from disk. A store on an object store (an fsspec URL such as ``s3://bucket/out``) is
read over the network as a trainer on another machine reads it: ``remote`` rows, with
no page cache of this machine to drop. Several outputs given together (the same
partitions written locally and to a store, say) are read in turn, partition by
partition, so that their rows are measured side by side under the same load.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from asepr.storage.locations.fs import resolve
from asepr.storage.locations.location import is_local, tree_bytes
from asepr.storage.locations.remote import remote_errors_as_problems
from asepr.storage.partitions.manifest import read_manifest
from asepr.storage.partitions.output_stores import open_partition
from asepr.workflows.bench.tables import markdown_table

__all__ = ["bench_read", "drop_cached_pages"]

COLUMNS = ["part_id", "cache", "nodes", "edges", "raw_mib", "stored_mib", "seconds", "mb_per_s"]


def drop_cached_pages(path: str | Path) -> None:
    """Ask the kernel to evict every file under ``path`` from the page cache. Dirty
    pages are written first (``fsync``), or they would stay."""
    for root, _, files in os.walk(path):
        for name in files:
            fd = os.open(os.path.join(root, name), os.O_RDONLY)
            try:
                os.fsync(fd)
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            finally:
                os.close(fd)


def _timed_rows(out: str, part_id: int, modes: list[str], repeat: int, storage_options: dict | None) -> list[dict]:
    """Best of ``repeat`` loads of one partition per mode."""
    store = open_partition(out, part_id, storage_options=storage_options)
    stored = tree_bytes(store.path, storage_options) / 2**20
    rows = []
    for mode in modes:
        best, raw = None, 0
        for _ in range(max(1, repeat)):
            if mode == "cold":
                drop_cached_pages(store.path)
            t0 = time.perf_counter()
            arrays = open_partition(out, part_id, storage_options=storage_options).to_numpy()
            seconds = time.perf_counter() - t0
            raw = sum(a.nbytes for a in arrays.values())
            del arrays
            best = seconds if best is None else min(best, seconds)
        rows.append({
            "output": out, "part_id": part_id, "cache": mode, "nodes": store.num_nodes, "edges": store.num_edges,
            "raw_mib": raw / 2**20, "stored_mib": stored,
            "seconds": best, "mb_per_s": raw / 1e6 / best if best else float("nan"),
        })
    return rows


def bench_read(outputs: str | Path | list[str | Path], parts: list[int] | None = None, *, repeat: int = 3,
               cold: bool = True, storage_options: dict | None = None) -> list[dict]:
    """Time loading partitions of one output (or several, side by side) into numpy.

    Parameters
    ----------
    outputs
        One output of ``asepr partition``, or several with the same partition ids
        (paths or fsspec URLs); each partition is read from every output in turn.
    parts
        Partition ids (default: all of the first output's).
    repeat
        Best of ``repeat`` loads per row.
    cold
        Also read local stores with their pages evicted first.
    storage_options
        fsspec options of the remote outputs.

    Returns
    -------
    list of dict
        One row per output, partition and mode (``cold`` then ``warm`` for a local
        store, ``remote`` for one on an object store).
    """
    outs = [str(o) for o in (outputs if isinstance(outputs, (list, tuple)) else [outputs])]
    local = {out: is_local(resolve(out, storage_options)[0]) for out in outs}
    with remote_errors_as_problems(outs[0]):
        manifest = read_manifest(outs[0], storage_options=storage_options)
    ids = parts if parts is not None else [int(e["part_id"]) for e in manifest["partitions"]]
    rows = []
    for part_id in ids:
        for out in outs:
            modes = ((["cold"] if cold else []) + ["warm"]) if local[out] else ["remote"]
            with remote_errors_as_problems(out):
                rows += _timed_rows(out, part_id, modes, repeat, storage_options)
    return rows


def report(outputs: str | Path | list[str | Path], rows: list[dict], repeat: int) -> str:
    outs = [str(o) for o in (outputs if isinstance(outputs, (list, tuple)) else [outputs])]
    columns = (["output"] if len(outs) > 1 else []) + COLUMNS
    return "\n".join([
        "# asepr bench read",
        "",
        (f"Output{'s' if len(outs) > 1 else ''} {', '.join(outs)}; run {time.strftime('%Y-%m-%d %H:%M:%S')}; "
         f"best of {repeat} per row. `mb_per_s` is raw (decoded) MB (10^6 bytes) per second of "
         "`open_partition(...).to_numpy()`; `cold` evicts the store's files from the page "
         "cache before each read; `remote` reads from an object store over the network."),
        "",
        markdown_table(rows, columns),
        "",
    ])
