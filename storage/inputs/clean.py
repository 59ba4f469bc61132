"""Dropping self-loops and duplicate edges from an input, on request.

The validator only *counts* self-loops and duplicates: both are legal input, and
whether they matter is the user's call. :func:`clean_input` writes a new input
directory without them, preserving stream order (the first occurrence of a duplicated
edge is kept), shard by shard with bounded memory. Node shards are copied unchanged.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from asepr.storage.commit.atomic import staged_output
from asepr.storage.errors import AseprError, InputError
from asepr.storage.inputs.dedup import EdgeDedup
from asepr.storage.inputs.directory import open_input, open_parquet
from asepr.storage.inputs.npy import write_array
from asepr.storage.inputs.schema import META_NAME, check_edge_schema
from asepr.storage.integrity.validate import validate_input
from asepr.storage.locations.fs import copy_file, copy_side_files, join, resolve, url_of

__all__ = ["clean_input"]


@contextlib.contextmanager
def _removing(path: str):
    try:
        yield
    finally:
        shutil.rmtree(path, ignore_errors=True)

log = logging.getLogger(__name__)


def clean_input(
    input_url: str | Path,
    out: str | Path,
    *,
    drop_self_loops: bool = True,
    drop_duplicates: bool = True,
    undirected: bool | None = None,
    overwrite: bool = False,
    batch_rows: int = 1 << 20,
    spill_dir: str | None = None,
    storage_options: dict | None = None,
) -> dict[str, Any]:
    """Write a copy of ``input_url`` at ``out`` without self-loops and/or duplicates.

    Parameters
    ----------
    input_url
        A valid input directory (it is validated first).
    out
        The new input directory; it appears only when complete.
    drop_self_loops, drop_duplicates
        What to drop. For an undirected input, ``(v, u)`` duplicates ``(u, v)``.
    undirected
        Override ``meta.json``'s ``undirected``.

    Returns
    -------
    dict
        The new ``meta.json``, with ``clean`` counts of what was dropped.
    """
    if not (drop_self_loops or drop_duplicates):
        raise InputError(
            "asepr clean: nothing to do; pass --drop-self-loops and/or --drop-duplicates."
        )
    source = open_input(input_url, storage_options)
    report = validate_input(source, undirected=undirected, check_duplicates=False)
    undirected = report.undirected
    meta, edge_shards, node_shards = source.meta, source.edge_shards, source.node_shards
    fs_in, in_path = resolve(input_url, storage_options)
    fs_out, out_path = resolve(out, storage_options)

    drop_dir = tempfile.mkdtemp(prefix="asepr-clean-", dir=spill_dir)
    drop_paths = [os.path.join(drop_dir, f"drops-{i:05d}.bin") for i in range(len(edge_shards))]
    try:
        if drop_duplicates:
            _spill_duplicate_rows(edge_shards, report, undirected, drop_paths, batch_rows, spill_dir)
    except BaseException:
        shutil.rmtree(drop_dir, ignore_errors=True)
        raise

    # Pass 2: rewrite edge shards in order, copy node shards.
    with _removing(drop_dir), staged_output(fs_out, out_path, overwrite=overwrite) as staging:
        fs_out.makedirs(join(staging, "edges"), exist_ok=True)
        fs_out.makedirs(join(staging, "nodes"), exist_ok=True)
        dropped_loops = dropped_dups = 0
        for index, shard in enumerate(edge_shards):
            loops, dups = _rewrite_edge_shard(
                shard, drop_paths[index], fs_out, join(staging, "edges", f"part-{index:05d}.parquet"),
                drop_self_loops, batch_rows,
            )
            dropped_loops += loops
            dropped_dups += dups
        for index, shard in enumerate(node_shards):
            copy_file(shard, fs_out, join(staging, "nodes", f"part-{index:05d}.parquet"))
        # Side files (id_map.parquet, label_map.json, ...) travel with the input.
        copy_side_files(fs_in, in_path, fs_out, staging, skip=(META_NAME,))
        new_meta = {
            **{k: v for k, v in meta.items() if k not in ("validation", "shards", "num_edges")},
            "name": meta.get("name", Path(in_path).name),
            "undirected": undirected,
            "num_classes": meta.get("num_classes", report.num_classes),
            "clean": {
                "from": url_of(fs_in, in_path),
                "self_loops_dropped": dropped_loops,
                "duplicates_dropped": dropped_dups,
            },
        }
        _validate_staged(fs_out, staging, out_path, new_meta, storage_options)
        with fs_out.open(join(staging, META_NAME), "w") as fh:
            json.dump(new_meta, fh, indent=2, sort_keys=True)
            fh.write("\n")
    log.info(
        "cleaned %s -> %s: dropped %d self-loops, %d duplicates",
        input_url, out, dropped_loops, dropped_dups,
    )
    return new_meta


def _spill_duplicate_rows(edge_shards, report, undirected: bool, drop_paths: list[str],
                          batch_rows: int, spill_dir: str | None) -> None:
    """Pass 1: append the in-shard row of every duplicate edge to its shard's drop file.

    Duplicates are located by stream position and spilled per shard to disk, so memory
    does not grow with the number of duplicates.
    """
    offsets = np.cumsum([0] + [s.rows for s in report.edge_shards])
    dedup = EdgeDedup(report.num_nodes, report.num_edges, undirected=undirected, spill_dir=spill_dir)
    try:
        position = 0
        for shard in edge_shards:
            pf = open_parquet(shard)
            for batch in pf.iter_batches(batch_size=batch_rows, columns=["src", "dst"]):
                src = batch.column("src").to_numpy()
                dst = batch.column("dst").to_numpy()
                dedup.add(src, dst, np.arange(position, position + len(src), dtype=np.int64))
                position += len(src)
        for positions in dedup.duplicate_positions():
            shard_of = np.searchsorted(offsets, positions, side="right") - 1
            for s in np.unique(shard_of):
                with open(drop_paths[s], "ab") as fh:
                    write_array(fh, (positions[shard_of == s] - offsets[s]).astype(np.int64))
    finally:
        dedup.close()


def _rewrite_edge_shard(shard, drop_path: str, fs_out, path_out: str, drop_self_loops: bool,
                        batch_rows: int) -> tuple[int, int]:
    """Copy one edge shard without the rows in ``drop_path`` (and self-loops, on request).

    Returns ``(self-loops dropped, duplicates dropped)``.
    """
    pf = open_parquet(shard)
    columns = check_edge_schema(pf.schema_arrow, shard.url)
    drop_rows = (
        np.sort(np.fromfile(drop_path, dtype=np.int64))
        if os.path.exists(drop_path)
        else np.zeros(0, np.int64)
    )
    dropped_loops = dropped_dups = 0
    with fs_out.open(path_out, "wb") as fh:
        schema = pa.schema([pf.schema_arrow.field(c) for c in columns])
        writer = pq.ParquetWriter(fh, schema, compression="zstd")
        row0 = 0
        for batch in pf.iter_batches(batch_size=batch_rows, columns=columns):
            keep = np.ones(batch.num_rows, dtype=bool)
            lo, hi = np.searchsorted(drop_rows, [row0, row0 + batch.num_rows])
            keep[drop_rows[lo:hi] - row0] = False
            dropped_dups += int(hi - lo)
            if drop_self_loops:
                loops = batch.column("src").to_numpy() == batch.column("dst").to_numpy()
                dropped_loops += int(np.count_nonzero(loops & keep))
                keep &= ~loops
            writer.write_table(pa.Table.from_batches([batch.filter(pa.array(keep))]))
            row0 += batch.num_rows
        writer.close()
    return dropped_loops, dropped_dups


def _validate_staged(fs_out, staging: str, out_path: str, new_meta: dict[str, Any],
                     storage_options: dict | None) -> None:
    """Validate the staged copy and add its counts to ``new_meta``; errors name ``out``."""
    staged_url = url_of(fs_out, staging)
    try:
        after = validate_input(
            staged_url,
            undirected=new_meta["undirected"],
            num_classes=new_meta["num_classes"],
            storage_options=storage_options,
        )
    except AseprError as exc:
        message = str(exc).replace(staged_url, url_of(fs_out, out_path))
        raise type(exc)(f"{message} (the output was not written)") from exc
    new_meta.update(
        num_nodes=after.num_nodes,
        num_edges=after.num_edges,
        feat_dim=after.feat_dim,
        validation={"self_loops": after.self_loops, "duplicate_edges": after.duplicate_edges},
    )
