"""The checks of the validator, one shard or one record batch at a time.

:mod:`asepr.storage.integrity.validate` (a whole input) and :mod:`asepr.storage.integrity.validate_increment` (new
shards for a partitioned output) run the same checks: the schema pass over the shards'
footers (:func:`schema_pass`), the node pass (:func:`node_pass`, its O(N) state in
:class:`NodeState`) and the checked edge batches (:func:`checked_edges`). Every problem is
an error that names the file, the column and the row range, says what was expected,
what was found and how to fix it.

The checked rows can be handed on as they are read (``rows`` of :func:`node_pass`,
``on_batch`` of :func:`checked_edges`); :mod:`asepr.storage.inputs.decoded_copy` writes them to disk.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Protocol

import numba
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from asepr.storage.errors import AseprError, InputError, format_problem
from asepr.storage.inputs.directory import open_parquet
from asepr.storage.inputs.schema import (
    FeatureLayout,
    check_edge_schema,
    check_node_schema,
    feature_matrix,
)
from asepr.storage.integrity.claims import check_claim
from asepr.storage.integrity.report import ShardInfo
from asepr.storage.locations.fs import Shard, fingerprint
from asepr.storage.progress import advance

__all__ = [
    "NodeRows",
    "NodeState",
    "check_footer_rows",
    "checked_edges",
    "count_endpoints",
    "count_ids",
    "iter_batches",
    "node_pass",
    "schema_pass",
    "shard_infos",
    "split_dict",
]

log = logging.getLogger(__name__)


class NodeRows(Protocol):
    """Receives the node pass's checked batches (:class:`asepr.storage.inputs.node_table.NodeTableWriter`);
    its owner closes it."""

    def add(self, ids: np.ndarray, feat: np.ndarray, label: np.ndarray | None,
            split: np.ndarray | None) -> None: ...

    def close(self) -> None: ...

_VALID_SPLITS = np.array([-1, 0, 1, 2], dtype=np.int8)
_NODE_BATCH_BYTES = 16 << 20


def iter_batches(pf: pq.ParquetFile, shard: Shard, columns: list[str], batch_rows: int):
    """Yield ``(row0, batch)``; decoding errors become InputError naming the row range, and
    so does a file that decodes to another number of rows than its footer claims (the
    later passes size their output from the footer)."""
    row0 = 0
    it = pf.iter_batches(batch_size=batch_rows, columns=columns)
    while True:
        try:
            batch = next(it)
        except StopIteration:
            _check_decoded_rows(shard, pf.metadata.num_rows, row0)
            return
        except (pa.ArrowInvalid, pa.ArrowIOError, OSError) as exc:
            raise InputError(
                format_problem(
                    f"file {shard.url}, rows from {row0}",
                    "decodable Parquet pages",
                    f"a decoding error ({exc})",
                    "the file is corrupt or truncated; re-copy or re-export it.",
                )
            ) from exc
        yield row0, batch
        row0 += batch.num_rows


def _footer_problem(shard: Shard, claimed: int, found: str) -> InputError:
    return InputError(
        format_problem(
            f"file {shard.url}, Parquet footer",
            f"the footer's row count ({claimed:,}) to match the rows stored in the file",
            found,
            "the footer is damaged or was written by a faulty writer; re-export the file.",
        )
    )


def _check_decoded_rows(shard: Shard, claimed: int, decoded: int) -> None:
    if decoded != claimed:
        raise _footer_problem(shard, claimed, f"{decoded:,} rows decoded")


def check_footer_rows(pf: pq.ParquetFile, shard: Shard) -> int:
    """The file's row count, once its footer's total equals the sum of its row groups'."""
    meta = pf.metadata
    groups = sum(meta.row_group(i).num_rows for i in range(meta.num_row_groups))
    if groups != meta.num_rows:
        raise _footer_problem(shard, meta.num_rows,
                              f"{groups:,} rows in its {meta.num_row_groups} row group(s)")
    return meta.num_rows


