"""Rebuild a committed partition with added (and, for a rebalance, removed) edges.

Incremental ingest and ``asepr rebalance`` change some partitions of a committed
output. Each changed partition is rebuilt into a new store of the new generation
by two Dask tasks with one writer each, like :mod:`asepr.pipeline.store.finalize`:

* :func:`rebuild_edges` reads the old store's CSR, drops the edges that move away
  (rebalance), adds the routed new edges and the edges moved in, and writes the node
  ids, master flags and CSR. The old rows stay sorted under the new local ids (the
  map from old to new local ids is monotonic), so only the new edges are sorted, and
  one numba pass merges them into the old rows.
* :func:`rebuild_nodes` writes the node rows: the old rows that stay, copied block
  by block from the old store, and the rows of the nodes new to the partition, from
  spill files that :func:`asepr.pipeline.store.route.gather_node_shard` (new nodes, from the new
  node shards) and :func:`fetch_rows` (existing nodes, from their old master's store)
  wrote.

:func:`extract_moves` spills the edges that a rebalance moves off a partition, as
:func:`asepr.pipeline.store.route.route_edge_shard` spills new edges. Memory per task: O(|E_p|)
for the CSR, O(n_p) indices plus one block of rows for the node rows, and one pass
over an O(N) master array. The old stores are only read: they stay in place (and
readable) until the commit swaps the new ones in.

Changed partitions are rebuilt rather than given delta segments that every reader
would merge: a delta saves a few seconds per ingest but costs every reader more on
every open (measured in ``docs/results/ingest/rebuild-vs-delta.md``), and rebuilding
keeps the store format, the readers, the checksums and ``asepr verify`` as they are.

Spill layout (inside the run's staging directory, besides :mod:`asepr.pipeline.store.route`'s)::

    route/moves-PPPPP.bin|.idx.npy   edges moved off partition P, segments per destination
    fetch/store-PPPPP.bin|.idx.npy   node rows read from old store P, segments per requester
    global_nid/part-PPPPP.npy        the rebuilt partition's sorted global_nid
    global_nid/added-PPPPP.npy       its nodes that the old store did not hold (sorted)
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import numba
import numpy as np

from asepr.pipeline.store.finalize import finish_store, row_index, write_structure
from asepr.pipeline.store.route import (
    EDGE_RECORD,
    KIND_ASSIGNED,
    KIND_HALO,
    SegmentWriter,
    node_record,
    read_segments,
    spill_paths,
    write_grouped,
)
from asepr.storage.commit.atomic import save_npy_atomic
from asepr.storage.errors import StoreError, format_problem
from asepr.storage.inputs.npy import load_npy
from asepr.storage.locations.location import open_group_rw
from asepr.storage.partitions.store import ArrayWriter, open_store

__all__ = [
    "extract_moves",
    "fetch_rows",
    "fetch_spill_paths",
    "moves_spill_paths",
    "rebuild_edges",
    "rebuild_nodes",
    "store_edges",
]

log = logging.getLogger(__name__)

_FETCH_BLOCK_BYTES = 64 << 20


def moves_spill_paths(route_dir: str | Path, part_id: int) -> tuple[Path, Path]:
    """The spill of the rows that a rebalance moves into partition ``part_id``."""
    return spill_paths(route_dir, "moves", part_id)


def fetch_spill_paths(fetch_dir: str | Path, part_id: int) -> tuple[Path, Path]:
    """The spill of the rows fetched from partition ``part_id``'s committed store."""
    return spill_paths(fetch_dir, "store", part_id)


