"""An external, seeded shuffle of the edge stream order (for benchmarks and tests).

Streaming partitioners are sensitive to stream order; published comparisons use a
random order. Edges are scattered into ``B = ceil(|E| / bucket_rows)`` spill files by
a seeded random bucket, then each bucket is permuted in memory and written out as
one shard: memory is O(bucket_rows), and the result is a uniformly random order for
a given seed. Every edge column travels (``weight``, ``ts``); node shards and side
files (``id_map.parquet``, ``label_map.json``) are copied unchanged.
"""

from __future__ import annotations

import json
import logging
import math
import os
import shutil
import tempfile
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from asepr.storage.commit.atomic import staged_output
from asepr.storage.errors import InputError, format_problem
from asepr.storage.inputs.directory import open_input, open_parquet
from asepr.storage.inputs.npy import write_array
from asepr.storage.inputs.schema import META_NAME, check_edge_schema
from asepr.storage.locations.fs import copy_file, copy_side_files, join, resolve
from asepr.storage.resources import stage

__all__ = ["shuffle_edges"]

log = logging.getLogger(__name__)


def shuffle_edges(
    input_url: str | Path,
    out: str | Path,
    *,
    seed: int = 0,
    bucket_rows: int = 1 << 22,
    overwrite: bool = False,
    storage_options: dict | None = None,
) -> dict:
    """Write a copy of ``input_url`` at ``out`` whose edge rows are in random order."""
    source = open_input(input_url, storage_options)
    edge_shards, node_shards = source.edge_shards, source.node_shards
    num_edges = 0
    columns: list[str] | None = None
    for shard in edge_shards:
        pf = open_parquet(shard)
        num_edges += pf.metadata.num_rows
        shard_columns = check_edge_schema(pf.schema_arrow, shard.url)
        if columns is None:
            columns = shard_columns
        elif shard_columns != columns:
            raise InputError(
                format_problem(
                    f"file {shard.url}",
                    f"the edge columns of the other shards {columns}",
                    f"{shard_columns}",
                    "give every edge shard the same optional columns before shuffling.",
                )
            )
    types = {"src": ("<i8", pa.int64()), "dst": ("<i8", pa.int64()),
             "weight": ("<f4", pa.float32()), "ts": ("<i8", pa.int64())}
    dtype = [(c, types[c][0]) for c in columns]
    schema = pa.schema([(c, types[c][1]) for c in columns])
    num_buckets = max(1, math.ceil(num_edges / bucket_rows))
    rng = np.random.default_rng(seed)
    fs_in, in_path = resolve(input_url, storage_options)
    fs_out, out_path = resolve(out, storage_options)
    spill = tempfile.mkdtemp(prefix="asepr-shuffle-")
    try:
        with stage("shuffle", log), staged_output(fs_out, out_path, overwrite=overwrite) as staging:
            files = [open(os.path.join(spill, f"b{b:05d}.bin"), "wb") for b in range(num_buckets)]
            for shard in edge_shards:
                pf = open_parquet(shard)
                for batch in pf.iter_batches(batch_size=1 << 20, columns=columns):
                    rows = np.empty(batch.num_rows, dtype=dtype)
                    for c in columns:
                        rows[c] = batch.column(c).to_numpy()
                    bucket = rng.integers(0, num_buckets, len(rows))
                    order = np.argsort(bucket, kind="stable")
                    bounds = np.searchsorted(bucket[order], np.arange(num_buckets + 1))
                    rows = rows[order]
                    for b in range(num_buckets):
                        if bounds[b + 1] > bounds[b]:
                            write_array(files[b], rows[bounds[b] : bounds[b + 1]])
            for fh in files:
                fh.close()
            fs_out.makedirs(join(staging, "edges"), exist_ok=True)
            fs_out.makedirs(join(staging, "nodes"), exist_ok=True)
            for b in range(num_buckets):
                rows = np.fromfile(os.path.join(spill, f"b{b:05d}.bin"), dtype=dtype)
                rows = rows[rng.permutation(len(rows))]
                table = pa.table({c: rows[c] for c in columns}, schema=schema)
                with fs_out.open(join(staging, "edges", f"part-{b:05d}.parquet"), "wb") as fh:
                    pq.write_table(table, fh, compression="zstd", row_group_size=1 << 20)
            for i, shard in enumerate(node_shards):
                copy_file(shard, fs_out, join(staging, "nodes", f"part-{i:05d}.parquet"))
            copy_side_files(fs_in, in_path, fs_out, staging, skip=(META_NAME,))
            meta = dict(source.meta)
            meta.pop("validation", None)
            meta.pop("shards", None)
            meta["shuffle"] = {"seed": seed, "from": str(input_url)}
            meta["num_edges"] = num_edges
            with fs_out.open(join(staging, META_NAME), "w") as fh:
                json.dump(meta, fh, indent=2, sort_keys=True)
    finally:
        shutil.rmtree(spill, ignore_errors=True)
    return meta
