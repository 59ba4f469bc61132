"""Importer for plain edge lists (csv, tsv or blank-separated text), streaming.

SRC is one file, a directory of them (``*.csv``, ``*.tsv``, ``*.txt``, ``*.edges``,
``*.el``, ..., optionally compressed ``.gz``/``.bz2``/``.xz``/``.zst``) or a glob. Per
file (see :mod:`asepr.storage.importers._edge_text`): leading lines starting with ``#`` or
``%`` are skipped; the delimiter is a tab, comma or semicolon if the first data line has
one, else runs of blanks; the first line is a header unless its first two fields are
integers (option ``header`` overrides). With a header, ``src``/``dst`` (or
``source``/``target``) name the endpoints, else the first two columns do; ``weight``
becomes a float32 weight and ``ts``/``timestamp``/``time`` an int64 timestamp. Without
a header the first two columns are the endpoints and a numeric third column is the
weight.

The edge files are streamed twice, block by block, never loaded whole: pass 1 collects
the distinct node ids (O(|V|) memory), pass 2 writes the edges, remapping the ids to
``global_nid`` ``0..N-1`` (the rank of the original id in sorted order) unless they
already are exactly ``0..N-1``. Duplicate edges are kept (``asepr clean`` drops them);
self-loops are kept and counted unless ``drop_self_loops``.

The optional node table (:mod:`asepr.storage.importers._node_table`) adds nodes, features,
labels, a split and categorical columns; it is held in memory. Without one, every node
gets the feature vector ``[1.0]``, label -1 and split -1 (meta ``"features": "constant"``).

Written (see :mod:`asepr.storage.inputs.writer` for the shard layout)::

    OUT/
      edges/part-*.parquet   src, dst int64 in stream order [, weight float32, ts int64]
      nodes/part-*.parquet   id 0..N-1, feat float32 (node table columns, or [1.0]),
                             label int64, split int8 [, categorical columns]
      meta.json              undirected (as given), remapped, id_type, features, counts
      id_map.parquet         only when remapped: global_nid int64, original_id
      label_map.json         only for string / bool labels: {column, classes, to_id}
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Unpack

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

import asepr.storage.importers._common as _common
from asepr.storage.errors import InputError, SchemaError, format_problem
from asepr.storage.importers._edge_text import (
    DELIMITERS,
    EdgeFile,
    StringIds,
    first_bad,
    list_edge_files,
    no_nulls,
    read_batches,
    sniff,
)
from asepr.storage.importers._node_table import NodeTable, load_node_table
from asepr.storage.importers.target import CommonOptions, ImportTarget
from asepr.storage.inputs.schema import SPLIT_NONE
from asepr.storage.inputs.writer import InputWriter
from asepr.storage.locations.fs import resolve, url_of
from asepr.storage.resources import stage

__all__ = ["import_edgelist"]

log = logging.getLogger(__name__)

FORMAT = "edgelist"
_DEFAULT_BLOCK = 16 << 20


# -- pass 1: distinct ids ----------------------------------------------------------------
class _DistinctIds:
    """The distinct ids seen so far; merges per-batch uniques lazily (amortised O(|V|))."""

    def __init__(self, id_type: pa.DataType):
        self._id_type = id_type
        self._base: pa.Array | None = None
        self._parts: list[pa.Array] = []
        self._pending = 0

    def add(self, array: pa.Array) -> None:
        part = pc.unique(array)
        self._parts.append(part)
        self._pending += len(part)
        base = len(self._base) if self._base is not None else 0
        if self._pending > max(1 << 20, 2 * base):
            self._merge()

    def _merge(self) -> None:
        arrays = ([self._base] if self._base is not None else []) + self._parts
        if arrays:
            self._base = pc.unique(pa.concat_arrays(arrays))
        self._parts, self._pending = [], 0

    def result(self) -> pa.Array:
        self._merge()
        return self._base if self._base is not None else pa.array([], type=self._id_type)


@dataclass
class _Scan:
    ids: pa.Array  # distinct, unsorted
    id_type: pa.DataType
    rows: int
    self_loops: int


def _scan_once(fs, plans: list[EdgeFile], id_type: pa.DataType, block_size: int) -> _Scan:
    distinct = _DistinctIds(id_type)
    rows = loops = 0
    for plan in plans:
        for row0, batch in read_batches(fs, plan, id_type, block_size):
            src, dst = batch.column(plan.src), batch.column(plan.dst)
            no_nulls(plan, row0, plan.src, src)
            no_nulls(plan, row0, plan.dst, dst)
            distinct.add(pa.concat_arrays([src, dst]))
            loops += int(pc.sum(pc.equal(src, dst)).as_py() or 0)
            if plan.weight:
                weight = batch.column(plan.weight)
                no_nulls(plan, row0, plan.weight, weight)
                w = weight.to_numpy()
                if not np.isfinite(w).all():
                    row = first_bad(~np.isfinite(w))
                    raise InputError(
                        format_problem(plan.at_row(row0 + row, plan.weight), "a finite number",
                                       repr(float(w[row])), "replace NaN or inf weights.")
                    )
            if plan.ts:
                no_nulls(plan, row0, plan.ts, batch.column(plan.ts))
            rows += batch.num_rows
    return _Scan(distinct.result(), id_type, rows, loops)


def _scan(fs, plans: list[EdgeFile], block_size: int) -> _Scan:
    """Pass 1, reading ids as int64, or as strings once a non-integer id shows up."""
    try:
        return _scan_once(fs, plans, pa.int64(), block_size)
    except StringIds as exc:
        log.info("non-integer node ids (%s); reading ids as strings", exc)
        return _scan_once(fs, plans, pa.string(), block_size)


# -- pass 2: remapped edges --------------------------------------------------------------
class _Lookup:
    """Maps original ids to ``global_nid``, their rank among the sorted node ids."""

    def __init__(self, node_ids: pa.Array, remapped: bool, table_url: str | None):
        self.node_ids = node_ids
        self.remapped = remapped
        self.table_url = table_url
        self.num_nodes = len(node_ids)
        self._sorted_np = node_ids.to_numpy() if pa.types.is_integer(node_ids.type) else None

    def __call__(self, values: pa.Array) -> tuple[np.ndarray, np.ndarray]:
        """``(global_nid, found)`` for a batch of original ids."""
        if self._sorted_np is None:
            # Rebuilds a hash of the node ids per call; blocks are large enough to amortise it.
            index = pc.index_in(values, value_set=self.node_ids)
            found = index.is_valid().to_numpy(zero_copy_only=False)
            return index.fill_null(-1).to_numpy(zero_copy_only=False).astype(np.int64), found
        original = values.to_numpy()
        if not self.remapped:
            return original, (original >= 0) & (original < self.num_nodes)
        # Binary search in query order is cache-hostile; sorted queries are ~5x faster.
        order = np.argsort(original, kind="stable")
        global_nid = np.empty(len(original), dtype=np.int64)
        global_nid[order] = np.searchsorted(self._sorted_np, original[order])
        found = self._sorted_np[np.minimum(global_nid, self.num_nodes - 1)] == original
        return global_nid, found

    def missing(self, plan: EdgeFile, row: int, column: str, value: Any) -> InputError:
        return InputError(
            format_problem(
                plan.at_row(row, column),
                f"a node id listed in the node table {self.table_url}",
                f"id {value!r}, which the node table does not have",
                "add a row for this node to the node table, or drop the edges that name it.",
            )
        )


def _edges(fs, plans: list[EdgeFile], id_type: pa.DataType, lookup: _Lookup, block_size: int):
    """Pass 2: yield ``(src, dst, extras)`` with ids mapped to ``global_nid``."""
    for plan in plans:
        for row0, batch in read_batches(fs, plan, id_type, block_size):
            src_values, dst_values = batch.column(plan.src), batch.column(plan.dst)
            n = len(src_values)
            # One lookup for both endpoints: string lookups rebuild a hash per call.
            global_nid, found = lookup(pa.concat_arrays([src_values, dst_values]))
            src, dst, src_found, dst_found = global_nid[:n], global_nid[n:], found[:n], found[n:]
            if not (src_found.all() and dst_found.all()):
                row = first_bad(~(src_found & dst_found))
                column, values = (plan.src, src_values) if not src_found[row] else (plan.dst, dst_values)
                raise lookup.missing(plan, row0 + row, column, values[row].as_py())
            extras = {}
            if plan.weight:
                extras["weight"] = batch.column(plan.weight).to_numpy()
            if plan.ts:
                extras["ts"] = batch.column(plan.ts).to_numpy()
            yield src, dst, extras


# -- the importer ------------------------------------------------------------------------
def _sniff_all(fs, files: list[str], header: bool | None, delimiter: str | None) -> list[EdgeFile]:
    plans = []
    for path in files:
        plan = sniff(fs, path, header, delimiter)
        if plan.empty:
            log.warning("%s holds no edge rows; skipped", plan.url)
        else:
            plans.append(plan)
    for plan in plans[1:]:
        if plan.extras != plans[0].extras:
            raise SchemaError(
                format_problem(
                    f"edge list {plan.url}",
                    f"the same optional columns as {plans[0].url} ({list(plans[0].extras) or 'none'})",
                    f"{list(plan.extras) or 'none'}",
                    "give every file the same columns (e.g. a weight in all or in none).",
                )
            )
    return plans


def _write_nodes(writer: InputWriter, num_nodes: int, table: NodeTable | None,
                 labels: np.ndarray, split: np.ndarray) -> None:
    step = _common.node_chunk_rows(writer)
    for lo in range(0, num_nodes, step):
        hi = min(num_nodes, lo + step)
        if table is None:
            feat, extra = np.ones((hi - lo, 1), dtype=np.float32), {}
        else:
            feat, extra = table.features(lo, hi), table.extra_columns(lo, hi)
        writer.write_nodes(np.arange(lo, hi, dtype=np.int64), feat, labels[lo:hi], split[lo:hi], **extra)


def _options(header, delimiter, undirected, drop_self_loops, block_size):
    header = _common.bool_option(header, "header", None)
    undirected = _common.bool_option(undirected, "undirected", False)
    drop_self_loops = _common.bool_option(drop_self_loops, "drop_self_loops", False)
    if delimiter is not None:
        if delimiter not in DELIMITERS:
            names = ", ".join(f'"{d}"' for d in DELIMITERS if len(d) > 1)
            raise InputError(
                format_problem("option delimiter", f'",", "\\t", ";", " " or one of {names}',
                               repr(delimiter), "pass one of those, or leave it out to guess.")
            )
        delimiter = DELIMITERS[delimiter]
    block_size = _DEFAULT_BLOCK if block_size is None else block_size
    if isinstance(block_size, bool) or not isinstance(block_size, (int, np.integer)) or block_size < 1:
        raise InputError(format_problem("option block_size", "a positive number of bytes", repr(block_size)))
    return header, delimiter, undirected, drop_self_loops, int(block_size)


def import_edgelist(src: str | Path, out: str | Path, *, header: bool | None = None,
                    delimiter: str | None = None, node_table: str | Path | None = None,
                    label_column: str | None = None, undirected: bool | None = None,
                    drop_self_loops: bool | None = None, block_size: int | None = None,
                    name: str | None = None, **common: Unpack[CommonOptions]) -> dict[str, Any]:
    """Import an edge list (file, directory or glob), streaming it twice, and return the
    committed ``meta.json``.

    Parameters
    ----------
    src
        The edge file(s).
    out, **common
        The input directory to write, and the options every importer takes
        (:class:`~asepr.storage.importers.target.ImportTarget`); ``seed``: seed of the stratified
        split when the node table has labels but no split.
    header
        Whether the first data line is a header; default: guessed per file.
    delimiter
        ``","``, ``"\\t"``, ``";"`` or ``" "`` (runs of blanks), or the names ``comma``,
        ``tab``, ``semicolon``, ``space``; default: guessed per file.
    node_table
        A csv or parquet file: ``id``, optional label and ``split``, feature columns.
    label_column
        Label column of the node table (default ``label``).
    undirected
        Recorded in ``meta.json`` (each edge stands for both directions); default False.
    drop_self_loops
        Drop ``(v, v)`` edges; default False (kept and counted).
    block_size
        Bytes per CSV block read (default 16 MiB); memory per block scales with it.
    name
        Dataset name for ``meta.json``; default the file or directory stem.
    """
    header, delimiter, undirected, drop_self_loops, block_size = _options(
        header, delimiter, undirected, drop_self_loops, block_size
    )
    target = ImportTarget.of(out, common)
    fs, path, url, files = _edge_files(src, node_table, target.storage_options)
    dataset = _common.dataset_name(path, name)

    with stage(f"import {FORMAT} {url}", log) as info:
        plans = _sniff_all(fs, files, header, delimiter)
        scan = _scan(fs, plans, block_size)
        nodes = _resolve_nodes(scan, node_table, target.storage_options, label_column, url)
        lookup = _Lookup(nodes.node_ids, nodes.remapped, nodes.table.url if nodes.table is not None else None)
        _check_edges_in_table(fs, plans, nodes, lookup, block_size)
        labels, split, split_meta = _labels_and_split(nodes.table, nodes.num_nodes, target.seed)

        table = nodes.table
        with target.writer(
            table.feat_dim if table is not None else 1,
            edge_columns=plans[0].extras if plans else (),
            node_extra=table.extras if table is not None else [],
        ) as writer:
            dropped = _write_edges(writer, _edges(fs, plans, nodes.id_type, lookup, block_size), drop_self_loops)
            _write_nodes(writer, nodes.num_nodes, table, labels, split)
            meta = {
                "name": dataset,
                "undirected": undirected,
                "num_classes": (
                    len(table.classes) if table is not None and table.classes is not None
                    else _common.num_classes_of(labels)
                ),
                "source": _source_meta(src, plans, table),
                "split": split_meta,
                "counts": {
                    "raw_entries": scan.rows, "self_loops": scan.self_loops, "self_loops_dropped": dropped,
                    "nodes_in_edges": len(nodes.edge_ids),
                    "nodes_only_in_node_table": nodes.num_nodes - len(nodes.edge_ids),
                },
                "features": "constant" if table is None else "node_table",
                "remapped": nodes.remapped,
                "id_type": "int64" if pa.types.is_integer(nodes.id_type) else "string",
            }
            _write_side_tables(writer, meta, nodes)
            meta = writer.commit(meta)
        info.update(nodes=meta["num_nodes"], edges=meta["num_edges"])
    return meta


def _edge_files(src, node_table, storage_options) -> tuple[Any, str, str, list[str]]:
    """``(fs, path, url, files)`` of the edge list, leaving out the node table if it lies among them."""
    fs, path = resolve(src, storage_options)
    url = url_of(fs, path)
    if not re.search(r"[*?\[]", path):
        _common.resolve_src(src, storage_options, "edge list")  # InputNotFoundError if missing
    exclude = None
    if node_table is not None:
        table_fs, table_path, _ = _common.resolve_src(node_table, storage_options, "node table")
        exclude = table_path if table_fs is fs else None
    return fs, path, url, list_edge_files(fs, path, url, exclude)


@dataclass
class _Nodes:
    """The node set of an edge list: ids in ``global_nid`` order, and the node table."""

    table: NodeTable | None
    id_type: pa.DataType
    edge_ids: pa.Array  # the distinct ids the edges name
    node_ids: pa.Array  # sorted; ``global_nid`` is the position
    remapped: bool

    @property
    def num_nodes(self) -> int:
        return len(self.node_ids)


def _resolve_nodes(scan: _Scan, node_table, storage_options, label_column, url: str) -> _Nodes:
    """The nodes: the node table's ids if there is one, else the ids the edges name."""
    id_type, edge_ids = scan.id_type, scan.ids
    table = None
    if node_table is not None:
        table = load_node_table(node_table, storage_options, label_column, id_type)
        if table.ids.type != id_type:  # the table has string ids: match edges as strings
            id_type = table.ids.type
            edge_ids = edge_ids.cast(id_type)
        node_ids = table.ids
    else:
        node_ids = edge_ids.take(pc.sort_indices(edge_ids))
    num_nodes = len(node_ids)
    if num_nodes == 0:
        raise InputError(
            format_problem(f"edge list {url}", "at least one edge or node", "no rows",
                           "check the files are the right ones and not empty.")
        )
    remapped = not (
        pa.types.is_integer(id_type)
        and node_ids[0].as_py() == 0
        and node_ids[num_nodes - 1].as_py() == num_nodes - 1
    )
    return _Nodes(table, id_type, edge_ids, node_ids, remapped)


