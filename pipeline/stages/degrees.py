"""Stage ②: exact vertex degrees in one pass over the edge shards (docs/design.md#degrees).

One Dask task per edge shard streams ``src``/``dst`` record batches and bincounts them
into an ``int64[N]`` vector. The per-shard vectors are combined by a *tree* sum
(pairwise additions, ``ceil(log2(shards))`` levels deep), so no single task or the
client ever receives more than two O(N) vectors at once, and the sum has one fixed
order for a given shard list whatever the scheduler.

``d(v)`` counts every edge row that has ``v`` as its source plus every row that has
``v`` as its destination; a self-loop therefore counts 2. Edges are counted as stored:
for an undirected input (each edge stored once) this is the undirected degree.

The Dask plumbing (tree sums, compute) lives in :mod:`asepr.pipeline.dask_ops`.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING

import dask
import numpy as np
import pyarrow as pa

from asepr.pipeline.dask_ops import compute, task_prefix, tree_reduce
from asepr.storage.errors import InputError, format_problem
from asepr.storage.inputs.directory import open_parquet
from asepr.storage.integrity.checks import count_ids
from asepr.storage.locations.fs import Shard
from asepr.storage.resources import stage

if TYPE_CHECKING:
    import distributed

__all__ = ["Degrees", "compute_degrees"]

log = logging.getLogger(__name__)


@dataclass(frozen=True, eq=False)
class Degrees:
    """Exact degrees of every vertex.

    Attributes
    ----------
    degree
        ``int64[N]``, indexed by ``global_nid``: edge rows with the vertex as ``src``
        plus edge rows with it as ``dst`` (a self-loop counts 2).
    num_nodes
        N.
    num_edges
        The number of edge rows over all shards.
    """

    degree: np.ndarray
    num_nodes: int
    num_edges: int


# --- the stage ------------------------------------------------------------------------


def _shard_degrees(shard: Shard, num_nodes: int, batch_rows: int) -> tuple[np.ndarray, int]:
    """Degree vector and row count of one edge shard (runs in a Dask task)."""
    degree = np.zeros(num_nodes, dtype=np.int64)
    rows = 0
    pf = open_parquet(shard)
    names = pf.schema_arrow.names
    for column in ("src", "dst"):
        if column not in names:
            raise InputError(
                format_problem(
                    f"file {shard.url}, column '{column}'",
                    f"a column named '{column}'",
                    f"only the columns {names}",
                    "name the endpoint columns 'src' and 'dst' (int64); "
                    "run `asepr validate` first.",
                )
            )
    try:
        batches = pf.iter_batches(batch_size=batch_rows, columns=["src", "dst"])
        for batch in batches:
            ids = np.concatenate(
                [_endpoint_ids(shard, c, rows, batch.column(c), num_nodes) for c in ("src", "dst")]
            )
            count_ids(degree, ids)
            rows += batch.num_rows
    except (pa.ArrowInvalid, pa.ArrowIOError, OSError) as exc:
        raise InputError(
            format_problem(
                f"file {shard.url}, rows from {rows}",
                "decodable Parquet pages",
                f"a decoding error ({exc})",
                "the file is corrupt or truncated; re-copy or re-export it.",
            )
        ) from exc
    return degree, rows


def _endpoint_ids(
    shard: Shard, column: str, row0: int, array: pa.Array, num_nodes: int
) -> np.ndarray:
    """``array`` as int64 ids, with cheap guards so that bad input fails clearly."""
    where = f"file {shard.url}, column '{column}', rows {row0}..{row0 + len(array) - 1}"
    fix = "run `asepr validate` on the input and fix what it reports."
    if array.null_count:
        raise InputError(format_problem(where, "no null ids", f"{array.null_count} null(s)", fix))
    if not pa.types.is_integer(array.type):
        raise InputError(format_problem(where, "int64 ids", f"dtype {array.type}", fix))
    ids = array.to_numpy().astype(np.int64, copy=False)
    if len(ids) and (ids.min() < 0 or ids.max() >= num_nodes):
        bad = ids[(ids < 0) | (ids >= num_nodes)]
        raise InputError(
            format_problem(
                where,
                f"ids in [0, {num_nodes})",
                f"{len(bad):,} id(s) outside, e.g. {int(bad[0])}",
                fix,
            )
        )
    return ids


def _add_pair(a: tuple[np.ndarray, int], b: tuple[np.ndarray, int]) -> tuple[np.ndarray, int]:
    return a[0] + b[0], a[1] + b[1]


def compute_degrees(
    edge_shards: list[Shard],
    num_nodes: int,
    *,
    client: distributed.Client | None = None,
    batch_rows: int = 1 << 20,
) -> Degrees:
    """Exact degrees of all vertices, one Dask task per edge shard plus a tree sum.

    Parameters
    ----------
    edge_shards
        The edge shards (validated input), e.g. from :func:`asepr.storage.locations.fs.discover_shards`.
    num_nodes
        N; every id must lie in ``[0, N)``.
    client
        A ``distributed.Client``; None runs on the local thread pool.
    batch_rows
        Rows per record batch inside a task; a task holds O(N + batch_rows).

    Returns
    -------
    Degrees

    Raises
    ------
    InputError
        ``num_nodes`` or ``batch_rows`` is invalid, or a shard is unreadable or holds
        a null or out-of-range id.
    """
    if int(num_nodes) != num_nodes or num_nodes < 0:
        raise InputError(
            format_problem("compute_degrees(num_nodes=...)", "an integer >= 0", repr(num_nodes))
        )
    if int(batch_rows) != batch_rows or batch_rows < 1:
        raise InputError(
            format_problem("compute_degrees(batch_rows=...)", "an integer >= 1", repr(batch_rows))
        )
    num_nodes, batch_rows = int(num_nodes), int(batch_rows)
    with stage("degrees", log) as info:
        if edge_shards:
            prefix = task_prefix("degrees")
            parts = [
                dask.delayed(_shard_degrees)(
                    shard, num_nodes, batch_rows, dask_key_name=f"{prefix}-shard-{i}"
                )
                for i, shard in enumerate(edge_shards)
            ]
            degree, num_edges = compute(tree_reduce(parts, _add_pair, prefix), client)
        else:
            degree, num_edges = np.zeros(num_nodes, dtype=np.int64), 0
        info.update(shards=len(edge_shards), nodes=num_nodes, edges=num_edges)
    return Degrees(degree=degree, num_nodes=num_nodes, num_edges=int(num_edges))
