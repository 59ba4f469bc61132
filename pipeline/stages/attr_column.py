"""Attribute clusters from a categorical node column (``--attr-column``).

The sorted distinct non-null values become clusters ``0..C-1``; nulls form one more.
One Dask task per node shard finds the distinct values, a second pass codes them.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

import dask
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from asepr.pipeline.config import PartitionConfig
from asepr.pipeline.dask_ops import captured, compute, first_error, share, task_prefix
from asepr.pipeline.planning.needs import Need, RunShape
from asepr.pipeline.stages.attr_cluster import AttrClusters
from asepr.pipeline.stages.attr_rows import scatter_labels
from asepr.pipeline.stages.checks import check_int
from asepr.storage.errors import InputError, SchemaError, format_problem
from asepr.storage.inputs.directory import open_parquet
from asepr.storage.locations.fs import Shard
from asepr.storage.resources import stage

if TYPE_CHECKING:
    import distributed

__all__ = ["column_clusters", "column_needs"]

log = logging.getLogger(__name__)


def _categorical(array: pa.Array | pa.ChunkedArray, shard: Shard, column: str) -> pa.Array:
    """The column decoded (dictionary) and widened to one type per kind (int64, string)."""
    if isinstance(array, pa.ChunkedArray):
        array = array.combine_chunks()
    if pa.types.is_dictionary(array.type):
        array = array.dictionary_decode()
    t = array.type
    if pa.types.is_integer(t):
        return array.cast(pa.int64())
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        return array.cast(pa.large_string())
    if pa.types.is_boolean(t):
        return array
    raise SchemaError(
        format_problem(
            f"file {shard.url}, column '{column}'",
            "a categorical column: integers, strings, booleans or a dictionary of them",
            f"dtype {t}",
            "pick another column, or cast it to int64 or string.",
        )
    )


def _read_column(shard: Shard, column: str) -> tuple[np.ndarray, pa.Array]:
    """``(global_nid, categorical values)`` of one node shard."""
    pf = open_parquet(shard)
    names = list(pf.schema_arrow.names)
    for name in ("id", column):
        if name not in names:
            raise SchemaError(
                format_problem(
                    f"file {shard.url}, column '{name}'",
                    f"a column named '{name}'",
                    f"only the columns {names}",
                    "pick one of those columns, or add it to every node shard."
                    if name == column
                    else "add an int64 'id' column (dense 0..N-1).",
                )
            )
    table = pf.read(columns=["id", column] if column != "id" else ["id"])
    ids_arr = table.column("id")
    if ids_arr.null_count:
        raise InputError(
            format_problem(
                f"file {shard.url}, column 'id'", "no null ids", f"{ids_arr.null_count} null(s)"
            )
        )
    ids = ids_arr.to_numpy().astype(np.int64, copy=False)
    return ids, _categorical(table.column(column), shard, column)


def _column_uniques(shard: Shard, column: str) -> tuple[str, pa.Array, int]:
    _, values = _read_column(shard, column)
    return str(values.type), pc.unique(values.drop_null()), values.null_count


def _column_codes(
    shard: Shard, column: str, value_set: pa.Array, null_code: int
) -> tuple[np.ndarray, np.ndarray]:
    ids, values = _read_column(shard, column)
    codes = pc.index_in(values, value_set=value_set).fill_null(null_code)
    return ids, codes.to_numpy(zero_copy_only=False).astype(np.int32)


def column_clusters(
    node_shards: list[Shard],
    num_nodes: int,
    column: str,
    *,
    client: distributed.Client | None = None,
) -> AttrClusters:
    """Attribute clusters from a categorical node column.

    The sorted distinct non-null values become clusters ``0..C-1`` (integers
    numerically, strings by their UTF-8 bytes, False before True); null values, if any,
    form one more cluster, the last.

    Parameters
    ----------
    node_shards
        The node shards (validated input).
    num_nodes
        N; the shards must hold exactly one row per id in ``[0, N)``.
    column
        The column: integers, strings, booleans or a dictionary of them.
    client
        A ``distributed.Client``; None runs on the local thread pool.

    Raises
    ------
    SchemaError
        A shard lacks the column (the message lists the columns found), or the column
        is not categorical, or its type differs between shards.
    InputError
        Ids are null, out of range, repeated or missing.
    """
    num_nodes = check_int("num_nodes", num_nodes, 1)
    if not node_shards:
        raise InputError(
            format_problem("column_clusters(node_shards=...)", "at least one node shard", "none")
        )
    with stage("attr_cluster", log) as info:
        prefix = task_prefix("attr-column")
        found = first_error(
            compute(
                [
                    dask.delayed(captured)(
                        _column_uniques, s, column, dask_key_name=f"{prefix}-unique-{i}"
                    )
                    for i, s in enumerate(node_shards)
                ],
                client,
            )
        )
        types = {t for t, _, _ in found}
        if len(types) > 1:
            raise SchemaError(
                format_problem(
                    f"column '{column}' of the node shards",
                    "one type in every shard",
                    ", ".join(f"{s.url}: {t}" for s, (t, _, _) in zip(node_shards, found)),
                    "cast the column to one type (int64 or string) in every shard.",
                )
            )
        uniques = pc.unique(pa.chunked_array([u for _, u, _ in found], type=found[0][1].type))
        if isinstance(uniques, pa.ChunkedArray):
            uniques = uniques.combine_chunks()
        value_set = uniques.take(pc.sort_indices(uniques))
        has_null = any(nulls for _, _, nulls in found)
        num_clusters = len(value_set) + int(has_null)
        vs_node = share(value_set, client, f"{prefix}-values")
        parts = compute(
            [
                dask.delayed(_column_codes)(
                    s, column, vs_node, len(value_set), dask_key_name=f"{prefix}-codes-{i}"
                )
                for i, s in enumerate(node_shards)
            ],
            client,
        )
        attr_cluster_id = scatter_labels(parts, node_shards, num_nodes, f"column '{column}'")
        info.update(nodes=num_nodes, clusters=num_clusters, column=column)
    return AttrClusters(
        attr_cluster_id=attr_cluster_id,
        model=None,
        num_clusters=num_clusters,
        passes=0,
        inertia=0.0,
        converged=True,
        source=f"column:{column}",
    )


def column_needs(run: PartitionConfig, s: RunShape) -> Need:
    """Memory of :func:`column_clusters`: tasks read the shards; the driver receives every
    shard's ids and labels (12 B per node) and scatters them with a ``seen`` bool[N]."""
    labels_driver = 8 * s.n + 12 * s.n + 5 * s.n + 8 * s.n_s
    return Need(driver=labels_driver, task=12 * s.n_s + 2 * 16 * min(s.n_s, run.batch_rows),
                tasks=s.node_shards)
