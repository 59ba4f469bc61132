"""Stages ⑧ and ⑨: build one partition's store from its spill segments.

Each partition is finalised by tasks with exactly one writer per store:
:func:`finalize_edges` reads the partition's edge segments, chooses its node set and
writes the CSR; then the node rows, the attributes and the checksum are written and
the store is renamed from its temporary name into place, either by
:func:`finalize_nodes_from_table` (``asepr partition``: one sequential sweep of the
validator's decoded node table writes the node rows of a group of partitions, three
chunks of memory per partition) or by :func:`finalize_nodes` (after the node rows were
gathered into spill files: :func:`~asepr.pipeline.store.write.write_partitions`; ingest has its own;
O(|V_p|) plus one 64 MiB block). Memory is O(|E_p|) for the CSR; nothing here grows
with the whole graph except passes over the ``int32 [N]`` master array.
The layout is documented in :mod:`asepr.storage.partitions.store`.
"""

from __future__ import annotations

import logging
import math
import os
import shutil
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import zarr

from asepr.pipeline.planning.needs import STORE_RATIO, STORE_TREE, Need, RunShape
from asepr.pipeline.store.route import KIND_ASSIGNED, KIND_HALO, edge_record, node_record, read_segments
from asepr.storage.commit import failpoints
from asepr.storage.commit.atomic import save_npy_atomic
from asepr.storage.errors import StoreError, format_problem
from asepr.storage.inputs.node_table import NodeTable
from asepr.storage.inputs.npy import load_npy
from asepr.storage.locations.location import create_group, open_group_rw, remove_tree, tree_bytes
from asepr.storage.partitions.store import (
    CHUNK_BYTES,
    STORE_FORMAT,
    STORE_VERSION,
    ArrayWriter,
    combine_digests,
    write_array,
)

__all__ = ["finalize_edges", "finalize_edges_needs", "finalize_nodes", "finalize_nodes_from_table",
           "finalize_nodes_needs", "finish_store", "row_index", "sweep_groups", "write_structure"]

log = logging.getLogger(__name__)

#: Bytes of features read per step of a node-table sweep (:func:`finalize_nodes_from_table`).
_SWEEP_BYTES = 16 << 20
#: Ids read at once from a partition's ``global_nid`` file during a sweep.
_ID_SLICE = 1 << 16


def write_structure(store_path: Path | str, global_nid: np.ndarray, is_master: np.ndarray, indptr: np.ndarray,
                    indices: np.ndarray, is_halo: np.ndarray | None,
                    storage_options: dict | None = None) -> dict[str, str]:
    """Create the partition's store afresh and write its node ids, master flags and CSR.

    Any leftover of an earlier attempt at ``store_path`` (a local path or a URL) is
    removed first; ``is_halo`` is written only for ``--halo 1``. Returns each array's digest.
    """
    remove_tree(store_path, storage_options)
    group = create_group(store_path, storage_options)
    digests = {
        "nodes/global_nid": write_array(group, "nodes/global_nid", global_nid),
        "nodes/is_master": write_array(group, "nodes/is_master", is_master),
        "edges/indptr": write_array(group, "edges/indptr", indptr),
        "edges/indices": write_array(group, "edges/indices", indices),
    }
    if is_halo is not None:
        digests["edges/is_halo"] = write_array(group, "edges/is_halo", is_halo)
    return digests


def _key_bits(n: int) -> int | None:
    """Bits of a part-local id when a sort key packs two of them (and a halo flag) into
    an ``int64`` by shifts; None for partitions too large for that (then ``n``-ary keys)."""
    bits = max(1, (n - 1).bit_length())
    return bits if 2 * bits + 1 <= 63 else None


def _edge_keys(local_src: np.ndarray, local_dst: np.ndarray, n: int, num_owned: int | None) -> np.ndarray:
    """One ``int64`` sort key per edge: (source row, destination[, halo flag]).

    Sorting the keys (no argsort, no permutation array) orders the rows, sorts each
    row, and puts an assigned edge before its halo duplicate (``num_owned``: the owned
    edges come first; None without a halo); the key then decodes back
    (:func:`_key_destinations`). The ids are packed by shifts where they fit
    (:func:`_key_bits`; the same order as ``src * n + dst``, and cheaper than the
    multiply and modulo), else as ``src * n + dst``.
    """
    key = local_src.astype(np.int64)
    bits = _key_bits(n)
    if bits is not None:
        key <<= bits
        key |= local_dst
    else:
        key *= max(n, 1)
        key += local_dst
    if num_owned is not None:
        key *= 2
        key[num_owned:] += 1
    return key


