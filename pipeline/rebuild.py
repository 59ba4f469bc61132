"""Rebuild a committed partition with added (and, for a rebalance, removed) edges.

Incremental ingest and ``asepr rebalance`` change some partitions of a committed
output. Each changed partition is rebuilt into a new store of the new generation
by two Dask tasks with one writer each, like :mod:`pipeline.finalize`:

* :func:`rebuild_edges` reads the old store's CSR, drops the edges that move away
  (rebalance), adds the routed new edges and the edges moved in, and writes the node
  ids, master flags and CSR. The old CSR stays sorted under the new local ids (new
  nodes only slot in between), so only the new edges are sorted, then merged.
* :func:`rebuild_nodes` writes the node rows: the old rows that stay, copied block
  by block from the old store, and the rows of the nodes new to the partition, from
  spill files that :func:`pipeline.route.gather_node_shard` (new nodes, from the new
  node shards) and :func:`fetch_rows` (existing nodes, from their old master's store)
  wrote.

:func:`extract_moves` spills the edges that a rebalance moves off a partition, as
:func:`pipeline.route.route_edge_shard` spills new edges. Memory per task: O(|E_p|)
for the CSR, O(n_p) indices plus one block of rows for the node rows, and one pass
over an O(N) master array. The old stores are only read: they stay in place (and
readable) until the commit swaps the new ones in.

Spill layout (inside the run's staging directory, besides :mod:`pipeline.route`'s)::

    route/moves-PPPPP.bin|.idx.npy   edges moved off partition P, segments per destination
    fetch/store-PPPPP.bin|.idx.npy   node rows read from old store P, segments per requester
    gids/part-PPPPP.npy              the rebuilt partition's sorted global_nid
    gids/added-PPPPP.npy             its nodes that the old store did not hold (sorted)
"""

from __future__ import annotations

import logging
import os
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import zarr

from pipeline.finalize import _row_index, _save_npy_atomic
from pipeline.route import (
    EDGE_RECORD,
    KIND_ASSIGNED,
    KIND_HALO,
    SegmentWriter,
    _write_grouped,
    node_record,
    pause_point,
    read_segments,
)
from storage.errors import StoreError, format_problem
from storage.partition_store import (
    STORE_FORMAT,
    STORE_VERSION,
    ArrayWriter,
    combine_digests,
    create_store,
    open_store,
    store_bytes,
    write_array,
)

__all__ = [
    "extract_moves",
    "fetch_rows",
    "fetch_spill_paths",
    "moves_spill_paths",
    "rebuild_edges",
    "rebuild_nodes",
]

log = logging.getLogger(__name__)

_FETCH_BLOCK_BYTES = 64 << 20


def moves_spill_paths(route_dir: str | Path, part_id: int) -> tuple[Path, Path]:
    base = Path(route_dir) / f"moves-{part_id:05d}"
    return base.with_suffix(".bin"), Path(f"{base}.idx.npy")


def fetch_spill_paths(fetch_dir: str | Path, part_id: int) -> tuple[Path, Path]:
    base = Path(fetch_dir) / f"store-{part_id:05d}"
    return base.with_suffix(".bin"), Path(f"{base}.idx.npy")


def _old_edges(store_path: str, halo: int):
    """``(global_nid, row, indices, is_halo)`` of a store's CSR (rows as local ids)."""
    store = open_store(store_path)
    gids = store.global_nid[...]
    indptr = store.indptr[...]
    indices = store.indices[...].astype(np.int64)
    rows = np.repeat(np.arange(len(gids), dtype=np.int64), np.diff(indptr))
    is_halo = store.is_halo[...] if halo and store.is_halo is not None else np.zeros(len(indices), bool)
    return gids, rows, indices, is_halo


def _moving(gids, rows, indices, is_halo, part_id, community_path, move_from_path):
    """Mask of the assigned edges of ``part_id`` that move: both ends in a moving community."""
    community = np.load(community_path, mmap_mode="r")
    move_from = np.load(move_from_path, mmap_mode="r")
    comm = np.asarray(community[gids])
    cs, cd = comm[rows], comm[indices]
    mask = (cs == cd) & ~is_halo
    cand = np.flatnonzero(mask)
    mask[cand] = np.asarray(move_from[cs[cand]]) == part_id
    return mask, cs


