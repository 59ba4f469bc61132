"""Where attribute clustering reads its rows: the node shards or the decoded node table.

Attribute clustering (:mod:`asepr.pipeline.stages.attr_cluster`) asks three things of its
input, whatever it is: its rows and feature width (step 0), the embedded rows at
given shard-order row numbers or every row with its id (step 1), and every row with
its id, batch by batch (step 3). A :class:`NodeRows` answers them; it cuts the input
into pieces that run as tasks, and each piece reads its rows:

* :class:`ShardRows`: the Parquet node shards. A piece (:class:`ShardPiece`) is a
  shard, read by a Dask task (local threads or a cluster); every batch is checked
  (null ids, widths, finite values, the footer's row count), since nothing says the
  shards were validated.
* :class:`TableRows`: the validator's decoded node table (:mod:`asepr.storage.inputs.node_table`).
  A piece (:class:`TablePiece`) is a block of ids, read by a thread of this process;
  the sample draws the same rows (by shard-order row number) as from the shards.
"""

from __future__ import annotations

import os
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import dask
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from asepr.pipeline.dask_ops import captured, compute, first_error, share
from asepr.pipeline.stages.kmeans import embed
from asepr.storage.errors import InputError, format_problem
from asepr.storage.inputs.directory import open_parquet
from asepr.storage.inputs.node_table import NodeTable
from asepr.storage.inputs.schema import FeatureLayout, check_node_schema, feature_matrix
from asepr.storage.locations.fs import Shard

if TYPE_CHECKING:
    import distributed

__all__ = ["NodeRows", "ShardPiece", "ShardRows", "TablePiece", "TableRows", "label_threads", "rows_per_batch",
           "scatter_labels"]

#: Target uncompressed bytes per record batch when reading features.
_BATCH_BYTES = 64 << 20