def _bad_values(
    shard: Shard,
    column: str,
    row0: int,
    values: np.ndarray,
    bad: np.ndarray,
    expected: str,
    fix: str,
    error: type[AseprError] = InputError,
) -> AseprError:
    idx = np.flatnonzero(bad)
    first = int(idx[0])
    where = f"file {shard.url}, column '{column}', rows {row0}..{row0 + len(values) - 1}"
    value = values[first]
    value = value.item() if isinstance(value, np.generic) else value
    found = f"{len(idx):,} bad value(s) in this batch, the first {value!r} at row {row0 + first}"
    return error(format_problem(where, expected, found, fix))


def _no_nulls(shard: Shard, column: str, row0: int, array: pa.Array) -> None:
    if array.null_count:
        mask = np.asarray(array.is_null().to_numpy(zero_copy_only=False))
        raise _bad_values(
            shard, column, row0, np.where(mask, None, 0), mask,
            "no null values", f"fill or drop the rows with a null '{column}'.",
        )


def _check_duplicate_shards(shards: list[Shard], infos: list[ShardInfo]) -> None:
    """Reject two non-empty shards with the same bytes (their rows would count twice).

    Empty shards (0 rows) are legal and may well be byte-identical, so they are skipped.
    """
    # hashlib releases the GIL on large blocks: the shards hash side by side.
    with ThreadPoolExecutor(max_workers=max(1, min(4, os.cpu_count() or 1, len(shards)))) as pool:
        digests = list(pool.map(fingerprint, shards))
    seen: dict[str, Shard] = {}
    for shard, info, digest in zip(shards, infos, digests):
        info.sha256 = digest
        if info.rows == 0:
            continue
        if info.sha256 in seen:
            raise InputError(
                format_problem(
                    f"file {shard.url}",
                    "every shard to hold different rows",
                    f"the same content (sha256 {info.sha256[:16]}…) as {seen[info.sha256].url}",
                    "remove the copy; each row must appear in exactly one shard.",
                )
            )
        seen[info.sha256] = shard


class NodeState:
    """O(N) state of the node pass."""

    def __init__(self, num_nodes: int, num_classes: int | None, offset: int = 0):
        self.num_nodes = num_nodes
        self.num_classes = num_classes
        #: The first valid id: 0 for an input, the next free id for an increment.
        self.offset = offset
        self.seen = np.zeros(num_nodes, dtype=bool)
        self.label_counts = np.zeros(0, dtype=np.int64)
        self.split_counts = np.zeros(4, dtype=np.int64)
        self.labelled = 0
        self.feat_dim: int | None = None
        self.feat_origin: str | None = None
        self.layout_kind: str | None = None


def _validate_node_batch(state: NodeState, shard: Shard, row0: int, batch: pa.RecordBatch,
                         layout: FeatureLayout, present: list[str], rows: NodeRows | None) -> None:
    """Check one node batch and add its labels and splits to ``state`` (and hand its
    checked rows to ``rows``)."""
    ids = _check_node_ids(state, shard, row0, batch.column("id"))
    feat = _check_features(state, shard, row0, batch, layout, ids)
    labels = _count_labels(state, shard, row0, batch.column("label")) if "label" in present else None
    if "split" in present:
        splits = _count_splits(state, shard, row0, batch.column("split"))
    else:
        splits = None
        state.split_counts[0] += batch.num_rows
    if rows is not None:
        rows.add(ids, feat, labels, splits)


