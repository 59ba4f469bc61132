"""Streaming validation of an input directory, one record batch at a time.

Memory is O(N) (a seen-bitmap and degree counts over the nodes) plus one record batch;
the duplicate-edge count spills to disk (:mod:`storage.dedup`). Validation stops at the
first problem with an error that names the file, the column and the row range, says
what was expected and what was found, and how to fix it.

Checks, in order:

1. ``meta.json``, if present, has its fields' JSON types, and the shards exist
   (directory, glob or fsspec URL) and can be listed (:func:`storage.input.open_input`);
2. shards are readable Parquet files with the required columns and dtypes
   (:mod:`storage.schema`);
3. no two shards have the same content (sha256), which would double-count rows;
4. nodes: ids non-null, in ``[0, N)`` and unique, features finite with one width in
   every shard, labels in ``[-1, C)``, splits in ``{-1, 0, 1, 2}``; every id in
   ``0..N-1`` has a row;
5. edges: ids non-null and in ``[0, N)``, weights finite; self-loops and duplicate edges
   are *counted* (they are legal, and ``asepr clean`` drops them on request).

Empty shards (zero rows) are legal but reported as warnings.
"""

from __future__ import annotations

import logging
import os
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numba
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from storage.decoded import DecodedWriter
from storage.dedup import EdgeDedup
from storage.errors import AseprError, InputError, format_problem
from storage.fs import Shard, discover_shards, fingerprint
from storage.input import InputDir, input_paths, open_input, open_parquet, read_meta
from storage.node_table import NodeTableWriter
from storage.report import ShardInfo, ValidationReport
from storage.resources import stage
from storage.schema import FeatureLayout, check_edge_schema, check_node_schema, feature_matrix

__all__ = ["count_ids", "validate_increment", "validate_input"]

log = logging.getLogger(__name__)

_VALID_SPLITS = np.array([-1, 0, 1, 2], dtype=np.int8)
_NODE_BATCH_BYTES = 16 << 20


def _iter_batches(pf: pq.ParquetFile, shard: Shard, columns: list[str], batch_rows: int):
    """Yield ``(row0, batch)``; decoding errors become InputError naming the row range."""
    row0 = 0
    it = pf.iter_batches(batch_size=batch_rows, columns=columns)
    while True:
        try:
            batch = next(it)
        except StopIteration:
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


class _NodeState:
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


def _validate_node_batch(state: _NodeState, shard: Shard, row0: int, batch: pa.RecordBatch,
                         layout: FeatureLayout, present: list[str], table: NodeTableWriter | None) -> None:
    """Check one node batch and add its labels and splits to ``state`` (and its rows to
    ``table``'s decoded copy)."""
    ids = _check_node_ids(state, shard, row0, batch.column("id"))
    feat = _check_features(state, shard, row0, batch, layout, ids)
    labels = _count_labels(state, shard, row0, batch.column("label")) if "label" in present else None
    if "split" in present:
        splits = _count_splits(state, shard, row0, batch.column("split"))
    else:
        splits = None
        state.split_counts[0] += batch.num_rows
    if table is not None:
        table.add(ids, feat, labels, splits)


def _check_node_ids(state: _NodeState, shard: Shard, row0: int, ids_arr: pa.Array) -> np.ndarray:
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


