"""`asepr bench read`: how fast one partition's store loads back into numpy.

What a trainer does at start-up: :func:`storage.open_partition` then ``to_numpy()`` of
every array, each chunk checked against its CRC-32C as every read is. Throughput is
raw (decoded) bytes over wall seconds. ``warm`` reads with the store's files in the
page cache (a second read); ``cold`` first asks the kernel to drop the store's cached
pages (``posix_fadvise(DONTNEED)``, local stores only, no root needed), so the files
come from disk.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from storage.manifest import read_manifest
from storage.output_stores import open_partition
from storage.partition_store import store_bytes
from workflows.bench import markdown_table

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


def bench_read(out: str | Path, parts: list[int] | None = None, *, repeat: int = 3,
               cold: bool = True) -> list[dict]:
    """Time loading partitions of ``out`` into numpy; best of ``repeat`` per mode.

    Returns one row per partition and mode (``cold`` then ``warm``).
    """
    manifest = read_manifest(str(out))
    ids = parts if parts is not None else [int(e["part_id"]) for e in manifest["partitions"]]
    rows = []
    for part_id in ids:
        store = open_partition(out, part_id)
        local = Path(store.path)
        stored = store_bytes(local) / 2**20 if local.exists() else float("nan")
        modes = (["cold"] if cold and local.exists() else []) + ["warm"]
        for mode in modes:
            best = None
            raw = 0
            for _ in range(max(1, repeat)):
                if mode == "cold":
                    drop_cached_pages(local)
                t0 = time.perf_counter()
                arrays = open_partition(out, part_id).to_numpy()
                seconds = time.perf_counter() - t0
                raw = sum(a.nbytes for a in arrays.values())
                del arrays
                best = seconds if best is None else min(best, seconds)
            rows.append({
                "part_id": part_id, "cache": mode, "nodes": store.num_nodes, "edges": store.num_edges,
                "raw_mib": raw / 2**20, "stored_mib": stored,
                "seconds": best, "mb_per_s": raw / 1e6 / best if best else float("nan"),
            })
    return rows


def report(out: str | Path, rows: list[dict], repeat: int) -> str:
    return "\n".join([
        "# asepr bench read",
        "",
        (f"Output {out}; run {time.strftime('%Y-%m-%d %H:%M:%S')}; best of {repeat} per row. "
         "`mb_per_s` is raw (decoded) MB (10^6 bytes) per second of "
         "`open_partition(...).to_numpy()`; `cold` evicts the store's files from the page "
         "cache before each read."),
        "",
        markdown_table(rows, COLUMNS),
        "",
    ])