def rows_per_batch(feat_dim: int, batch_rows: int) -> int:
    """``batch_rows`` capped so that one decoded batch holds about ``_BATCH_BYTES``.

    The width, not the Parquet byte counts, sets the cap: sparse features compress
    (and encode) to a fraction of their decoded size.
    """
    return max(1, min(batch_rows, _BATCH_BYTES // (8 + 4 * feat_dim)))


def label_threads() -> int:
    """Threads that label the decoded node table: the cores, at most 4."""
    return max(1, min(4, os.cpu_count() or 1))


# --- the pieces: one shard, or a block of the decoded table ---------------------------


@dataclass(frozen=True)
class ShardPiece:
    """One Parquet node shard, read batch by batch and checked."""

    shard: Shard
    feat_dim: int
    batch_rows: int

    def batches(self, projection: np.ndarray | None) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        """``(global_nid, embedded rows)`` of every row, in file order."""
        pf = open_parquet(self.shard)
        for _, ids, x in _all_rows(pf, self.shard, self.feat_dim, projection, self.batch_rows):
            yield ids, x

    def rows(self) -> int:
        return open_parquet(self.shard).metadata.num_rows

    def picked(self, picks: np.ndarray, projection: np.ndarray | None) -> np.ndarray:
        """The embedded rows ``picks`` (sorted file row numbers), in order."""
        return _picked_rows(self.shard, self.feat_dim, projection, picks, self.batch_rows)

    def every_row(self, projection: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
        """``(global_nid, embedded rows)`` of every row, in file order."""
        return _collect(self.rows(), self.batches(projection), _width(self.feat_dim, projection))


@dataclass(frozen=True)
class TablePiece:
    """The ids ``start..stop-1`` of the decoded node table, read in blocks of ``block`` rows."""

    table: NodeTable
    start: int
    stop: int
    block: int

    def batches(self, projection: np.ndarray | None) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        """``(ids, embedded rows)`` of the piece's ids, in id order."""
        for lo in range(self.start, self.stop, self.block):
            hi = min(self.stop, lo + self.block)
            yield np.arange(lo, hi, dtype=np.int64), self._embed(self.table.rows(lo, hi), projection)

    def picked(self, picks: np.ndarray, projection: np.ndarray | None) -> np.ndarray:
        """The embedded rows at shard-order row numbers ``picks``, in order."""
        (feat,) = self.table.gather(self.table.ids_of_rows(picks), ("x",))
        return self._embed(feat, projection)

    def every_row(self, projection: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
        """``(ids, embedded rows)`` of every row, in shard order (the order a sample draws in)."""
        table = self.table
        ids = table.ids_of_rows(np.arange(table.num_nodes, dtype=np.int64))
        if table.has_order:
            (feat,) = table.gather(ids, ("x",))
        else:
            feat = table.rows(0, table.num_nodes)
        return ids, self._embed(feat, projection)

    def _embed(self, feat: np.ndarray, projection: np.ndarray | None) -> np.ndarray:
        x = embed(feat, projection)
        if not np.isfinite(x).all():
            raise InputError(format_problem(f"decoded node table {self.table.directory}", "finite embedded features",
                                            "NaN or inf values", "rerun the command: the copy is rewritten."))
        return x


# --- the inputs: node shards on Dask tasks, or the decoded table on threads -------------


class NodeRows(ABC):
    """The rows of every node, cut into pieces that run as tasks (module docstring)."""

    @abstractmethod
    def scan(self, num_nodes: int) -> tuple[np.ndarray, int]:
        """Step 0: the shard-order rows of each sample piece and the feature width d."""

    @abstractmethod
    def sample_pieces(self, feat_dim: int) -> list:
        """The pieces the sample is drawn from, whose rows follow one another in shard order."""

    @abstractmethod
    def label_pieces(self, feat_dim: int) -> list:
        """The pieces that step 3 labels, one task each."""

    def shared(self, value: np.ndarray | None, name: str) -> Any:
        """``value`` as every task of a :meth:`run` reads it (None stays None)."""
        return value

    @abstractmethod
    def run(self, name: str, fn: Callable, calls: list[tuple]) -> list:
        """``[fn(*call) for call in calls]``, as tasks; the results in the calls' order."""

    @abstractmethod
    def place(self, labelled: list[tuple[np.ndarray, np.ndarray]], num_nodes: int) -> np.ndarray:
        """``int32 [N]`` cluster ids from each piece's ``(ids, labels)``."""


@dataclass(frozen=True)
class ShardRows(NodeRows):
    """The Parquet node shards, one Dask task per shard (module docstring)."""

    shards: list[Shard]
    client: distributed.Client | None
    prefix: str
    batch_rows: int

    def scan(self, num_nodes: int) -> tuple[np.ndarray, int]:
        return _scan_shards(self.shards, self.client, self.prefix, num_nodes)

    def sample_pieces(self, feat_dim: int) -> list[ShardPiece]:
        return [ShardPiece(s, feat_dim, self.batch_rows) for s in self.shards]

    def label_pieces(self, feat_dim: int) -> list[ShardPiece]:
        return self.sample_pieces(feat_dim)

    def shared(self, value: np.ndarray | None, name: str) -> Any:
        return None if value is None else share(value, self.client, f"{self.prefix}-{name}")

    def run(self, name: str, fn: Callable, calls: list[tuple]) -> list:
        return compute([dask.delayed(fn)(*call, dask_key_name=f"{self.prefix}-{name}-{i}")
                        for i, call in enumerate(calls)], self.client)

    def place(self, labelled: list[tuple[np.ndarray, np.ndarray]], num_nodes: int) -> np.ndarray:
        return scatter_labels(labelled, self.shards, num_nodes, "k-means")


@dataclass(frozen=True)
class TableRows(NodeRows):
    """The validator's decoded node table, blocks of ids on threads (module docstring)."""

    table: NodeTable
    batch_rows: int

    def scan(self, num_nodes: int) -> tuple[np.ndarray, int]:
        table = self.table
        if table.num_nodes != num_nodes or table.feat_dim < 1:
            raise InputError(format_problem(
                f"decoded node table {table.directory}", f"{num_nodes:,} rows of width >= 1",
                f"{table.num_nodes:,} rows of width {table.feat_dim}", "rerun the command: the copy is rewritten."))
        return np.array([num_nodes], dtype=np.int64), table.feat_dim

    def sample_pieces(self, feat_dim: int) -> list[TablePiece]:
        n = self.table.num_nodes
        return [TablePiece(self.table, 0, n, max(1, n))]

    def label_pieces(self, feat_dim: int) -> list[TablePiece]:
        block = rows_per_batch(feat_dim, self.batch_rows)
        n = self.table.num_nodes
        return [TablePiece(self.table, lo, min(n, lo + block), block) for lo in range(0, n, block)]

    def run(self, name: str, fn: Callable, calls: list[tuple]) -> list:
        if len(calls) == 1:
            return [fn(*calls[0])]
        with ThreadPoolExecutor(max_workers=label_threads(), thread_name_prefix=f"asepr-{name}") as pool:
            return list(pool.map(lambda call: fn(*call), calls))

    def place(self, labelled: list[tuple[np.ndarray, np.ndarray]], num_nodes: int) -> np.ndarray:
        attr_cluster_id = np.full(num_nodes, -1, dtype=np.int32)
        for ids, labels in labelled:
            attr_cluster_id[ids] = labels
        return attr_cluster_id


def _width(feat_dim: int, projection: np.ndarray | None) -> int:
    return projection.shape[1] if projection is not None else feat_dim


def _collect(n: int, batches: Iterator[tuple[np.ndarray, np.ndarray]], width: int) -> tuple[np.ndarray, np.ndarray]:
    """Every batch of a piece of at most ``n`` rows (the footer's count, checked by the batches) in one array."""
    ids = np.empty(n, dtype=np.int64)
    emb = np.empty((n, width), dtype=np.float32)
    row0 = 0
    for batch_ids, x in batches:
        ids[row0 : row0 + len(x)] = batch_ids
        emb[row0 : row0 + len(x)] = x
        row0 += len(x)
    return ids, emb


# --- reading and checking a node shard --------------------------------------------------


def _scan_shards(shards: list[Shard], client, prefix: str, num_nodes: int) -> tuple[np.ndarray, int]:
    """Step 0: the rows of every shard and the feature width d (the same in all)."""
    scans = first_error(
        compute(
            [
                dask.delayed(captured)(_scan_shard, s, dask_key_name=f"{prefix}-scan-{i}")
                for i, s in enumerate(shards)
            ],
            client,
        )
    )
    rows = np.array([r for r, _ in scans], dtype=np.int64)
    dims = {d for _, d in scans if d is not None}
    if len(dims) > 1:
        found = ", ".join(f"{s.url}: {d}" for s, (_, d) in zip(shards, scans) if d is not None)
        raise InputError(
            format_problem(
                "node shards, feature width",
                "one width d in every shard",
                found,
                "every node shard must store vectors of the same width d.",
            )
        )
    feat_dim = dims.pop() if dims else 0
    if feat_dim < 1:
        raise InputError(
            format_problem(
                "node shards, features", "feature vectors of width >= 1", f"width {feat_dim}"
            )
        )
    total = int(rows.sum())
    if total != num_nodes:
        raise InputError(
            format_problem(
                f"node shards ({len(shards)} file(s))",
                f"{num_nodes:,} rows (one per node)",
                f"{total:,} rows",
                "run `asepr validate` on the input and fix what it reports.",
            )
        )
    return rows, feat_dim


def _scan_shard(shard: Shard) -> tuple[int, int | None]:
    """``(rows, feature width)`` of a node shard; the width is None for an empty shard."""
    pf = open_parquet(shard)
    layout, _, _ = check_node_schema(pf.schema_arrow, shard.url)
    rows = pf.metadata.num_rows
    if layout.dim is not None:
        return rows, layout.dim
    for batch in pf.iter_batches(batch_size=1, columns=list(layout.columns)):
        if batch.num_rows:
            return rows, _features(batch, layout, shard, 0).shape[1]
    return rows, None


def _features(batch: pa.RecordBatch, layout: FeatureLayout, shard: Shard, row0: int) -> np.ndarray:
    try:
        return feature_matrix(batch, layout)
    except ValueError as exc:
        rows = f"rows {row0}..{row0 + batch.num_rows - 1}"
        raise InputError(
            format_problem(
                f"file {shard.url}, column '{layout.columns[0]}', {rows}",
                "one feature vector of the same width per node",
                str(exc),
                "run `asepr validate` on the input and fix what it reports.",
            )
        ) from exc


def _where(shard: Shard, first: int, last: int) -> str:
    return f"file {shard.url}, rows {first}..{last}"


def _checked_features(batch: pa.RecordBatch, layout: FeatureLayout, shard: Shard, feat_dim: int,
                      rows: tuple[int, int]) -> np.ndarray:
    """The batch's ``[b, d]`` features, or InputError naming the file rows ``rows``."""
    feat = _features(batch, layout, shard, rows[0])
    if feat.shape[1] != feat_dim:
        raise InputError(
            format_problem(
                f"{_where(shard, *rows)}, column '{layout.columns[0]}'",
                f"feature width {feat_dim} (as in the other node shards)",
                f"width {feat.shape[1]}",
                "every node shard must store vectors of the same width d.",
            )
        )
    return feat


def _checked_embed(feat: np.ndarray, projection: np.ndarray | None, layout: FeatureLayout,
                   shard: Shard, rows: tuple[int, int]) -> np.ndarray:
    """:func:`embed`, or InputError when a row is not finite."""
    x = embed(feat, projection)
    if not np.isfinite(x).all():
        raise InputError(
            format_problem(
                f"{_where(shard, *rows)}, column '{layout.columns[0]}'",
                "finite features",
                "NaN or inf values",
                "run `asepr validate` on the input and fix what it reports.",
            )
        )
    return x


def _all_rows(pf: pq.ParquetFile, shard: Shard, feat_dim: int, projection: np.ndarray | None,
              batch_rows: int) -> Iterator[tuple[int, np.ndarray, np.ndarray]]:
    """``(first row, global_nid, embedded rows)`` of every row of a node shard, batch by
    batch, checked (at most the footer's row count, which the caller may allocate)."""
    layout, _, _ = check_node_schema(pf.schema_arrow, shard.url)
    n = pf.metadata.num_rows
    row0 = 0
    for batch in pf.iter_batches(batch_size=rows_per_batch(feat_dim, batch_rows),
                                 columns=["id", *layout.columns]):
        b = batch.num_rows
        rows = (row0, row0 + b - 1)
        if row0 + b > n:
            raise InputError(
                format_problem(_where(shard, *rows), f"{n} rows (the footer's count)", "more rows")
            )
        id_col = batch.column("id")
        if id_col.null_count:
            raise InputError(
                format_problem(f"{_where(shard, *rows)}, column 'id'", "no null ids",
                               f"{id_col.null_count} null(s)")
            )
        feat = _checked_features(batch, layout, shard, feat_dim, rows)
        ids = id_col.to_numpy().astype(np.int64, copy=False)
        yield row0, ids, _checked_embed(feat, projection, layout, shard, rows)
        row0 += b
    if row0 != n:
        raise InputError(
            format_problem(f"file {shard.url}", f"{n} rows (the footer's count)", f"{row0}")
        )


def _picked_rows(shard: Shard, feat_dim: int, projection: np.ndarray | None, picks: np.ndarray,
                 batch_rows: int) -> np.ndarray:
    """The embedded rows ``picks`` (sorted file row numbers) of a node shard, in order.

    Only the feature column of the row groups that hold a pick is decoded, one row group
    at a time; only the picked rows are embedded and checked.
    """
    pf = open_parquet(shard)
    layout, _, _ = check_node_schema(pf.schema_arrow, shard.url)
    width = projection.shape[1] if projection is not None else feat_dim
    out = np.empty((len(picks), width), dtype=np.float32)
    starts = _row_group_starts(pf.metadata)
    group_of = np.searchsorted(starts, picks, side="right") - 1
    if len(picks) and (picks[-1] >= starts[-1] or picks[0] < 0):
        raise InputError(format_problem(f"file {shard.url}", f"{starts[-1]} rows (the footer's "
                                        "count)", f"a row {int(picks[-1])} to sample"))
    done = 0
    for g in np.unique(group_of):
        row0 = int(starts[g])
        for batch in pf.iter_batches(batch_size=rows_per_batch(feat_dim, batch_rows),
                                     row_groups=[int(g)], columns=list(layout.columns)):
            b = batch.num_rows
            hi = done + int(np.searchsorted(picks[done:], row0 + b))
            if hi > done:
                rows = (int(picks[done]), int(picks[hi - 1]))
                feat = _checked_features(batch, layout, shard, feat_dim, (row0, row0 + b - 1))
                out[done:hi] = _checked_embed(feat[picks[done:hi] - row0], projection, layout,
                                              shard, rows)
                done = hi
            row0 += b
    if done != len(picks):
        raise InputError(format_problem(f"file {shard.url}", f"{starts[-1]} rows (the footer's "
                                        "count)", f"fewer rows in its row groups (no row "
                                        f"{int(picks[done])})"))
    return out


def _row_group_starts(meta: pq.FileMetaData) -> np.ndarray:
    """``int64 [groups + 1]``: the first file row of each row group, then the row count."""
    sizes = [meta.row_group(g).num_rows for g in range(meta.num_row_groups)]
    return np.r_[0, np.cumsum(sizes, dtype=np.int64)].astype(np.int64)


def scatter_labels(
    parts: list[tuple[np.ndarray, np.ndarray]], shards: list[Shard], num_nodes: int, what: str
) -> np.ndarray:
    """Place per-shard ``(global_nid, cluster id)`` into one ``int32 [N]`` array."""
    attr_cluster_id = np.full(num_nodes, -1, dtype=np.int32)
    seen = np.zeros(num_nodes, dtype=bool)
    # Row of each id within its shard: of repeated ids only the last row keeps its own
    # (O(rows), without the sort np.unique would need).
    position = np.empty(num_nodes, dtype=np.int32)
    for shard, (ids, labels) in zip(shards, parts):
        bad = (ids < 0) | (ids >= num_nodes)
        if bad.any():
            raise InputError(
                format_problem(
                    f"file {shard.url}, column 'id'",
                    f"node ids in [0, {num_nodes})",
                    f"{int(bad.sum()):,} id(s) outside, e.g. {int(ids[bad][0])}",
                    "run `asepr validate` on the input and fix what it reports.",
                )
            )
        rows = np.arange(len(ids), dtype=np.int32)
        position[ids] = rows
        if seen[ids].any() or not np.array_equal(position[ids], rows):
            raise InputError(
                format_problem(
                    f"file {shard.url}, column 'id'",
                    "each node id exactly once across all node shards",
                    "a repeated id",
                    "run `asepr validate` on the input and fix what it reports.",
                )
            )
        seen[ids] = True
        attr_cluster_id[ids] = labels
    if not seen.all():
        missing = np.flatnonzero(~seen)
        raise InputError(
            format_problem(
                f"node shards ({what})",
                f"one row for every node id in [0, {num_nodes})",
                f"{len(missing):,} id(s) without a row, e.g. {int(missing[0])}",
                "run `asepr validate` on the input and fix what it reports.",
            )
        )
    return attr_cluster_id