def _check_node_ids(state: NodeState, shard: Shard, row0: int, ids_arr: pa.Array) -> np.ndarray:
    """Node ids non-null, in range and each seen once; marks them seen and returns them."""
    n_nodes = state.num_nodes
    _no_nulls(shard, "id", row0, ids_arr)
    ids = ids_arr.to_numpy()
    lo, hi = state.offset, state.offset + n_nodes
    first_bad = _mark_new(state.seen, ids, lo, hi)
    if first_bad < 0:
        return ids
    # Unmark this batch's rows before the bad one, and word the error from masks.
    state.seen[ids[:first_bad] - lo] = False
    bad = (ids < lo) | (ids >= hi)
    if bad.any():
        if lo:
            raise _bad_values(
                shard, "id", row0, ids, bad,
                f"new node ids in [{lo}, {hi}): contiguous from the next free id {lo} "
                f"({n_nodes:,} new node rows; ids 0..{lo - 1} are taken)",
                f"number the new nodes {lo}..{hi - 1}, one row each; edges may name "
                f"existing nodes 0..{lo - 1} without a node row.",
            )
        raise _bad_values(
            shard, "id", row0, ids, bad,
            f"node ids in [0, {n_nodes}) (dense ids; N = {n_nodes:,} node rows)",
            "node ids must be dense 0..N-1; remap them with `asepr import edgelist` "
            "(which writes id_map.parquet).",
        )
    local = ids - lo if lo else ids
    dup_in_batch = np.zeros(len(local), dtype=bool)
    if len(local) > 1:
        order = np.argsort(local, kind="stable")
        dup_sorted = np.zeros(len(local), dtype=bool)
        dup_sorted[1:] = local[order][1:] == local[order][:-1]
        dup_in_batch[order] = dup_sorted
    dup = state.seen[local] | dup_in_batch
    if dup.any():
        raise _bad_values(
            shard, "id", row0, ids, dup,
            "each node id exactly once across all node shards (this id already has a row)",
            "keep one row per node; check for overlapping or copied node shards.",
        )
    state.seen[local] = True
    return ids


def _check_features(state: NodeState, shard: Shard, row0: int, batch: pa.RecordBatch,
                    layout: FeatureLayout, ids: np.ndarray) -> np.ndarray:
    """Feature vectors of one width across all shards, and finite; returns them."""
    rows = f"rows {row0}..{row0 + batch.num_rows - 1}"
    try:
        feat = feature_matrix(batch, layout)
    except ValueError as exc:
        raise InputError(
            format_problem(
                f"file {shard.url}, column 'feat', {rows}",
                "one feature vector of the same width per node",
                str(exc),
                "pad or truncate the vectors to one width d, and drop null rows.",
            )
        ) from exc
    if not batch.num_rows:
        return feat
    width = feat.shape[1]
    if state.feat_dim is None:
        state.feat_dim, state.feat_origin = width, shard.url
    elif width != state.feat_dim:
        raise InputError(
            format_problem(
                f"file {shard.url}, column '{layout.columns[0]}', {rows}",
                f"feature width {state.feat_dim} (as in {state.feat_origin})",
                f"width {width}",
                "every node shard must store vectors of the same width d.",
            )
        )
    finite = np.isfinite(feat)
    if not finite.all():
        rows_bad = ~finite.all(axis=1)
        first = int(np.flatnonzero(rows_bad)[0])
        col = int(np.flatnonzero(~finite[first])[0])
        raise InputError(
            format_problem(
                f"file {shard.url}, column '{layout.columns[0] if layout.kind != 'columns' else layout.columns[col]}', "
                f"{rows}",
                "finite float32 features",
                f"{int(rows_bad.sum()):,} row(s) with NaN or inf, the first at row {row0 + first} "
                f"(node id {int(ids[first])}, feature {col} = {feat[first, col]})",
                "impute or zero the missing values before writing.",
            )
        )
    return feat