def _check_features(state: _NodeState, shard: Shard, row0: int, batch: pa.RecordBatch,
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


def _count_labels(state: _NodeState, shard: Shard, row0: int, label_arr: pa.Array) -> np.ndarray:
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
        counts = np.bincount(known)
        if len(counts) > len(state.label_counts):
            counts[: len(state.label_counts)] += state.label_counts
            state.label_counts = counts
        else:
            state.label_counts[: len(counts)] += counts
    return labels


def _count_splits(state: _NodeState, shard: Shard, row0: int, split_arr: pa.Array) -> np.ndarray:
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


def _node_pass(state: _NodeState, node_files, batch_rows: int, table: NodeTableWriter | None = None) -> None:
    """Validate every node shard, batch by batch, into ``state`` (and ``table``)."""
    # Shards are reopened one at a time: a ParquetFile kept alive after it has been
    # read holds on to several MB of buffers (measured ~7 MB per edge shard).
    for shard, layout, present in node_files:
        pf = open_parquet(shard)
        columns = ["id", *layout.columns, *present]
        # Bound a node batch by its feature bytes too: 8,000-wide rows add up fast.
        node_rows = max(1024, min(batch_rows, _NODE_BATCH_BYTES // (4 * (layout.dim or 256))))
        for row0, batch in _iter_batches(pf, shard, columns, node_rows):
            _validate_node_batch(state, shard, row0, batch, layout, present, table)
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


def _checked_edges(edge_files, batch_rows: int, num_ids: int, expected: str, fix: str,
                   decoded: DecodedWriter | None = None):
    """Yield ``(src, dst)`` of every edge batch, each checked by :func:`_validate_edge_batch`
    (and appended to ``decoded``'s copy of its shard)."""
    for index, (shard, columns) in enumerate(edge_files):
        pf = open_parquet(shard)
        for row0, batch in _iter_batches(pf, shard, columns, batch_rows):
            src, dst = _validate_edge_batch(shard, row0, batch, columns, num_ids, expected, fix)
            if decoded is not None:
                decoded.add(index, src, dst)
            yield src, dst


def _split_dict(split_counts: np.ndarray) -> dict[str, int]:
    sc = split_counts
    return {"train": int(sc[1]), "val": int(sc[2]), "test": int(sc[3]), "none": int(sc[0])}


def _shard_infos(shards: list[Shard]) -> list[ShardInfo]:
    return [ShardInfo(url=s.url, rows=0, sha256="") for s in shards]


def validate_input(
    input_url: str | Path | InputDir | None = None,
    *,
    edges: str | Path | None = None,
    nodes: str | Path | None = None,
    undirected: bool | None = None,
    num_classes: int | None = None,
    check_duplicates: bool = True,
    batch_rows: int = 1 << 20,
    spill_dir: str | None = None,
    storage_options: dict | None = None,
    decoded_dir: str | None = None,
) -> ValidationReport:
    """Validate an input directory (or explicit edge and node locations), streaming.

    Parameters
    ----------
    input_url
        Directory holding ``edges/`` and ``nodes/`` (and optionally ``meta.json``), or
        an :class:`~storage.input.InputDir` already opened (its shards are not listed
        again).
    edges, nodes
        Override the edge and node locations (directory, glob or file).
    undirected
        Whether each edge is stored once for both directions; this only changes how
        duplicates are counted. Default: ``meta.json``'s value, else False.
    num_classes
        Upper bound for labels. Default: ``meta.json``'s value, else unchecked.
    check_duplicates
        Count duplicate edges exactly (spills edge keys to ``spill_dir``).
    batch_rows
        Rows per record batch; memory per batch scales with it.
    decoded_dir
        An existing directory to write each edge shard's checked ``src`` and ``dst``
        into, as raw files for later passes (:mod:`storage.decoded`), and the checked
        node rows (:mod:`storage.node_table`); None: none.

    Raises
    ------
    InputNotFoundError, SchemaError, InputError
        On the first problem found.
    """
    with stage("validate", log) as info:
        report = _validate_impl(
            input_url, edges, nodes, undirected, num_classes, check_duplicates,
            batch_rows, spill_dir, storage_options, decoded_dir,
        )
        info.update(nodes=report.num_nodes, edges=report.num_edges)
    return report


def _open_sources(input_url, edges, nodes, storage_options):
    """``(meta, edge_shards, node_shards, name in messages)`` of the input, listed once.

    An :class:`InputDir` (or a URL without overrides) goes through :func:`open_input`;
    ``edges=``/``nodes=`` replace the conventional locations of a URL.
    """
    if input_url is None and (edges is None or nodes is None):
        raise InputError("validate_input needs an input directory, or both edges= and nodes=.")
    if isinstance(input_url, InputDir) and (edges is not None or nodes is not None):
        raise InputError("validate_input takes an opened InputDir or edges=/nodes= overrides, not both.")
    if edges is None and nodes is None:
        source = open_input(input_url, storage_options)
        return source.meta, source.edge_shards, source.node_shards, source.url
    meta = read_meta(input_url, storage_options) if input_url is not None else None
    default_edges, default_nodes = input_paths(input_url) if input_url is not None else (None, None)
    edge_shards = discover_shards(edges or default_edges, what="edge shards", storage_options=storage_options)
    node_shards = discover_shards(nodes or default_nodes, what="node shards", storage_options=storage_options)
    base_url = str(input_url) if input_url is not None else f"{edges} + {nodes}"
    return meta, edge_shards, node_shards, base_url


def _check_node_count(meta: dict | None, num_nodes: int, base_url: str) -> None:
    """At least one node row, and as many as ``meta.json`` records."""
    if num_nodes == 0:
        raise InputError(
            format_problem(
                f"node shards of {base_url}",
                "at least one node row",
                "0 rows in every node shard",
                "write the node table (id, feat, label, split) before partitioning.",
            )
        )
    if meta and meta.get("num_nodes") is not None and int(meta["num_nodes"]) != num_nodes:
        raise InputError(
            format_problem(
                f"meta.json of {base_url}, key 'num_nodes'",
                f"the number of node rows ({num_nodes:,})",
                f"{int(meta['num_nodes']):,}",
                "a node shard is missing or extra; re-run the importer.",
            )
        )


def _check_all_nodes_seen(state: _NodeState, base_url: str) -> None:
    """Every id ``0..N-1`` has a row (ids are dense)."""
    num_nodes = state.num_nodes
    missing = np.flatnonzero(~state.seen)
    if len(missing):
        shown = ", ".join(str(int(v)) for v in missing[:10])
        raise InputError(
            format_problem(
                f"node shards of {base_url}, column 'id'",
                f"one row for every node id 0..{num_nodes - 1} (ids dense; {num_nodes:,} rows)",
                f"{len(missing):,} id(s) without a row: {shown}{' …' if len(missing) > 10 else ''}",
                "add the missing node rows, or remap ids to be dense with `asepr import edgelist`.",
            )
        )


def _edge_pass(edge_files, num_nodes: int, num_edges: int, undirected: bool, check_duplicates: bool,
               batch_rows: int, spill_dir: str | None, decoded_dir: str | None = None,
               stop: threading.Event | None = None) -> tuple[np.ndarray, int, int | None]:
    """Check every edge; return ``(degree, self_loops, duplicate_edges or None)``; with
    ``decoded_dir``, write the decoded copies there (:mod:`storage.decoded`). Once
    ``stop`` is set it ends at the next batch with :class:`_Stopped`."""
    decoded = DecodedWriter(decoded_dir, len(edge_files), num_nodes) if decoded_dir is not None else None
    try:
        return _count_edges(edge_files, num_nodes, num_edges, undirected, check_duplicates, batch_rows,
                            spill_dir, decoded, stop)
    finally:
        if decoded is not None:
            decoded.close()


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
def _add_edges(degree, src, dst):  # pragma: no cover - numba
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


class _Stopped(Exception):
    """The edge pass was stopped because the node pass failed (never reaches a user)."""


def _count_edges(edge_files, num_nodes: int, num_edges: int, undirected: bool, check_duplicates: bool,
                 batch_rows: int, spill_dir: str | None, decoded: DecodedWriter | None,
                 stop: threading.Event | None = None) -> tuple[np.ndarray, int, int | None]:
    degree = np.zeros(num_nodes, dtype=np.int64)
    self_loops = 0
    dedup = (
        EdgeDedup(num_nodes, num_edges, undirected=undirected, spill_dir=spill_dir)
        if check_duplicates
        else None
    )
    expected = f"node ids in [0, {num_nodes}) that have a row in the node table"
    fix = "every edge endpoint needs a node row; add the node or drop the edge (ids must be dense 0..N-1)."
    try:
        position = 0
        for src, dst in _checked_edges(edge_files, batch_rows, num_nodes, expected, fix, decoded):
            if stop is not None and stop.is_set():
                raise _Stopped()
            self_loops += int(_add_edges(degree, src, dst))
            if dedup is not None:
                dedup.add(src, dst, np.arange(position, position + len(src), dtype=np.int64))
            position += len(src)
        duplicates = dedup.count() if dedup is not None else None
    finally:
        if dedup is not None:
            dedup.close()
    return degree, self_loops, duplicates


def _node_and_edge_passes(state: _NodeState, node_files, base_url: str, batch_rows: int, edge_pass,
                          table: NodeTableWriter | None = None):
    """The node pass here and ``edge_pass(stop)`` on a thread beside it; the edge pass's
    result. Both are mostly decoding and numpy (which release the GIL), so on two cores
    they take about the longer one's time. A node error wins, as when the passes ran one
    after the other: the edge pass is stopped at its next batch and waited for first.
    """
    stop = threading.Event()
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="asepr-validate-edges") as pool:
        edges = pool.submit(edge_pass, stop)
        try:
            try:
                _node_pass(state, node_files, batch_rows, table)
            finally:
                if table is not None:
                    table.close()
            _check_all_nodes_seen(state, base_url)
        except BaseException:
            stop.set()
            raise
        finally:
            del state.seen
        return edges.result()


def _validate_impl(
    input_url, edges, nodes, undirected, num_classes, check_duplicates,
    batch_rows, spill_dir, storage_options, decoded_dir=None,
) -> ValidationReport:
    meta, edge_shards, node_shards, base_url = _open_sources(input_url, edges, nodes, storage_options)
    if undirected is None:
        undirected = bool(meta.get("undirected", False)) if meta else False
    if num_classes is None and meta and meta.get("num_classes") is not None:
        num_classes = int(meta["num_classes"])
    node_infos, edge_infos = _shard_infos(node_shards), _shard_infos(edge_shards)
    warnings: list[str] = []
    node_files, edge_files, layouts, categorical, edge_columns = _schema_pass(
        node_shards, node_infos, edge_shards, edge_infos, warnings)
    num_nodes = sum(i.rows for i in node_infos)
    num_edges = sum(i.rows for i in edge_infos)
    _check_node_count(meta, num_nodes, base_url)

    state = _NodeState(num_nodes, num_classes)
    degree, self_loops, duplicates = _node_and_edge_passes(
        state, node_files, base_url, batch_rows,
        lambda stop: _edge_pass(edge_files, num_nodes, num_edges, undirected, check_duplicates, batch_rows,
                                spill_dir, decoded_dir, stop),
        NodeTableWriter(decoded_dir, num_nodes) if decoded_dir is not None else None)

    label_counts = state.label_counts
    classes = num_classes if num_classes is not None else len(label_counts)
    if len(label_counts) < classes:
        label_counts = np.concatenate([label_counts, np.zeros(classes - len(label_counts), np.int64)])
    empty_classes = [c for c in range(classes) if label_counts[c] == 0]
    if empty_classes and state.labelled:
        warnings.append(f"classes without any labelled node: {empty_classes[:10]}")
    layout_kind = next(iter(layouts)) if len(layouts) == 1 else "+".join(sorted(layouts))
    return ValidationReport(
        input=base_url,
        num_nodes=num_nodes,
        num_edges=num_edges,
        feat_dim=int(state.feat_dim or 0),
        feature_layout=layout_kind,
        num_classes=int(classes),
        labelled_nodes=int(state.labelled),
        label_counts=[int(c) for c in label_counts],
        split_counts=_split_dict(state.split_counts),
        categorical_columns=categorical,
        edge_columns=edge_columns,
        undirected=bool(undirected),
        self_loops=self_loops,
        duplicate_edges=duplicates,
        isolated_nodes=int(np.count_nonzero(degree == 0)),
        max_degree=int(degree.max()) if num_nodes else 0,
        edge_shards=edge_infos,
        node_shards=node_infos,
        warnings=warnings,
        degree=degree,
    )


def validate_increment(
    edge_shards: list[Shard],
    node_shards: list[Shard],
    *,
    num_nodes: int,
    feat_dim: int,
    undirected: bool = False,
    num_classes: int | None = None,
    batch_rows: int = 1 << 20,
) -> ValidationReport:
    """Validate new edge and node shards for an output that already holds ``num_nodes`` nodes.

    The checks are those of :func:`validate_input`, with the id ranges of an
    increment: new node rows must carry the ids ``num_nodes .. num_nodes + n - 1``
    (contiguous from the next free id, each once), with features of the output's width
    ``feat_dim``; an edge endpoint must be an existing node (``< num_nodes``) or one of
    the new nodes. Duplicate edges are not counted.

    Returns
    -------
    ValidationReport
        ``num_nodes`` and ``num_edges`` count the *new* nodes and edges.

    Raises
    ------
    SchemaError, InputError
        On the first problem found, naming the file, column and rows.
    """
    with stage("validate increment", log) as info:
        report = _validate_increment_impl(edge_shards, node_shards, num_nodes, feat_dim, undirected,
                                          num_classes, batch_rows)
        info.update(new_nodes=report.num_nodes, new_edges=report.num_edges)
    return report


def _schema_pass(node_shards, node_infos, edge_shards, edge_infos, warnings: list[str]):
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
        info.rows = pf.metadata.num_rows
        node_files.append((shard, layout, present))
        layouts[layout.kind] = layout
        categorical += [c for c in cats if c not in categorical]
    edge_files = []
    edge_columns: list[str] = []
    for shard, info in zip(edge_shards, edge_infos):
        pf = open_parquet(shard)
        columns = check_edge_schema(pf.schema_arrow, shard.url)
        info.rows = pf.metadata.num_rows
        edge_files.append((shard, columns))
        edge_columns += [c for c in columns if c not in edge_columns]
    for shard, info in zip(node_shards + edge_shards, node_infos + edge_infos):
        if info.rows == 0:
            warnings.append(f"empty shard {shard.url} (0 rows)")
    _check_duplicate_shards(node_shards + edge_shards, node_infos + edge_infos)
    return node_files, edge_files, layouts, categorical, edge_columns


def _validate_increment_impl(edge_shards, node_shards, first_id, feat_dim, undirected, num_classes,
                             batch_rows) -> ValidationReport:
    node_infos, edge_infos = _shard_infos(node_shards), _shard_infos(edge_shards)
    warnings: list[str] = []
    node_files, edge_files, layouts, _, edge_columns = _schema_pass(
        node_shards, node_infos, edge_shards, edge_infos, warnings)
    new_nodes = sum(i.rows for i in node_infos)
    new_edges = sum(i.rows for i in edge_infos)
    total_nodes = first_id + new_nodes
    state = _NodeState(new_nodes, num_classes, offset=first_id)
    state.feat_dim, state.feat_origin = int(feat_dim), "the partitioned output"
    _node_pass(state, node_files, batch_rows)
    missing = np.flatnonzero(~state.seen)
    if len(missing):  # only possible with a repeated id, which is caught above; kept as a guard
        raise InputError(
            format_problem(
                "new node shards, column 'id'",
                f"one row for every new id {first_id}..{total_nodes - 1}",
                f"{len(missing):,} id(s) without a row, e.g. {int(missing[0]) + first_id}",
                "add the missing node rows.",
            )
        )
    del state.seen

    if new_nodes:
        expected = (f"ids of existing nodes [0, {first_id}) or of the new nodes "
                    f"[{first_id}, {total_nodes}) given with --nodes")
    else:
        expected = f"ids of existing nodes [0, {first_id}) (no new node shards were given)"
    fix = (f"give the missing nodes' rows with --nodes (ids from {first_id} on), or drop the edge; "
           "nothing was ingested.")
    new_degree = np.zeros(max(new_nodes, 0), dtype=np.int64)
    self_loops = 0
    max_degree = 0
    for src, dst in _checked_edges(edge_files, batch_rows, total_nodes, expected, fix):
        self_loops += int(np.count_nonzero(src == dst))
        for ids in (src, dst):
            new = ids[ids >= first_id] - first_id
            if len(new):
                new_degree += np.bincount(new, minlength=new_nodes)
    if new_nodes:
        max_degree = int(new_degree.max())
    label_counts = state.label_counts
    layout_kind = next(iter(layouts)) if len(layouts) == 1 else ("+".join(sorted(layouts)) or "none")
    return ValidationReport(
        input=f"increment of {len(edge_shards)} edge and {len(node_shards)} node shard(s)",
        num_nodes=new_nodes,
        num_edges=new_edges,
        feat_dim=int(feat_dim),
        feature_layout=layout_kind,
        num_classes=int(num_classes if num_classes is not None else len(label_counts)),
        labelled_nodes=int(state.labelled),
        label_counts=[int(c) for c in label_counts],
        split_counts=_split_dict(state.split_counts),
        categorical_columns=[],
        edge_columns=edge_columns,
        undirected=bool(undirected),
        self_loops=self_loops,
        duplicate_edges=None,
        isolated_nodes=int(np.count_nonzero(new_degree == 0)),
        max_degree=max_degree,
        edge_shards=edge_infos,
        node_shards=node_infos,
        warnings=warnings,
    )
