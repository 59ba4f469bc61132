"""Stages ⑧ and ⑨: build one partition's store from its spill segments.

Each partition is finalised on its own, by two Dask tasks with exactly one writer
each: :func:`finalize_edges` reads the partition's edge segments, chooses its node set
and writes the CSR; :func:`finalize_nodes` (after the node rows were gathered) writes
the node rows, the attributes and the checksum, and renames the store from its
temporary name into place. Memory is O(|E_p|) for the CSR and O(|V_p|) plus one
64 MiB block for the node rows of partition ``p`` (the features are copied from the
spill files block by block); nothing here grows with the whole graph except one pass
over the ``int32 [N]`` master array.
The layout is documented in :mod:`storage.partition_store`.
"""

from __future__ import annotations

import logging
import os
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import zarr

from pipeline.store.route import KIND_ASSIGNED, KIND_HALO, edge_record, node_record, read_segments
from storage import failpoints
from storage.atomic import save_npy_atomic
from storage.errors import StoreError, format_problem
from storage.node_table import NodeTable
from storage.partition_store import (
    STORE_FORMAT,
    STORE_VERSION,
    CHUNK_BYTES,
    ArrayWriter,
    combine_digests,
    create_store,
    store_bytes,
    write_array,
)

__all__ = ["finalize_edges", "finalize_nodes", "finalize_nodes_from_table", "finish_store", "row_index",
           "sweep_groups", "write_structure"]

log = logging.getLogger(__name__)

#: Bytes of features read per step of a node-table sweep (:func:`finalize_nodes_from_table`).
_SWEEP_BYTES = 16 << 20


def write_structure(store_path: Path, global_nid: np.ndarray, is_master: np.ndarray, indptr: np.ndarray,
                    indices: np.ndarray, is_halo: np.ndarray | None) -> dict[str, str]:
    """Create the partition's store afresh and write its node ids, master flags and CSR.

    Any leftover of an earlier attempt at ``store_path`` is removed first; ``is_halo``
    is written only for ``--halo 1``. Returns each array's digest.
    """
    shutil.rmtree(store_path, ignore_errors=True)
    group = create_store(store_path)
    digests = {
        "nodes/global_nid": write_array(group, "nodes/global_nid", global_nid),
        "nodes/is_master": write_array(group, "nodes/is_master", is_master),
        "edges/indptr": write_array(group, "edges/indptr", indptr),
        "edges/indices": write_array(group, "edges/indices", indices),
    }
    if is_halo is not None:
        digests["edges/is_halo"] = write_array(group, "edges/is_halo", is_halo)
    return digests


def finalize_edges(
    part_id: int,
    *,
    route_spills: list[tuple[Path, Path]],
    master_path: str,
    store_path: str,
    global_nid_path: str,
    halo: int,
    narrow: bool = False,
) -> dict[str, Any]:
    """Write partition ``part_id``'s node ids, master flags and CSR into a new store.

    Parameters
    ----------
    route_spills
        ``(bin, idx)`` of every edge spill file (:func:`pipeline.store.route.route_edge_shard`).
    master_path
        The ``int32 [N]`` master array (``.npy``).
    store_path
        The store's temporary path (created afresh).
    global_nid_path
        Where to save the sorted ``global_nid`` array for the node gather.
    narrow
        The spills hold ``int32`` records (:func:`~pipeline.store.route.edge_record`).

    Returns
    -------
    dict with ``digests`` (per array), ``counts`` and ``index_dtype``.
    """
    records = read_segments(route_spills, part_id, edge_record(narrow))
    empty = np.zeros(0, dtype=edge_record(narrow))
    owned = records.get(KIND_ASSIGNED, empty)
    copies = records.get(KIND_HALO, empty)
    del records
    master = np.load(master_path, mmap_mode="r")
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
    local_of_global = np.cumsum(present, dtype=np.int64)
    local_of_global -= 1
    del present
    local_src = local_of_global[src]
    local_dst = local_of_global[dst]
    del src, dst, local_of_global
    indptr = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(np.bincount(local_src, minlength=n), out=indptr[1:])
    # One int64 sort key per edge: (source row, destination[, halo flag]). Sorting the
    # keys (no argsort, no permutation array) orders the rows, sorts each row, and puts
    # an assigned edge before its halo duplicate; the key then decodes back.
    key = local_src * max(n, 1)
    key += local_dst
    del local_src, local_dst
    if halo:
        key *= 2
        key[num_owned:] += 1
    key.sort()
    is_halo = (key & 1).astype(bool) if halo else None
    if halo:
        key >>= 1
    index_dtype = np.int32 if n < 2**31 else np.int64
    indices = (key % max(n, 1)).astype(index_dtype)
    del key
    is_master = np.asarray(master[global_nid]) == part_id

    digests = write_structure(store_path, global_nid, is_master, indptr, indices, is_halo if halo else None)
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
        index = np.load(idx_path)
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
    group = zarr.open_group(store_path, mode="r+")
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
                        store_path=store_path, final_path=final_path)