def _count_labels(state: NodeState, shard: Shard, row0: int, label_arr: pa.Array) -> np.ndarray:
    """Labels non-null and in ``[-1, C)``; counts the known ones per class; returns them."""
    _no_nulls(shard, "label", row0, label_arr)
    labels = label_arr.to_numpy()
    upper = state.num_classes
    bad = labels < -1 if upper is None else (labels < -1) | (labels >= upper)
    if bad.any():
        expected = "labels >= -1 (-1 = unknown)" if upper is None else (
            f"labels in [-1, {upper}) (-1 = unknown; num_classes = {upper})"
        )
        raise _bad_values(
            shard, "label", row0, labels, bad, expected,
            "use -1 for unknown labels and class ids 0..C-1 otherwise"
            + ("" if upper is None else ", or fix num_classes in meta.json") + ".",
        )
    known = labels[labels >= 0]
    state.labelled += len(known)
    if len(known):
        top = int(known.max())
        if top >= len(state.label_counts):  # the counts are kept per class id up to the largest
            check_claim(top + 1, 8, where=f"file {shard.url}, column 'label', rows from {row0}",
                        claim="class ids (the largest label + 1 classes)",
                        fix="number the classes 0..C-1 (map sparse class ids to dense ones), or set num_classes "
                            "in meta.json.")
        counts = np.bincount(known)
        if len(counts) > len(state.label_counts):
            counts[: len(state.label_counts)] += state.label_counts
            state.label_counts = counts
        else:
            state.label_counts[: len(counts)] += counts
    return labels


def _count_splits(state: NodeState, shard: Shard, row0: int, split_arr: pa.Array) -> np.ndarray:
    """Split codes non-null and in ``{-1, 0, 1, 2}``; counts them; returns them."""
    _no_nulls(shard, "split", row0, split_arr)
    splits = split_arr.to_numpy()
    bad = ~np.isin(splits, _VALID_SPLITS)
    if bad.any():
        raise _bad_values(
            shard, "split", row0, splits, bad,
            "split codes 0 (train), 1 (val), 2 (test) or -1 (none)",
            "recode the split column as int8 with those values.",
        )
    state.split_counts += np.bincount(splits.astype(np.int64) + 1, minlength=4)[:4]
    return splits