def extract_moves(
    part_id: int,
    *,
    old_store: str,
    community_path: str,
    move_from_path: str,
    move_to_path: str,
    route_dir: str,
    num_parts: int,
) -> list[list[int]]:
    """Spill the edges of ``part_id`` whose communities move (both ends in the community).

    ``move_from[c]`` is the partition community ``c`` leaves (-1: it stays) and
    ``move_to[c]`` where it goes. Returns ``[moved, 0]`` counts per destination.
    """
    gids, rows, indices, is_halo = _old_edges(old_store, 0)
    mask, cs = _moving(gids, rows, indices, is_halo, part_id, community_path, move_from_path)
    move_to = np.load(move_to_path, mmap_mode="r")
    counts = np.zeros((num_parts, 2), dtype=np.int64)
    bin_path, idx_path = moves_spill_paths(route_dir, part_id)
    writer = SegmentWriter(bin_path, idx_path)
    try:
        records = np.empty(int(mask.sum()), dtype=EDGE_RECORD)
        records["src"] = gids[rows[mask]]
        records["dst"] = gids[indices[mask]]
        dest = np.asarray(move_to[cs[mask]]).astype(np.int64)
        _write_grouped(writer, records, dest, num_parts, KIND_ASSIGNED, counts)
        writer.close()
    except BaseException:
        writer.abort()
        raise
    return counts.tolist()


def rebuild_edges(
    part_id: int,
    *,
    old_store: str | None,
    edge_spills: list[tuple[Path, Path]],
    master_path: str,
    store_path: str,
    gids_path: str,
    added_path: str,
    halo: int,
    community_path: str | None = None,
    move_from_path: str | None = None,
    move_to_path: str | None = None,
) -> dict[str, Any]:
    """Write partition ``part_id``'s node ids, master flags and CSR of the new generation.

    Parameters
    ----------
    old_store
        The committed store of the partition (None: it had none).
    edge_spills
        Spill files whose segments for ``part_id`` are added (routed new edges, kind 0
        or halo copies, kind 1; edges moved in by a rebalance).
    master_path
        ``int32 [N]`` masters of the new generation (``.npy``).
    community_path, move_from_path, move_to_path
        Rebalance only: the edges of communities leaving ``part_id`` are dropped.

    Returns
    -------
    dict with ``digests``, ``counts`` and ``index_dtype`` (as :func:`pipeline.finalize.finalize_edges`).
    """
    master = np.load(master_path, mmap_mode="r")
    num_nodes = len(master)
    if old_store is not None:
        gids_old, rows, indices, is_halo_old = _old_edges(old_store, halo)
    else:
        gids_old = np.zeros(0, np.int64)
        rows = indices = np.zeros(0, np.int64)
        is_halo_old = np.zeros(0, bool)
    if move_to_path is not None and len(rows):
        moving, _ = _moving(gids_old, rows, indices, is_halo_old, part_id, community_path, move_from_path)
        keep = ~moving
        rows, indices, is_halo_old = rows[keep], indices[keep], is_halo_old[keep]
        del moving, keep
    src_old, dst_old = gids_old[rows], gids_old[indices]
    del rows, indices
    records = read_segments(edge_spills, part_id, EDGE_RECORD)
    empty = np.zeros(0, dtype=EDGE_RECORD)
    owned, copies = records.get(KIND_ASSIGNED, empty), records.get(KIND_HALO, empty)
    del records
    src_new = np.concatenate([owned["src"], copies["src"]])
    dst_new = np.concatenate([owned["dst"], copies["dst"]])
    halo_new = np.zeros(len(src_new), dtype=bool)
    halo_new[len(owned):] = True
    del owned, copies

    present = np.zeros(num_nodes, dtype=bool)
    for ends in (src_old, dst_old, src_new, dst_new):
        present[ends] = True
    present[np.flatnonzero(np.asarray(master) == part_id)] = True
    global_nid = np.flatnonzero(present).astype(np.int64)
    n = len(global_nid)
    rank = np.cumsum(present, dtype=np.int64)
    rank -= 1
    del present
    width = max(n, 1)
    # Old keys come out sorted: ranks are monotonic in global_nid, the old CSR was
    # sorted by (row, column[, halo]) over the same order. Only the new keys are sorted;
    # the stable sort of two sorted runs is a linear merge (timsort).
    key_old = rank[src_old] * width + rank[dst_old]
    key_new = rank[src_new] * width + rank[dst_new]
    del src_old, dst_old, src_new, dst_new, rank
    if halo:
        key_old = key_old * 2 + is_halo_old
        key_new = key_new * 2 + halo_new
    key_new.sort()
    key = np.concatenate([key_old, key_new])
    del key_old, key_new
    key.sort(kind="stable")
    is_halo = None
    if halo:
        is_halo = (key & 1).astype(bool)
        key >>= 1
    index_dtype = np.int32 if n < 2**31 else np.int64
    row = key // width
    indices_new = (key % width).astype(index_dtype)
    del key
    indptr = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(np.bincount(row, minlength=n), out=indptr[1:])
    del row
    is_master = np.asarray(master[global_nid]) == part_id

    shutil.rmtree(store_path, ignore_errors=True)
    group = create_store(store_path)
    digests = {
        "nodes/global_nid": write_array(group, "nodes/global_nid", global_nid),
        "nodes/is_master": write_array(group, "nodes/is_master", is_master),
        "edges/indptr": write_array(group, "edges/indptr", indptr),
        "edges/indices": write_array(group, "edges/indices", indices_new),
    }
    if halo:
        digests["edges/is_halo"] = write_array(group, "edges/is_halo", is_halo)
    pos = np.searchsorted(gids_old, global_nid)
    known = np.zeros(n, dtype=bool)
    if len(gids_old):
        inside = pos < len(gids_old)
        known[inside] = gids_old[pos[inside]] == global_nid[inside]
    _save_npy_atomic(added_path, global_nid[~known])
    _save_npy_atomic(gids_path, global_nid)
    halo_edges = int(is_halo.sum()) if halo else 0
    counts = {"nodes": int(n), "masters": int(is_master.sum()), "edges": len(indices_new),
              "halo_edges": halo_edges}
    return {"part_id": int(part_id), "digests": digests, "counts": counts,
            "index_dtype": np.dtype(index_dtype).name, "added": int((~known).sum())}