def _checked_global_nid(path: str, part_id: int, n: int, num_nodes: int) -> np.ndarray:
    """The partition's sorted ``global_nid`` (:func:`finalize_edges` saved it), checked."""
    global_nid = np.load(path, allow_pickle=False)
    ok = (global_nid.ndim == 1 and len(global_nid) == n and np.issubdtype(global_nid.dtype, np.integer)
          and (n == 0 or (int(global_nid[0]) >= 0 and int(global_nid[-1]) < num_nodes
                          and bool((np.diff(global_nid) > 0).all()))))
    if not ok:
        raise StoreError(format_problem(
            f"partition {part_id}, node id file {path}",
            f"{n:,} increasing node ids in [0, {num_nodes:,})",
            f"{global_nid.dtype} array of shape {global_nid.shape}",
            "the staging directory is damaged; rerun with --overwrite to start clean."))
    return global_nid


class _Swept:
    """One partition of a sweep: its ids, its ``x`` writer with a one-block buffer, and
    its ``y`` and ``split`` filled as the sweep passes its ids."""

    def __init__(self, part_id: int, edges_info: dict[str, Any], global_nid: np.ndarray, store_path: str,
                 feat_dim: int):
        self.part_id, self.edges_info, self.global_nid = part_id, edges_info, global_nid
        n = len(global_nid)
        self.group = zarr.open_group(store_path, mode="r+")
        self.writer = ArrayWriter(self.group, "nodes/x", (n, feat_dim), np.float32, block_bytes=CHUNK_BYTES)
        self.block = np.empty((min(n, self.writer.block_rows), feat_dim), dtype=np.float32)
        self.filled = 0  # rows in ``block``
        self.done = 0  # rows of the partition taken from the sweep
        self.y = np.empty(n, dtype=np.int64)
        self.split = np.empty(n, dtype=np.int8)

    def take(self, x: np.ndarray, y: np.ndarray, split: np.ndarray, start: int, stop: int) -> None:
        """Take its rows among the sweep's ids ``start..stop-1`` (rows of ``x``, ``y``, ``split``)."""
        hi = int(np.searchsorted(self.global_nid, stop, side="left"))
        local = self.global_nid[self.done:hi] - start
        self.y[self.done:hi] = y[local]
        self.split[self.done:hi] = split[local]
        self.done = hi
        while len(local):
            room = len(self.block) - self.filled
            np.take(x, local[:room], axis=0, out=self.block[self.filled:self.filled + min(room, len(local))],
                    mode="clip")  # ids checked in range: "clip" writes straight into the block
            self.filled += min(room, len(local))
            local = local[room:]
            if self.filled == len(self.block) or self.done == len(self.global_nid) and not len(local):
                self.writer.write(self.block[:self.filled])
                self.filled = 0


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


def finalize_nodes_from_table(
    part_ids: list[int],
    edges_infos: list[dict[str, Any]],
    *,
    table: NodeTable,
    global_nid_paths: list[str],
    store_paths: list[str],
    final_paths: list[str],
    attrs: dict[str, Any],
) -> list[dict[str, Any]]:
    """:func:`finalize_nodes` for several partitions, their rows taken from the
    validator's decoded node table (:mod:`storage.node_table`) in one sequential sweep.

    A partition's rows are in ``global_nid`` order, so a sweep in id order produces each
    partition's ``x`` front to back: it is written a chunk at a time from a one-chunk
    buffer per partition. The table is read once per sweep (instead of mapping most of
    its pages once per partition), and memory is the partitions' ids, labels and splits
    plus one chunk each and one block of the table. Returns the manifest entries.
    """
    d = table.feat_dim
    swept = [_Swept(p, info, _checked_global_nid(path, p, info["counts"]["nodes"], table.num_nodes), store, d)
             for p, info, path, store in zip(part_ids, edges_infos, global_nid_paths, store_paths)]
    step = max(1, _SWEEP_BYTES // max(1, 4 * d))
    todo = [s for s in swept if len(s.global_nid)]
    for start in range(0, table.num_nodes if todo else 0, step):
        stop = min(table.num_nodes, start + step)
        x, y, split = table.rows(start, stop), table.column("y", start, stop), table.column("split", start, stop)
        for s in todo:
            s.take(x, y, split, start, stop)
    entries = []
    for s, final_path, store_path in zip(swept, final_paths, store_paths):
        digests = dict(s.edges_info["digests"])
        digests["nodes/x"] = s.writer.close()
        entries.append(finish_store(s.group, s.part_id, s.edges_info, digests, s.y, s.split, feat_dim=d,
                                    attrs=attrs, store_path=store_path, final_path=final_path))
    return entries


def finish_store(group: zarr.Group, part_id: int, edges_info: dict[str, Any], digests: dict[str, str],
                 y: np.ndarray, split: np.ndarray, *, feat_dim: int, attrs: dict[str, Any], store_path: str,
                 final_path: str) -> dict[str, Any]:
    """Write a store's labels and splits, then its attributes and checksum; rename it into place.

    ``digests`` holds the digests of every array written so far (structure and
    ``nodes/x``). The attributes are written last, so a store without them is
    unfinished; the rename to ``final_path`` marks it finished.

    Returns
    -------
    dict
        The partition's manifest entry (without ``path``).
    """
    digests["nodes/y"] = write_array(group, "nodes/y", y)
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
    shutil.rmtree(final_path, ignore_errors=True)
    os.rename(store_path, final_path)
    failpoints.failpoint("between-commits")
    return {"part_id": int(part_id), "checksum": checksum, "counts": counts, "bytes": store_bytes(final_path)}