def node_pass(state: NodeState, node_files, batch_rows: int, rows: NodeRows | None = None) -> None:
    """Validate every node shard, batch by batch, into ``state``; ``rows.add(ids, feat,
    labels, splits)`` receives every checked batch (labels, splits None where absent)."""
    # Shards are reopened one at a time: a ParquetFile kept alive after it has been
    # read holds on to several MB of buffers (measured ~7 MB per edge shard).
    for shard, layout, present in node_files:
        pf = open_parquet(shard)
        columns = ["id", *layout.columns, *present]
        # Bound a node batch by its feature bytes too: 8,000-wide rows add up fast.
        node_rows = max(1024, min(batch_rows, _NODE_BATCH_BYTES // (4 * (layout.dim or 256))))
        for row0, batch in iter_batches(pf, shard, columns, node_rows):
            _validate_node_batch(state, shard, row0, batch, layout, present, rows)
            advance(batch.num_rows)
        log.debug("validated node shard %s", shard.url)


def _validate_edge_batch(shard: Shard, row0: int, batch: pa.RecordBatch, columns: list[str],
                         num_ids: int, expected: str, fix: str) -> tuple[np.ndarray, np.ndarray]:
    """Check one edge batch: endpoints non-null and in ``[0, num_ids)``, weights finite.

    ``expected`` and ``fix`` word the message for an endpoint out of range. Returns
    ``(src, dst)``.
    """
    ends = []
    for column in ("src", "dst"):
        _no_nulls(shard, column, row0, batch.column(column))
        ids = batch.column(column).to_numpy()
        if _any_outside(ids, num_ids):
            raise _bad_values(shard, column, row0, ids, (ids < 0) | (ids >= num_ids), expected, fix)
        ends.append(ids)
    if "weight" in columns:
        weight = batch.column("weight")
        _no_nulls(shard, "weight", row0, weight)
        w = weight.to_numpy()
        if not np.isfinite(w).all():
            raise _bad_values(
                shard, "weight", row0, w, ~np.isfinite(w),
                "finite edge weights", "replace NaN or inf weights.",
            )
    return ends[0], ends[1]


def checked_edges(edge_files, batch_rows: int, num_ids: int, expected: str, fix: str,
                   on_batch: Callable[[int, np.ndarray, np.ndarray], None] | None = None):
    """Yield ``(src, dst)`` of every edge batch, each checked by :func:`_validate_edge_batch`
    (and handed to ``on_batch(shard index, src, dst)`` first)."""
    for index, (shard, columns) in enumerate(edge_files):
        pf = open_parquet(shard)
        for row0, batch in iter_batches(pf, shard, columns, batch_rows):
            src, dst = _validate_edge_batch(shard, row0, batch, columns, num_ids, expected, fix)
            if on_batch is not None:
                on_batch(index, src, dst)
            yield src, dst


def split_dict(split_counts: np.ndarray) -> dict[str, int]:
    sc = split_counts
    return {"train": int(sc[1]), "val": int(sc[2]), "test": int(sc[3]), "none": int(sc[0])}


def shard_infos(shards: list[Shard]) -> list[ShardInfo]:
    return [ShardInfo(url=s.url, rows=0, sha256="") for s in shards]


@numba.njit(cache=True, nogil=True)
def _mark_new(seen, ids, lo, hi):  # pragma: no cover - numba
    """Mark ``seen[id - lo]`` for every id; the first row whose id is outside
    ``[lo, hi)`` or already seen (earlier in the batch too), else -1."""
    for i in range(len(ids)):
        v = ids[i]
        if v < lo or v >= hi or seen[v - lo]:
            return i
        seen[v - lo] = True
    return -1


@numba.njit(cache=True, nogil=True)
def _any_outside(ids, num_ids):  # pragma: no cover - numba
    """Whether an id lies outside ``[0, num_ids)`` (one pass, no temporaries)."""
    for i in range(len(ids)):
        if ids[i] < 0 or ids[i] >= num_ids:
            return True
    return False


@numba.njit(cache=True, nogil=True)
def _add_ids(degree, ids):  # pragma: no cover - numba
    for i in range(len(ids)):
        degree[ids[i]] += 1


@numba.njit(cache=True, nogil=True)
def count_endpoints(degree, src, dst):  # pragma: no cover - numba
    """``degree`` += both endpoints of every edge; returns the self-loops."""
    loops = 0
    for i in range(len(src)):
        degree[src[i]] += 1
        degree[dst[i]] += 1
        if src[i] == dst[i]:
            loops += 1
    return loops


def count_ids(degree: np.ndarray, ids: np.ndarray) -> None:
    """``degree[ids] += 1`` per occurrence, in place; ``ids`` in ``[0, len(degree))``
    (checked by the caller). One pass without temporaries: neither ``bincount``'s O(N)
    array per batch nor ``np.add.at``'s slow path."""
    _add_ids(degree, np.ascontiguousarray(ids))


def schema_pass(node_shards, node_infos, edge_shards, edge_infos, warnings: list[str]):
    """Check every shard's schema from its footer and record its row count.

    Returns ``(node_files, edge_files, layouts, categorical, edge_columns)``; warns about
    empty shards and raises on duplicate ones (after the schema checks, so that a
    truncated file is reported as such, not as a copy)."""
    node_files = []
    layouts: dict[str, FeatureLayout] = {}
    categorical: list[str] = []
    for shard, info in zip(node_shards, node_infos):
        pf = open_parquet(shard)
        layout, present, cats = check_node_schema(pf.schema_arrow, shard.url)
        info.rows = check_footer_rows(pf, shard)
        node_files.append((shard, layout, present))
        layouts[layout.kind] = layout
        categorical += [c for c in cats if c not in categorical]
    edge_files = []
    edge_columns: list[str] = []
    for shard, info in zip(edge_shards, edge_infos):
        pf = open_parquet(shard)
        columns = check_edge_schema(pf.schema_arrow, shard.url)
        info.rows = check_footer_rows(pf, shard)
        edge_files.append((shard, columns))
        edge_columns += [c for c in columns if c not in edge_columns]
    for shard, info in zip(node_shards + edge_shards, node_infos + edge_infos):
        if info.rows == 0:
            warnings.append(f"empty shard {shard.url} (0 rows)")
    _check_duplicate_shards(node_shards + edge_shards, node_infos + edge_infos)
    return node_files, edge_files, layouts, categorical, edge_columns