def _check_edges_in_table(fs, plans: list[EdgeFile], nodes: _Nodes, lookup: _Lookup, block_size: int) -> None:
    """With a node table, fail before writing if an edge names a node the table lacks."""
    if nodes.table is not None and pc.any(pc.invert(pc.is_in(nodes.edge_ids, value_set=nodes.node_ids))).as_py():
        # The pass stops at the first edge naming a missing node, with its file and row.
        for _ in _edges(fs, plans, nodes.id_type, lookup, block_size):
            pass


def _labels_and_split(table: NodeTable | None, num_nodes: int, seed: int):
    """``(labels, split, split meta)``: from the node table, else all unknown."""
    if table is None:
        labels = np.full(num_nodes, -1, dtype=np.int64)
        return labels, np.full(num_nodes, SPLIT_NONE, dtype=np.int8), {"kind": "none"}
    if table.split is not None:
        return table.labels, table.split, {"kind": "column", "column": "split"}
    split = _common.stratified_split(table.labels, seed)
    return table.labels, split, _common.stratified_split_meta(seed, table.labels)


def _write_edges(writer: InputWriter, edges, drop_self_loops: bool) -> int:
    """Write the remapped edges; return how many self-loops were dropped."""
    dropped = 0
    for src_nid, dst_nid, edge_extra in edges:
        if drop_self_loops:
            keep = src_nid != dst_nid
            dropped += len(keep) - int(np.count_nonzero(keep))
            src_nid, dst_nid = src_nid[keep], dst_nid[keep]
            edge_extra = {k: v[keep] for k, v in edge_extra.items()}
        writer.write_edges(src_nid, dst_nid, **edge_extra)
    return dropped