def store_edges(store_path: str, halo: int,
                storage_options: dict | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """``(global_nid, row, indices, is_halo)`` of a store's CSR, rows and columns as local ids.

    Parameters
    ----------
    store_path
        The partition store.
    halo
        1 to read the halo flags (the output was written with ``--halo 1``); otherwise
        every edge is reported as assigned.
    """
    store = open_store(store_path, storage_options=storage_options)
    global_nid = store.global_nid[...]
    indptr = store.indptr[...]
    indices = store.indices[...].astype(np.int64)
    rows = np.repeat(np.arange(len(global_nid), dtype=np.int64), np.diff(indptr))
    is_halo = store.is_halo[...] if halo and store.is_halo is not None else np.zeros(len(indices), bool)
    return global_nid, rows, indices, is_halo


def _moving(global_nid, rows, indices, is_halo, part_id, community_path, move_from_path):
    """Mask of the assigned edges of ``part_id`` that move: both ends in a moving community."""
    community = load_npy(community_path, mmap_mode="r")
    move_from = load_npy(move_from_path, mmap_mode="r")
    comm = np.asarray(community[global_nid])
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
    storage_options: dict | None = None,
) -> list[list[int]]:
    """Spill the edges of ``part_id`` whose communities move (both ends in the community).

    ``move_from[c]`` is the partition community ``c`` leaves (-1: it stays) and
    ``move_to[c]`` where it goes. Returns ``[moved, 0]`` counts per destination.
    """
    global_nid, rows, indices, is_halo = store_edges(old_store, 0, storage_options)
    mask, cs = _moving(global_nid, rows, indices, is_halo, part_id, community_path, move_from_path)
    move_to = load_npy(move_to_path, mmap_mode="r")
    counts = np.zeros((num_parts, 2), dtype=np.int64)
    bin_path, idx_path = moves_spill_paths(route_dir, part_id)
    writer = SegmentWriter(bin_path, idx_path)
    try:
        records = np.empty(int(mask.sum()), dtype=EDGE_RECORD)
        records["src"] = global_nid[rows[mask]]
        records["dst"] = global_nid[indices[mask]]
        dest = np.asarray(move_to[cs[mask]]).astype(np.int64)
        write_grouped(writer, records, dest, num_parts, KIND_ASSIGNED, counts)
        writer.close()
    except BaseException:
        writer.abort()
        raise
    return counts.tolist()


@numba.njit(cache=True, nogil=True)
def _merge_rows(old_row_of, old_indptr, old_indices, old_map, old_halo, old_keep, new_indptr, new_cols,
                new_halo, out_indptr, out_cols, out_halo):  # pragma: no cover - numba
    """Merge each row's kept old entries with its new ones, ordered by (column, halo flag).

    Row ``i`` of the result is old row ``old_row_of[i]`` (-1: none), whose columns are
    mapped to the new local ids by ``old_map`` (monotonic, so they stay sorted), merged
    with ``new_cols[new_indptr[i]:new_indptr[i+1]]`` (sorted by column, then flag).
    """
    pos = 0
    for i in range(old_row_of.shape[0]):
        out_indptr[i] = pos
        r = old_row_of[i]
        a, a_end = 0, 0
        if r >= 0:
            a, a_end = old_indptr[r], old_indptr[r + 1]
        b, b_end = new_indptr[i], new_indptr[i + 1]
        while a < a_end or b < b_end:
            if a < a_end and not old_keep[a]:
                a += 1
                continue
            take_old = False
            if a < a_end:
                if b >= b_end:
                    take_old = True
                else:
                    col = old_map[old_indices[a]]
                    take_old = col < new_cols[b] or (col == new_cols[b] and old_halo[a] <= new_halo[b])
            if take_old:
                out_cols[pos] = old_map[old_indices[a]]
                out_halo[pos] = old_halo[a]
                a += 1
            else:
                out_cols[pos] = new_cols[b]
                out_halo[pos] = new_halo[b]
                b += 1
            pos += 1
    out_indptr[old_row_of.shape[0]] = pos
    return pos


def _union_sorted(*runs: np.ndarray) -> np.ndarray:
    """The sorted distinct values of sorted arrays (a linear merge; ``np.union1d`` hashes and
    measured 8 times slower on a 260k-node partition with numpy 2.4)."""
    merged = np.concatenate([np.asarray(r, dtype=np.int64) for r in runs])
    merged.sort(kind="stable")  # timsort: sorted runs merge in linear time
    if len(merged) < 2:
        return merged
    keep = np.empty(len(merged), dtype=bool)
    keep[0] = True
    np.not_equal(merged[1:], merged[:-1], out=keep[1:])
    return merged[keep]


