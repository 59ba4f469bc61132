"""Streaming reads of one node column into an O(N) array indexed by node id."""

from __future__ import annotations

import numpy as np

from storage.fs import Shard
from storage.input import open_parquet

__all__ = ["read_node_column"]


def read_node_column(
    node_shards: list[Shard],
    num_nodes: int,
    column: str,
    *,
    dtype=np.int64,
    default=-1,
    batch_rows: int = 1 << 20,
) -> np.ndarray:
    """``out[id] = value`` for one scalar node column; ``default`` where the column is absent."""
    out = np.full(num_nodes, default, dtype=dtype)
    for shard in node_shards:
        pf = open_parquet(shard)
        if column not in pf.schema_arrow.names:
            continue
        for batch in pf.iter_batches(batch_size=batch_rows, columns=["id", column]):
            ids = batch.column("id").to_numpy()
            out[ids] = batch.column(column).to_numpy(zero_copy_only=False)
    return out
