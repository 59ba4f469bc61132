"""Stages ⑧ and ⑨: build one partition's store from its spill segments.

Each partition is finalised on its own, by two Dask tasks with exactly one writer
each: :func:`finalize_edges` reads the partition's edge segments, chooses its node set
and writes the CSR; :func:`finalize_nodes` (after the node rows were gathered) writes
the node rows, the attributes and the checksum, and renames the store from its
temporary name into place. Memory is O(|E_p| + |V_p|·d) for partition ``p``; nothing
here grows with the whole graph except one pass over the ``int32 [N]`` master array.
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

from pipeline.route import (
    EDGE_RECORD,
    KIND_ASSIGNED,
    KIND_HALO,
    node_record,
    pause_point,
    read_segments,
)
from storage.errors import StoreError, format_problem
from storage.partition_store import (
    STORE_FORMAT,
    STORE_VERSION,
    combine_digests,
    create_store,
    store_bytes,
    write_array,
)

__all__ = ["finalize_edges", "finalize_nodes"]

log = logging.getLogger(__name__)


def _save_npy_atomic(path: str | Path, array: np.ndarray) -> None:
    tmp = f"{path}.tmp.npy"
    np.save(tmp, array)
    os.replace(tmp, path)


def finalize_edges(
    part_id: int,
    *,
    route_spills: list[tuple[Path, Path]],
    master_path: str,
    store_path: str,
    gids_path: str,
    halo: int,
) -> dict[str, Any]:
    """Write partition ``part_id``'s node ids, master flags and CSR into a new store.

    Parameters
    ----------
    route_spills
        ``(bin, idx)`` of every edge spill file (:func:`pipeline.route.route_edge_shard`).
    master_path
        The ``int32 [N]`` master array (``.npy``).
    store_path
        The store's temporary path (created afresh).
    gids_path
        Where to save the sorted ``global_nid`` array for the node gather.

    Returns
    -------
    dict with ``digests`` (per array), ``counts`` and ``index_dtype``.
    """
    records = read_segments(route_spills, part_id, EDGE_RECORD)
    empty = np.zeros(0, dtype=EDGE_RECORD)
    owned = records.get(KIND_ASSIGNED, empty)
    copies = records.get(KIND_HALO, empty)
    del records
    master = np.load(master_path, mmap_mode="r")
    masters_here = np.flatnonzero(np.asarray(master) == part_id).astype(np.int64)
    src = np.concatenate([owned["src"], copies["src"]])
    dst = np.concatenate([owned["dst"], copies["dst"]])
    num_owned = len(owned)
    del owned, copies
    global_nid = np.unique(np.concatenate([src, dst, masters_here]))
    n = len(global_nid)
    local_src = np.searchsorted(global_nid, src)
    local_dst = np.searchsorted(global_nid, dst)
    del src, dst
    # One sort key: (source row, destination, halo flag), so rows are sorted and
    # assigned edges come before their halo duplicates.
    key = local_src * max(n, 1) + local_dst
    if halo:
        key = key * 2
        key[num_owned:] += 1
    order = np.argsort(key, kind="stable")
    del key
    index_dtype = np.int32 if n < 2**31 else np.int64
    indices = local_dst[order].astype(index_dtype)
    indptr = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(np.bincount(local_src, minlength=n), out=indptr[1:])
    is_halo = order >= num_owned if halo else None
    del order, local_src, local_dst
    is_master = np.asarray(master[global_nid]) == part_id

    shutil.rmtree(store_path, ignore_errors=True)
    group = create_store(store_path)
    digests = {
        "nodes/global_nid": write_array(group, "nodes/global_nid", global_nid),
        "nodes/is_master": write_array(group, "nodes/is_master", is_master),
        "edges/indptr": write_array(group, "edges/indptr", indptr),
        "edges/indices": write_array(group, "edges/indices", indices),
    }
    if halo:
        digests["edges/is_halo"] = write_array(group, "edges/is_halo", is_halo)
    _save_npy_atomic(gids_path, global_nid)
    counts = {
        "nodes": int(n),
        "masters": int(is_master.sum()),
        "edges": len(indices),
        "halo_edges": int(len(indices) - num_owned),
    }
    return {"part_id": int(part_id), "digests": digests, "counts": counts,
            "index_dtype": np.dtype(index_dtype).name}


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
    rows = read_segments(gather_spills, part_id, dtype).get(KIND_ASSIGNED, np.zeros(0, dtype))
    filled = np.zeros(n, dtype=bool)
    filled[rows["local"]] = True
    if len(rows) != n or not filled.all():
        raise StoreError(
            format_problem(
                f"partition {part_id}",
                f"one node row from the node shards for each of its {n:,} nodes",
                f"{len(rows):,} rows covering {int(filled.sum()):,} nodes",
                "the node shards changed during the run; rerun `asepr partition` with --overwrite.",
            )
        )
    x = np.empty((n, feat_dim), dtype=np.float32)
    y = np.empty(n, dtype=np.int64)
    split = np.empty(n, dtype=np.int8)
    x[rows["local"]] = rows["x"]
    y[rows["local"]] = rows["y"]
    split[rows["local"]] = rows["split"]
    del rows, filled

    group = zarr.open_group(store_path, mode="r+")
    digests = dict(edges_info["digests"])
    digests["nodes/x"] = write_array(group, "nodes/x", x)
    digests["nodes/y"] = write_array(group, "nodes/y", y)
    digests["nodes/split"] = write_array(group, "nodes/split", split)
    del x, y, split
    pause_point("finalize")
    checksum = combine_digests(digests)
    group.attrs.update(
        {
            "format": STORE_FORMAT,
            "format_version": STORE_VERSION,
            "part_id": int(part_id),
            **attrs,
            "counts": {**counts, "feat_dim": int(feat_dim)},
            "index_dtype": edges_info["index_dtype"],
            "array_checksums": digests,
            "checksum": checksum,
        }
    )
    shutil.rmtree(final_path, ignore_errors=True)
    os.rename(store_path, final_path)
    pause_point("between-commits")
    return {
        "part_id": int(part_id),
        "checksum": checksum,
        "counts": {**counts, "feat_dim": int(feat_dim)},
        "bytes": store_bytes(final_path),
    }
