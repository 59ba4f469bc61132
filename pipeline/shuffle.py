"""An external, seeded shuffle of the edge stream order (for benchmarks and tests).

Streaming partitioners are sensitive to stream order; published comparisons use a
random order. Edges are scattered into ``B = ceil(|E| / bucket_rows)`` spill files by
a seeded random bucket, then each bucket is permuted in memory and written out as
one shard: memory is O(bucket_rows), and the result is a uniformly random order for
a given seed. Node shards and side files are copied unchanged.
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

from pipeline.stream import iter_edge_batches
from storage.atomic import staged_output
from storage.fs import copy_file, discover_shards, join, resolve
from storage.resources import stage
from storage.schema import META_NAME, read_meta
from storage.validate import input_paths, open_parquet

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
    edges_url, nodes_url = input_paths(input_url)
    edge_shards = discover_shards(edges_url, what="edge shards", storage_options=storage_options)
    node_shards = discover_shards(nodes_url, what="node shards", storage_options=storage_options)
    num_edges = sum(open_parquet(s).metadata.num_rows for s in edge_shards)
    num_buckets = max(1, math.ceil(num_edges / bucket_rows))
    rng = np.random.default_rng(seed)
    fs_out, out_path = resolve(out, storage_options)
    spill = tempfile.mkdtemp(prefix="asepr-shuffle-")
    dtype = [("src", "<i8"), ("dst", "<i8")]
    try:
        with stage("shuffle", log), staged_output(fs_out, out_path, overwrite=overwrite) as staging:
            files = [open(os.path.join(spill, f"b{b:05d}.bin"), "wb") for b in range(num_buckets)]
            for batch in iter_edge_batches(edge_shards):
                rows = np.empty(len(batch.src), dtype=dtype)
                rows["src"], rows["dst"] = batch.src, batch.dst
                bucket = rng.integers(0, num_buckets, len(rows))
                order = np.argsort(bucket, kind="stable")
                bounds = np.searchsorted(bucket[order], np.arange(num_buckets + 1))
                rows = rows[order]
                for b in range(num_buckets):
                    if bounds[b + 1] > bounds[b]:
                        rows[bounds[b] : bounds[b + 1]].tofile(files[b])
            for fh in files:
                fh.close()
            fs_out.makedirs(join(staging, "edges"), exist_ok=True)
            fs_out.makedirs(join(staging, "nodes"), exist_ok=True)
            schema = pa.schema([("src", pa.int64()), ("dst", pa.int64())])
            for b in range(num_buckets):
                rows = np.fromfile(os.path.join(spill, f"b{b:05d}.bin"), dtype=dtype)
                rows = rows[rng.permutation(len(rows))]
                table = pa.table({"src": rows["src"], "dst": rows["dst"]}, schema=schema)
                with fs_out.open(join(staging, "edges", f"part-{b:05d}.parquet"), "wb") as fh:
                    pq.write_table(table, fh, compression="zstd", row_group_size=1 << 20)
            for i, shard in enumerate(node_shards):
                copy_file(shard, fs_out, join(staging, "nodes", f"part-{i:05d}.parquet"))
            meta = dict(read_meta(input_url, storage_options) or {})
            meta.pop("validation", None)
            meta.pop("shards", None)
            meta["shuffle"] = {"seed": seed, "from": str(input_url)}
            meta["num_edges"] = num_edges
            with fs_out.open(join(staging, META_NAME), "w") as fh:
                json.dump(meta, fh, indent=2, sort_keys=True)
    finally:
        shutil.rmtree(spill, ignore_errors=True)
    return meta