def _key_destinations(key: np.ndarray, n: int) -> np.ndarray:
    """The destination of each sorted key of :func:`_edge_keys` (halo flag shifted out), in place."""
    bits = _key_bits(n)
    if bits is not None:
        key &= (1 << bits) - 1
        return key
    return key % max(n, 1)


def finalize_edges(
    part_id: int,
    *,
    route_spills: list[tuple[Path, Path]],
    master_path: str,
    store_path: str,
    global_nid_path: str,
    halo: int,
    narrow: bool = False,
    storage_options: dict | None = None,
) -> dict[str, Any]:
    """Write partition ``part_id``'s node ids, master flags and CSR into a new store.

    Parameters
    ----------
    route_spills
        ``(bin, idx)`` of every edge spill file (:func:`asepr.pipeline.store.route.route_edge_shard`).
    master_path
        The ``int32 [N]`` master array (``.npy``).
    store_path
        The store's temporary path (created afresh): a local path, or a URL of the
        output's object store, opened with ``storage_options``.
    global_nid_path
        Where to save the sorted ``global_nid`` array for the node gather.
    narrow
        The spills hold ``int32`` records (:func:`~asepr.pipeline.store.route.edge_record`).

    Returns
    -------
    dict with ``digests`` (per array), ``counts`` and ``index_dtype``.
    """
    records = read_segments(route_spills, part_id, edge_record(narrow))
    empty = np.zeros(0, dtype=edge_record(narrow))
    owned = records.get(KIND_ASSIGNED, empty)
    copies = records.get(KIND_HALO, empty)
    del records
    master = load_npy(master_path, mmap_mode="r")
    masters_here = np.flatnonzero(np.asarray(master) == part_id).astype(np.int64)
    src = np.concatenate([owned["src"], copies["src"]])
    dst = np.concatenate([owned["dst"], copies["dst"]])
    num_owned = len(owned)
    del owned, copies
    # An O(N) bitmap and a global -> part-local id map instead of sorting the endpoints:
    # N bytes + 8N, once.
    present = np.zeros(len(master), dtype=bool)
    present[src] = True
    present[dst] = True
    present[masters_here] = True
    global_nid = np.flatnonzero(present).astype(np.int64)
    n = len(global_nid)
    index_dtype = np.int32 if n < 2**31 else np.int64
    local_of_global = np.cumsum(present, dtype=index_dtype)
    local_of_global -= 1
    del present
    local_src = local_of_global[src]
    local_dst = local_of_global[dst]
    del src, dst, local_of_global
    indptr = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(np.bincount(local_src, minlength=n), out=indptr[1:])
    key = _edge_keys(local_src, local_dst, n, num_owned if halo else None)
    del local_src, local_dst
    key.sort()
    is_halo = (key & 1).astype(bool) if halo else None
    if halo:
        key >>= 1
    indices = _key_destinations(key, n).astype(index_dtype)
    del key
    is_master = np.asarray(master[global_nid]) == part_id

    digests = write_structure(store_path, global_nid, is_master, indptr, indices, is_halo if halo else None,
                              storage_options)
    save_npy_atomic(global_nid_path, global_nid)
    counts = {
        "nodes": int(n),
        "masters": int(is_master.sum()),
        "edges": len(indices),
        "halo_edges": int(len(indices) - num_owned),
    }
    return {"part_id": int(part_id), "digests": digests, "counts": counts,
            "index_dtype": np.dtype(index_dtype).name}