def _old_csr(old_store: str | None, halo: int,
             storage_options: dict | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """``(global_nid, indptr, indices, is_halo)`` of the committed store; empty without one."""
    if old_store is None:
        return np.zeros(0, np.int64), np.zeros(1, np.int64), np.zeros(0, np.int32), np.zeros(0, bool)
    old = open_store(old_store, storage_options=storage_options)
    indices = old.indices[...]
    is_halo = old.is_halo[...] if halo and old.is_halo is not None else np.zeros(len(indices), bool)
    return old.global_nid[...], old.indptr[...], indices, is_halo


def _kept_and_alive(part_id: int, old_nid: np.ndarray, old_indptr: np.ndarray, old_indices: np.ndarray,
                    old_halo: np.ndarray, masters_here: np.ndarray, community_path: str | None,
                    move_from_path: str | None, moves: bool) -> tuple[np.ndarray, np.ndarray]:
    """Which old edges stay (rebalance: not in a moving community) and which old nodes stay.

    A node stays when it is an endpoint of a kept edge or mastered here.
    """
    n_old = len(old_nid)
    old_keep = np.ones(len(old_indices), dtype=bool)
    if moves and len(old_indices):
        rows = np.repeat(np.arange(n_old, dtype=np.int64), np.diff(old_indptr))
        moving, _ = _moving(old_nid, rows, old_indices.astype(np.int64), old_halo, part_id, community_path,
                            move_from_path)
        old_keep = ~moving
        del rows, moving
    alive = np.zeros(n_old, dtype=bool)
    if old_keep.all():
        alive[np.diff(old_indptr) > 0] = True
        alive[old_indices] = True
    else:
        rows = np.repeat(np.arange(n_old, dtype=np.int64), np.diff(old_indptr))
        alive[rows[old_keep]] = True
        alive[old_indices[old_keep]] = True
        del rows
    pos = np.searchsorted(old_nid, masters_here)
    inside = pos < n_old
    hit = pos[inside][old_nid[pos[inside]] == masters_here[inside]]
    alive[hit] = True
    return old_keep, alive


def _with_new_edges(edge_spills: list[tuple[Path, Path]], part_id: int, kept_nid: np.ndarray,
                    masters_here: np.ndarray, num_global: int) -> tuple[np.ndarray, ...]:
    """The rebuilt node set and the routed new edges in its local ids.

    Returns ``(global_nid, new_indptr, new_cols, new_halo)``: the sorted union of the
    kept old nodes, the masters and the new edges' endpoints, and the new edges as a
    CSR sorted by (row, column, halo flag).
    """
    records = read_segments(edge_spills, part_id, EDGE_RECORD)
    empty = np.zeros(0, dtype=EDGE_RECORD)
    owned, copies = records.get(KIND_ASSIGNED, empty), records.get(KIND_HALO, empty)
    del records
    src_new = np.concatenate([owned["src"], copies["src"]])
    dst_new = np.concatenate([owned["dst"], copies["dst"]])
    halo_new = np.zeros(len(src_new), dtype=bool)
    halo_new[len(owned):] = True
    del owned, copies

    global_nid = _union_sorted(kept_nid, masters_here, np.sort(np.concatenate([src_new, dst_new])))
    n = len(global_nid)
    # A table over all N ids translates the new edges: one O(N) int32 array (pages
    # touched only where a node of this partition lies) instead of a binary search per
    # endpoint, which measured 10x slower for unsorted needles.
    lookup = np.empty(num_global, dtype=np.int32 if n < 2**31 else np.int64)
    lookup[global_nid] = np.arange(n, dtype=lookup.dtype)
    row_new = lookup[src_new].astype(np.int64)
    col_new = lookup[dst_new].astype(np.int64)
    del src_new, dst_new, lookup
    key = (row_new * max(n, 1) + col_new) * 2 + halo_new
    order = np.argsort(key, kind="stable")
    del key
    row_new, col_new, halo_new = row_new[order], col_new[order], halo_new[order]
    new_indptr = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(np.bincount(row_new, minlength=n), out=new_indptr[1:])
    return global_nid, new_indptr, col_new, halo_new


def rebuild_edges(
    part_id: int,
    *,
    old_store: str | None,
    edge_spills: list[tuple[Path, Path]],
    master_path: str,
    store_path: str,
    global_nid_path: str,
    added_path: str,
    halo: int,
    community_path: str | None = None,
    move_from_path: str | None = None,
    move_to_path: str | None = None,
    storage_options: dict | None = None,
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
    global_nid_path, added_path
        Where the sorted ``global_nid`` of the rebuilt partition and the part of it
        that the old store did not hold are saved (``.npy``).
    community_path, move_from_path, move_to_path
        Rebalance only: the edges of communities leaving ``part_id`` are dropped.

    Returns
    -------
    dict with ``digests``, ``counts`` and ``index_dtype`` (as :func:`asepr.pipeline.store.finalize.finalize_edges`)
    and ``added`` (the number of nodes new to the partition).
    """
    master = load_npy(master_path, mmap_mode="r")
    old_nid, old_indptr, old_indices, old_halo = _old_csr(old_store, halo, storage_options)
    masters_here = np.flatnonzero(np.asarray(master) == part_id).astype(np.int64)
    old_keep, alive = _kept_and_alive(part_id, old_nid, old_indptr, old_indices, old_halo, masters_here,
                                      community_path, move_from_path, move_to_path is not None)
    global_nid, new_indptr, col_new, halo_new = _with_new_edges(edge_spills, part_id, old_nid[alive],
                                                                masters_here, len(master))
    n = len(global_nid)
    old_map = np.searchsorted(global_nid, old_nid)  # old local -> new local (for alive nodes)
    old_row_of = np.full(n, -1, dtype=np.int64)
    old_row_of[old_map[alive]] = np.flatnonzero(alive)
    total = int(old_keep.sum()) + len(col_new)
    index_dtype = np.int32 if n < 2**31 else np.int64
    indptr = np.empty(n + 1, dtype=np.int64)
    indices = np.empty(total, dtype=index_dtype)
    is_halo = np.empty(total, dtype=bool)
    written = _merge_rows(old_row_of, old_indptr.astype(np.int64), old_indices, old_map.astype(np.int64),
                          old_halo, old_keep, new_indptr, col_new.astype(np.int64), halo_new, indptr, indices,
                          is_halo)
    if written != total:
        raise StoreError(format_problem(f"partition {part_id}", f"{total} edges after the merge", f"{written}",
                                        "the staging directory is damaged; rerun the same command."))
    del old_indices, old_map, old_row_of, col_new, halo_new, old_keep
    is_master = np.asarray(master[global_nid]) == part_id

    digests = write_structure(store_path, global_nid, is_master, indptr, indices, is_halo if halo else None,
                              storage_options)
    known = np.zeros(n, dtype=bool)
    known[np.searchsorted(global_nid, old_nid[alive])] = True
    save_npy_atomic(added_path, global_nid[~known])
    save_npy_atomic(global_nid_path, global_nid)
    counts = {"nodes": int(n), "masters": int(is_master.sum()), "edges": int(total),
              "halo_edges": int(is_halo.sum()) if halo else 0}
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
    storage_options: dict | None = None,
) -> int:
    """Copy the rows of existing nodes that other partitions gain, from one old store.

    ``source[v]`` (``int32 [N_old]``, ``.npy``) names the old store that serves node
    ``v``'s row (its old master, which holds a row for every node it masters).
    ``added_paths[p]`` is the sorted ``global_nid`` array of the nodes partition ``p``
    gains; the record's ``local`` field is the index into it. Returns the rows copied.
    """
    source = load_npy(source_path, mmap_mode="r")
    store = open_store(old_store, storage_options=storage_options)
    held = store.global_nid[...]
    want_p, want_a, want_local = [], [], []
    for p, path in sorted(added_paths.items()):
        added = load_npy(path)
        a_idx = np.flatnonzero(added < num_old_nodes)
        if not len(a_idx):
            continue
        a_idx = a_idx[np.asarray(source[added[a_idx]]) == source_part]
        if not len(a_idx):
            continue
        g = added[a_idx]
        local = np.searchsorted(held, g)
        ok = (local < len(held)) & (held[np.minimum(local, max(len(held) - 1, 0))] == g)
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


def _added_rows(gather_spills: list[tuple[Path, Path]], part_id: int, dtype: np.dtype,
                added: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Where the gathered row of each added node is: ``(files, records, by_added)``.

    ``by_added[i]`` is the position in ``files``/``records`` of the row of ``added[i]``.

    Raises
    ------
    StoreError
        The spills do not hold exactly one row per added node.
    """
    files, records, local = row_index(gather_spills, part_id, dtype)
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
    return files, records, by_added


def _old_rows(old_store: str | None, global_nid: np.ndarray, storage_options: dict | None = None):
    """``(old, y_old, split_old, old_idx)``: the old store and its row of each node (-1: none)."""
    if old_store is not None:
        old = open_store(old_store, storage_options=storage_options)
        old_nid = old.global_nid[...]
        y_old, split_old = old.y[...], old.split[...]
    else:
        old, old_nid = None, np.zeros(0, np.int64)
        y_old, split_old = np.zeros(0, np.int64), np.zeros(0, np.int8)
    old_idx = np.full(len(global_nid), -1, dtype=np.int64)
    if len(old_nid):
        pos = np.searchsorted(old_nid, global_nid)
        hit = np.flatnonzero(pos < len(old_nid))
        hit = hit[old_nid[pos[hit]] == global_nid[hit]]
        old_idx[hit] = pos[hit]
    return old, y_old, split_old, old_idx


def _gathered(gather_spills: list[tuple[Path, Path]], dtype: np.dtype, files: np.ndarray,
              records: np.ndarray) -> np.ndarray:
    """The spilled records at ``(files[i], records[i])``, read through memory maps."""
    got = np.empty(len(files), dtype=dtype)
    for f in np.unique(files):
        mine = files == f
        spill = np.memmap(gather_spills[f][0], dtype=dtype, mode="r")
        got[mine] = spill[records[mine]]
        del spill
    return got


def rebuild_nodes(
    part_id: int,
    edges_info: dict[str, Any],
    *,
    old_store: str | None,
    gather_spills: list[tuple[Path, Path]],
    store_path: str,
    final_path: str,
    global_nid_path: str,
    added_path: str,
    feat_dim: int,
    attrs: dict[str, Any],
    storage_options: dict | None = None,
) -> dict[str, Any]:
    """Write the node rows and attributes of a rebuilt partition, then rename it into place.

    Rows of nodes the old store held are copied from it block by block; rows of the
    added nodes come from ``gather_spills`` (their ``local`` field indexes the added
    array). Returns the partition's manifest entry (without ``path``).
    """
    counts = edges_info["counts"]
    global_nid = load_npy(global_nid_path)
    added = load_npy(added_path)
    n = len(global_nid)
    if n != counts["nodes"]:
        raise StoreError(format_problem(f"partition {part_id}", f"{counts['nodes']} node ids", f"{n}",
                                        "the staging directory is damaged; rerun the command."))
    dtype = node_record(feat_dim)
    files, records, by_added = _added_rows(gather_spills, part_id, dtype, added)
    old, y_old, split_old, old_idx = _old_rows(old_store, global_nid, storage_options)
    add_idx = np.searchsorted(added, global_nid)

    group = open_group_rw(store_path, storage_options)
    digests = dict(edges_info["digests"])
    # 16 MiB blocks: two rebuilds run at once, each holding a block of old rows and one of new.
    x_writer = ArrayWriter(group, "nodes/x", (n, feat_dim), np.float32, block_bytes=16 << 20)
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
            got = _gathered(gather_spills, dtype, files[pick], records[pick])
            x[new_rows] = got["x"]
            y[start + new_rows] = got["y"]
            split[start + new_rows] = got["split"]
            del got
        x_writer.write(x)
        del x
    digests["nodes/x"] = x_writer.close()
    return finish_store(group, part_id, edges_info, digests, y, split, feat_dim=feat_dim, attrs=attrs,
                        store_path=store_path, final_path=final_path, storage_options=storage_options)