def fetch_rows(
    source_part: int,
    *,
    old_store: str,
    added_paths: dict[int, str],
    source_path: str,
    num_old_nodes: int,
    fetch_dir: str,
    feat_dim: int,
) -> int:
    """Copy the rows of existing nodes that other partitions gain, from one old store.

    ``source[v]`` (``int32 [N_old]``, ``.npy``) names the old store that serves node
    ``v``'s row (its old master, which holds a row for every node it masters).
    ``added_paths[p]`` is the sorted ``global_nid`` array of the nodes partition ``p``
    gains; the record's ``local`` field is the index into it. Returns the rows copied.
    """
    source = np.load(source_path, mmap_mode="r")
    store = open_store(old_store)
    gids_q = store.global_nid[...]
    want_p, want_a, want_local = [], [], []
    for p, path in sorted(added_paths.items()):
        added = np.load(path)
        a_idx = np.flatnonzero(added < num_old_nodes)
        if not len(a_idx):
            continue
        a_idx = a_idx[np.asarray(source[added[a_idx]]) == source_part]
        if not len(a_idx):
            continue
        g = added[a_idx]
        local = np.searchsorted(gids_q, g)
        ok = (local < len(gids_q)) & (gids_q[np.minimum(local, max(len(gids_q) - 1, 0))] == g)
        if not ok.all():
            bad = int(g[~ok][0])
            raise StoreError(
                format_problem(
                    f"partition {source_part} (old store {old_store})",
                    f"a row for node global_nid {bad}, which it masters",
                    "no such row",
                    "the output is inconsistent; run `asepr verify` and repartition with --overwrite.",
                )
            )
        want_p.append(np.full(len(a_idx), p, dtype=np.int64))
        want_a.append(a_idx.astype(np.int64))
        want_local.append(local.astype(np.int64))
    dtype = node_record(feat_dim)
    bin_path, idx_path = fetch_spill_paths(fetch_dir, source_part)
    writer = SegmentWriter(bin_path, idx_path)
    try:
        if want_p:
            req_p = np.concatenate(want_p)
            req_a = np.concatenate(want_a)
            req_local = np.concatenate(want_local)
            order = np.argsort(req_local, kind="stable")
            req_p, req_a, req_local = req_p[order], req_a[order], req_local[order]
            records = np.empty(len(req_local), dtype=dtype)
            records["local"] = req_a
            y = store.y[...]
            split = store.split[...]
            records["y"] = y[req_local]
            records["split"] = split[req_local]
            del y, split
            rows = max(1, _FETCH_BLOCK_BYTES // max(1, 4 * feat_dim))
            rows = max(store.x.chunks[0], rows // store.x.chunks[0] * store.x.chunks[0])
            # Read only the blocks of x that hold requested rows, each once.
            start = 0
            while start < len(req_local):
                lo = int(req_local[start]) // rows * rows
                stop = int(np.searchsorted(req_local, lo + rows))
                block = store.x[lo : lo + rows]
                records["x"][start:stop] = block[req_local[start:stop] - lo]
                start = stop
            order = np.argsort(req_p, kind="stable")
            records, req_p = records[order], req_p[order]
            bounds = np.searchsorted(req_p, np.unique(req_p), side="left").tolist() + [len(req_p)]
            for i in range(len(bounds) - 1):
                a, b = bounds[i], bounds[i + 1]
                writer.write(int(req_p[a]), KIND_ASSIGNED, records[a:b])
        writer.close()
    except BaseException:
        writer.abort()
        raise
    return int(sum(len(a) for a in want_a))


def rebuild_nodes(
    part_id: int,
    edges_info: dict[str, Any],
    *,
    old_store: str | None,
    gather_spills: list[tuple[Path, Path]],
    store_path: str,
    final_path: str,
    gids_path: str,
    added_path: str,
    feat_dim: int,
    attrs: dict[str, Any],
) -> dict[str, Any]:
    """Write the node rows and attributes of a rebuilt partition, then rename it into place.

    Rows of nodes the old store held are copied from it block by block; rows of the
    added nodes come from ``gather_spills`` (their ``local`` field indexes the added
    array). Returns the partition's manifest entry (without ``path``).
    """
    counts = edges_info["counts"]
    global_nid = np.load(gids_path)
    added = np.load(added_path)
    n = len(global_nid)
    if n != counts["nodes"]:
        raise StoreError(format_problem(f"partition {part_id}", f"{counts['nodes']} node ids", f"{n}",
                                        "the staging directory is damaged; rerun the command."))
    dtype = node_record(feat_dim)
    files, records, local = _row_index(gather_spills, part_id, dtype)
    filled = np.zeros(len(added), dtype=bool)
    filled[local] = True
    if len(local) != len(added) or not filled.all():
        raise StoreError(
            format_problem(
                f"partition {part_id}",
                f"one row for each of its {len(added):,} new nodes",
                f"{len(local):,} rows covering {int(filled.sum()):,} of them",
                "the node shards changed during the run; rerun the same command.",
            )
        )
    by_added = np.empty(len(added), dtype=np.int64)
    by_added[local] = np.arange(len(local))
    del filled, local
    if old_store is not None:
        old = open_store(old_store)
        gids_old = old.global_nid[...]
        y_old, split_old = old.y[...], old.split[...]
    else:
        old, gids_old = None, np.zeros(0, np.int64)
        y_old, split_old = np.zeros(0, np.int64), np.zeros(0, np.int8)
    pos = np.searchsorted(gids_old, global_nid)
    old_idx = np.full(n, -1, dtype=np.int64)
    if len(gids_old):
        inside = pos < len(gids_old)
        hit = np.flatnonzero(inside)
        hit = hit[gids_old[pos[hit]] == global_nid[hit]]
        old_idx[hit] = pos[hit]
    add_idx = np.searchsorted(added, global_nid)
    del pos

    group = zarr.open_group(store_path, mode="r+")
    digests = dict(edges_info["digests"])
    x_writer = ArrayWriter(group, "nodes/x", (n, feat_dim), np.float32)
    y = np.empty(n, dtype=np.int64)
    split = np.empty(n, dtype=np.int8)
    for start in range(0, n, x_writer.block_rows):
        stop = min(n, start + x_writer.block_rows)
        oi = old_idx[start:stop]
        from_old = oi >= 0
        x = np.empty((stop - start, feat_dim), dtype=np.float32)
        if from_old.any():
            lo, hi = int(oi[from_old].min()), int(oi[from_old].max()) + 1
            block = old.x[lo:hi]
            x[from_old] = block[oi[from_old] - lo]
            y[start:stop][from_old] = y_old[oi[from_old]]
            split[start:stop][from_old] = split_old[oi[from_old]]
            del block
        new_rows = np.flatnonzero(~from_old)
        if len(new_rows):
            pick = by_added[add_idx[start:stop][new_rows]]
            pick_files, pick_records = files[pick], records[pick]
            got = np.empty(len(pick), dtype=dtype)
            for f in np.unique(pick_files):
                mine = pick_files == f
                spill = np.memmap(gather_spills[f][0], dtype=dtype, mode="r")
                got[mine] = spill[pick_records[mine]]
                del spill
            x[new_rows] = got["x"]
            y[start + new_rows] = got["y"]
            split[start + new_rows] = got["split"]
            del got
        x_writer.write(x)
        del x
    digests["nodes/x"] = x_writer.close()
    digests["nodes/y"] = write_array(group, "nodes/y", y)
    digests["nodes/split"] = write_array(group, "nodes/split", split)
    pause_point("finalize")
    checksum = combine_digests(digests)
    counts = {**counts, "feat_dim": int(feat_dim)}
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
    pause_point("between-commits")
    return {"part_id": int(part_id), "checksum": checksum, "counts": counts, "bytes": store_bytes(final_path)}