def _source_meta(src, plans: list[EdgeFile], table: NodeTable | None) -> dict[str, Any]:
    """``meta.json``'s ``source``: the files read and how each was parsed."""
    return {
        "format": FORMAT,
        "path": str(src),
        "files": [p.url for p in plans],
        "header": [p.header for p in plans],
        "delimiter": [p.delimiter for p in plans],
        "node_table": table.url if table is not None else None,
    }


def _write_side_tables(writer: InputWriter, meta: dict[str, Any], nodes: _Nodes) -> None:
    """Write ``id_map.parquet`` and ``label_map.json`` where needed; record them in ``meta``."""
    table = nodes.table
    if nodes.remapped:
        writer.write_table(_common.ID_MAP_NAME, pa.table({
            "global_nid": pa.array(np.arange(nodes.num_nodes, dtype=np.int64)),
            "original_id": nodes.node_ids,
        }))
        meta["id_map"] = _common.ID_MAP_NAME
    if table is not None:
        meta["feature_columns"] = ["feat"] if table.feature_list else table.feature_columns
        meta["label_column"] = table.label_column
        meta["categorical_columns"] = [n for n, _ in table.extras]
        if table.classes is not None:
            writer.write_json(_common.LABEL_MAP_NAME,
                              _common.label_map(table.label_column, table.classes))
            meta["label_map"] = _common.LABEL_MAP_NAME