def row_index(
    gather_spills: list[tuple[Path, Path]], part_id: int, dtype: np.dtype
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Where each gathered row of ``part_id`` is: (spill file, record number, ``local`` field).

    Reads only the ``local`` field of the partition's records (through a memory map),
    so the features stay on disk until they are written out block by block.
    """
    files, records, local = [], [], []
    for f, (bin_path, idx_path) in enumerate(gather_spills):
        index = load_npy(idx_path)
        mine = index[index[:, 0] == part_id]
        if not len(mine):
            continue
        spill = np.memmap(bin_path, dtype=dtype, mode="r")
        for _, _, offset, count in mine:
            if offset + count > len(spill):
                raise StoreError(
                    format_problem(
                        f"spill file {bin_path}",
                        f"{count} records at record {offset}",
                        f"a file of {len(spill)} records",
                        "the staging directory is damaged; rerun with --overwrite to start clean.",
                    )
                )
            local.append(np.array(spill["local"][offset : offset + count]))
            records.append(np.arange(offset, offset + count, dtype=np.int64))
            files.append(np.full(count, f, dtype=np.int32))
        del spill
    if not local:
        return np.zeros(0, np.int32), np.zeros(0, np.int64), np.zeros(0, np.int64)
    return np.concatenate(files), np.concatenate(records), np.concatenate(local)


def finalize_nodes(
    part_id: int,
    edges_info: dict[str, Any],
    *,
    gather_spills: list[tuple[Path, Path]],
    store_path: str,
    final_path: str,
    feat_dim: int,
    attrs: dict[str, Any],
    storage_options: dict | None = None,
) -> dict[str, Any]:
    """Write partition ``part_id``'s node rows and attributes, then rename it into place.

    ``edges_info`` is :func:`finalize_edges`'s result; ``attrs`` holds the
    run-wide attributes (``num_parts``, ``generation``, ``undirected``, ``halo``).
    Returns the partition's manifest entry (without ``path``).
    """
    counts = edges_info["counts"]
    n = counts["nodes"]
    dtype = node_record(feat_dim)
    files, records, local = row_index(gather_spills, part_id, dtype)
    filled = np.zeros(n, dtype=bool)
    filled[local] = True
    if len(local) != n or not filled.all():
        raise StoreError(
            format_problem(
                f"partition {part_id}",
                f"one node row from the node shards for each of its {n:,} nodes",
                f"{len(local):,} rows covering {int(filled.sum()):,} nodes",
                "the node shards changed during the run; rerun `asepr partition` with --overwrite.",
            )
        )
    del filled
    order = np.argsort(local, kind="stable")
    del local
    group = open_group_rw(store_path, storage_options)
    digests = dict(edges_info["digests"])
    x_writer = ArrayWriter(group, "nodes/x", (n, feat_dim), np.float32)
    y = np.empty(n, dtype=np.int64)
    split = np.empty(n, dtype=np.int8)
    # Rows go out in part_local_nid order, one chunk-aligned block at a time, so a
    # task holds O(n) indices plus one block of features, never the whole x twice.
    for start in range(0, n, x_writer.block_rows):
        pick = order[start : start + x_writer.block_rows]
        block = np.empty(len(pick), dtype=dtype)
        pick_files, pick_records = files[pick], records[pick]
        for f in np.unique(pick_files):
            mine = pick_files == f
            spill = np.memmap(gather_spills[f][0], dtype=dtype, mode="r")
            block[mine] = spill[pick_records[mine]]
            del spill
        x_writer.write(block["x"])
        y[start : start + len(pick)] = block["y"]
        split[start : start + len(pick)] = block["split"]
        del block
    digests["nodes/x"] = x_writer.close()
    del order, files, records
    return finish_store(group, part_id, edges_info, digests, y, split, feat_dim=feat_dim, attrs=attrs,
                        store_path=store_path, final_path=final_path, storage_options=storage_options)


class _Column:
    """One array of a partition written front to back through a one-block buffer."""

    def __init__(self, group: zarr.Group, name: str, shape: tuple[int, ...], dtype):
        self.writer = ArrayWriter(group, name, shape, dtype, block_bytes=CHUNK_BYTES)
        self.block = np.empty((min(shape[0], self.writer.block_rows), *shape[1:]), dtype=dtype)
        self.filled = 0
        self.left = shape[0]  # rows not yet taken

    def take(self, source: np.ndarray, rows: np.ndarray) -> None:
        """Append ``source[rows]`` (rows in range), writing every full block."""
        while len(rows):
            m = min(len(self.block) - self.filled, len(rows))
            # mode="clip" writes straight into the block (rows are in range)
            np.take(source, rows[:m], axis=0, out=self.block[self.filled:self.filled + m], mode="clip")
            self.filled += m
            self.left -= m
            rows = rows[m:]
            if self.filled == len(self.block) or not self.left:
                self.writer.write(self.block[:self.filled])
                self.filled = 0


class _Swept:
    """One partition of a sweep: its sorted ids, read from their ``.npy`` as the sweep
    passes them, and its ``x``, ``y`` and ``split`` written a block at a time."""

    def __init__(self, part_id: int, edges_info: dict[str, Any], global_nid_path: str, store_path: str,
                 table: NodeTable, storage_options: dict | None = None):
        self.part_id, self.edges_info = part_id, edges_info
        self.n = edges_info["counts"]["nodes"]
        self.ids = _IdReader(global_nid_path, part_id, self.n, table.num_nodes)
        self.group = open_group_rw(store_path, storage_options)
        self.columns = {"x": _Column(self.group, "nodes/x", (self.n, table.feat_dim), np.float32),
                        "y": _Column(self.group, "nodes/y", (self.n,), np.int64),
                        "split": _Column(self.group, "nodes/split", (self.n,), np.int8)}

    def take(self, step: dict[str, np.ndarray], start: int, stop: int) -> None:
        """Take its rows among the sweep step's ids ``start..stop-1``."""
        local = self.ids.until(stop) - start
        for name, column in self.columns.items():
            column.take(step[name], local)

    def digests(self) -> dict[str, str]:
        self.ids.close()
        return {f"nodes/{name}": column.writer.close() for name, column in self.columns.items()}


class _IdReader:
    """A partition's sorted ``global_nid`` (:func:`finalize_edges` saved it as ``.npy``),
    read in increasing slices and checked as it goes: increasing, in ``[0, N)``, ``n``
    ids. Memory is one slice, not the partition's ids."""

    def __init__(self, path: str, part_id: int, n: int, num_nodes: int):
        self.path, self.part_id, self.n, self.num_nodes = path, part_id, n, num_nodes
        self._file = open(path, "rb")
        version = np.lib.format.read_magic(self._file)
        if version not in ((1, 0), (2, 0)):
            self._bad(f"a .npy file of format version {version}")
        read_header = np.lib.format.read_array_header_1_0 if version == (1, 0) else \
            np.lib.format.read_array_header_2_0
        shape, fortran, dtype = read_header(self._file)
        if len(shape) != 1 or shape[0] != n or fortran or dtype != np.dtype(np.int64):
            self._bad(f"{dtype} array of shape {shape}")
        self.read = 0
        self.last = -1
        self._pending = np.zeros(0, dtype=np.int64)

    def _bad(self, found: str) -> None:
        raise StoreError(format_problem(
            f"partition {self.part_id}, node id file {self.path}",
            f"{self.n:,} increasing node ids in [0, {self.num_nodes:,})", found,
            "the staging directory is damaged; rerun with --overwrite to start clean."))

    def until(self, stop: int) -> np.ndarray:
        """The next ids below ``stop``."""
        out = []
        while True:
            if not len(self._pending) and self.read < self.n:
                count = min(self.n - self.read, _ID_SLICE)
                self._pending = np.fromfile(self._file, dtype=np.int64, count=count)
                if len(self._pending) != count:
                    self._bad(f"a file of {self.read + len(self._pending):,} ids")
                if (self._pending[0] <= self.last or (np.diff(self._pending) <= 0).any()
                        or self._pending[-1] >= self.num_nodes or self._pending[0] < 0):
                    self._bad(f"ids out of order or range near id #{self.read:,}")
                self.read += count
                self.last = int(self._pending[-1])
            cut = int(np.searchsorted(self._pending, stop, side="left"))
            out.append(self._pending[:cut])
            self._pending = self._pending[cut:]
            if len(self._pending) or self.read == self.n:
                return np.concatenate(out) if len(out) > 1 else out[0]

    def close(self) -> None:
        self._file.close()


def sweep_groups(node_counts: dict[int, int], groups: int) -> list[list[int]]:
    """The partitions split into at most ``groups`` sweeps of about equal node rows
    (largest first, each to the lightest sweep)."""
    sweeps: list[list[int]] = [[] for _ in range(max(1, min(groups, len(node_counts))))]
    rows = [0] * len(sweeps)
    for p in sorted(node_counts, key=lambda q: (-node_counts[q], q)):
        lightest = rows.index(min(rows))
        sweeps[lightest].append(p)
        rows[lightest] += node_counts[p]
    return [sorted(s) for s in sweeps if s]


def _table_steps(table: NodeTable, step_bytes: int) -> Iterator[tuple[int, int, dict[str, np.ndarray]]]:
    """``(start, stop, {x, y, split})`` for consecutive steps of about ``step_bytes`` of
    features (none for 0), the next step read on a thread while the caller uses this
    one: the table is read with ``O_DIRECT`` (:mod:`asepr.storage.inputs.node_table`), which has no
    kernel read-ahead, so this is what overlaps the reads with the writes. Two steps are
    in memory at once."""
    if not step_bytes:
        return
    step = max(1, step_bytes // max(1, 4 * table.feat_dim))

    def read(start: int) -> tuple[int, int, dict[str, np.ndarray]]:
        stop = min(table.num_nodes, start + step)
        return start, stop, {"x": table.rows(start, stop), "y": table.column("y", start, stop),
                             "split": table.column("split", start, stop)}

    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="asepr-table-read") as pool:
        ahead = None
        for start in range(0, table.num_nodes, step):
            current, ahead = ahead, pool.submit(read, start)
            if current is not None:
                yield current.result()
        if ahead is not None:
            yield ahead.result()


def finalize_nodes_from_table(
    part_ids: list[int],
    edges_infos: list[dict[str, Any]],
    *,
    table: NodeTable,
    global_nid_paths: list[str],
    store_paths: list[str],
    final_paths: list[str],
    attrs: dict[str, Any],
    ways: int = 1,
    storage_options: dict | None = None,
) -> list[dict[str, Any]]:
    """:func:`finalize_nodes` for several partitions, their rows taken from the
    validator's decoded node table (:mod:`asepr.storage.inputs.node_table`) in one sequential sweep.

    A partition's rows are in ``global_nid`` order, so a sweep in id order produces each
    partition's ``x``, ``y`` and ``split`` front to back: they are written a chunk at a
    time from one-chunk buffers. The table is read once (instead of mapping most of its
    pages once per partition), a step ahead on a thread; each step's partitions are
    served by ``ways`` threads (groups of about equal rows, :func:`sweep_groups`), so
    the threads of one process share one read of the table. Memory is three chunks per
    partition, one slice of each one's ids and two steps of the table, whatever |V|.
    Returns the manifest entries.
    """
    swept = [_Swept(p, info, path, store, table, storage_options)
             for p, info, path, store in zip(part_ids, edges_infos, global_nid_paths, store_paths)]
    todo = [s for s in swept if s.n]
    groups = [[todo[i] for i in group] for group in sweep_groups({i: s.n for i, s in enumerate(todo)}, ways)]

    def serve(group: list[_Swept], rows: dict[str, np.ndarray], start: int, stop: int) -> None:
        for s in group:
            s.take(rows, start, stop)

    def finish(s: _Swept, final_path: str, store_path: str) -> dict[str, Any]:
        digests = {**s.edges_info["digests"], **s.digests()}
        return finish_store(s.group, s.part_id, s.edges_info, digests, None, None, feat_dim=table.feat_dim,
                            attrs=attrs, store_path=store_path, final_path=final_path,
                            storage_options=storage_options)

    with ThreadPoolExecutor(max_workers=max(1, len(groups)), thread_name_prefix="asepr-sweep") as pool:
        for start, stop, rows in _table_steps(table, _SWEEP_BYTES if todo else 0):
            for done in [pool.submit(serve, group, rows, start, stop) for group in groups]:
                done.result()
        return list(pool.map(finish, swept, final_paths, store_paths))


def finish_store(group: zarr.Group, part_id: int, edges_info: dict[str, Any], digests: dict[str, str],
                 y: np.ndarray | None, split: np.ndarray | None, *, feat_dim: int, attrs: dict[str, Any],
                 store_path: str, final_path: str, storage_options: dict | None = None) -> dict[str, Any]:
    """Write a store's labels and splits (None: written already), then its attributes and
    checksum; rename it into place.

    ``digests`` holds the digests of every array written so far (structure and
    ``nodes/x``). The attributes are written last, so a store without them is
    unfinished; the rename to ``final_path`` marks it finished. A store in an object
    store is written where it stays (``final_path == store_path``, no rename there):
    its attributes, one PUT written last, are what marks it finished.

    Returns
    -------
    dict
        The partition's manifest entry (without ``path``).
    """
    if y is not None:
        digests["nodes/y"] = write_array(group, "nodes/y", y)
    if split is not None:
        digests["nodes/split"] = write_array(group, "nodes/split", split)
    failpoints.failpoint("finalize")
    checksum = combine_digests(digests)
    counts = {**edges_info["counts"], "feat_dim": int(feat_dim)}
    group.attrs.update(
        {
            "format": STORE_FORMAT,
            "format_version": STORE_VERSION,
            "part_id": int(part_id),
            **attrs,
            "counts": counts,
            "index_dtype": edges_info["index_dtype"],
            "array_checksums": digests,
            "checksum": checksum,
        }
    )
    if str(store_path) != str(final_path):
        shutil.rmtree(final_path, ignore_errors=True)
        os.rename(store_path, final_path)
    failpoints.failpoint("between-commits")
    return {"part_id": int(part_id), "checksum": checksum, "counts": counts,
            "bytes": tree_bytes(final_path, storage_options)}


def finalize_edges_needs(s: RunShape) -> Need:
    """Memory and disk of :func:`finalize_edges`, per partition: its routed records, read
    and concatenated (32 B per edge row), then ``src``/``dst`` and their part-local ids;
    the mapped ``master`` int32[N] and its comparison, ``present`` bool[N],
    ``local_of_global`` int64[N]; ``global_nid``, ``indptr``, the counts (24 B per node).
    A task is sized for the largest partition, the stores for all of them."""
    task = 32 * s.e_p + 14 * s.n + 24 * s.n_p
    stores = (s.n_all * (8 / STORE_RATIO["global_nid"] + 8 / STORE_RATIO["indptr"] + 1 / STORE_RATIO["flags"])
              + s.e_all * (4 / STORE_RATIO["indices"] + (1 / STORE_RATIO["flags"] if s.halo_copies else 0))
              + s.k * STORE_TREE)
    return Need(task=task, tasks=s.k, written=stores + 8 * s.n_all, kept=stores)


def finalize_nodes_needs(s: RunShape) -> Need:
    """Memory and disk of :func:`finalize_nodes_from_table`: ``sweeps`` tasks (one per
    worker; a process's threads share one), each sweeping the decoded node table for
    ``k / sweeps`` partitions: per partition a one-chunk buffer of each of ``x``, ``y``
    and ``split`` (and two more of ``x``: zarr's encoded chunk and the aligned copy that
    :class:`asepr.storage.partitions.chunk_stores.DirectLocalStore` writes from) and a slice of
    its ids; two steps of the table (16 MiB of features with their labels and splits:
    the one served and the one read ahead) and the ids taken from one."""
    sweeps = max(1, min(s.k, s.sweeps))
    per_sweep = math.ceil(s.k / sweeps)
    step_rows = min(s.n, _SWEEP_BYTES // (4 * max(1, s.d)))  # a step reads at most the table
    # x: the block being filled, zarr's encoded chunk and DirectLocalStore's aligned copy.
    buffers = (3 * min(s.n_p * 4 * s.d, CHUNK_BYTES) + min(s.n_p * 8, CHUNK_BYTES) + min(s.n_p, CHUNK_BYTES)
               + 8 * 65_536)
    task = per_sweep * buffers + 2 * step_rows * (4 * s.d + 9) + 8 * min(s.n_p, step_rows)
    stores = s.n_all * (4 * s.d / s.x_ratio + 8 / STORE_RATIO["y"] + 1 / STORE_RATIO["flags"])
    return Need(task=task, tasks=sweeps, written=stores, kept=stores)
