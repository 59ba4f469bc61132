"""Streaming validation of an input directory, one record batch at a time.

Memory is O(N) (a seen-bitmap and degree counts over the nodes) plus one record batch;
the duplicate-edge count spills to disk (:mod:`asepr.storage.inputs.dedup`). Validation stops at the
first problem with an error that names the file, the column and the row range, says
what was expected and what was found, and how to fix it.

Checks, in order:

1. ``meta.json``, if present, has its fields' JSON types, and the shards exist
   (directory, glob or fsspec URL) and can be listed (:func:`asepr.storage.inputs.directory.open_input`);
2. shards are readable Parquet files with the required columns and dtypes
   (:mod:`asepr.storage.inputs.schema`);
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
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Protocol

import numpy as np

from asepr.storage.errors import InputError, format_problem
from asepr.storage.inputs.dedup import EdgeDedup
from asepr.storage.inputs.directory import InputDir, input_paths, open_input, read_meta
from asepr.storage.integrity.checks import (
    NodeRows,
    NodeState,
    checked_edges,
    count_endpoints,
    node_pass,
    schema_pass,
    shard_infos,
    split_dict,
)
from asepr.storage.integrity.claims import check_claim
from asepr.storage.integrity.report import ValidationReport
from asepr.storage.locations.fs import discover_shards
from asepr.storage.progress import advance, carried, current, expect
from asepr.storage.resources import stage

__all__ = ["CheckedRows", "validate_input"]

log = logging.getLogger(__name__)


class EdgeRows(Protocol):
    """Receives the edge pass's checked batches (:class:`asepr.storage.inputs.decoded.DecodedWriter`)."""

    def add(self, index: int, src: np.ndarray, dst: np.ndarray) -> None: ...

    def close(self) -> None: ...


class CheckedRows(Protocol):
    """Where :func:`validate_input` hands the rows it has checked, as it reads them
    (:class:`asepr.storage.inputs.decoded_copy.DecodedCopy` writes them to disk)."""

    def node_rows(self, num_nodes: int) -> NodeRows:
        """The receiver of the node batches; closed when the node pass ends."""

    def edge_rows(self, num_shards: int, num_nodes: int) -> EdgeRows:
        """The receiver of the edge batches; closed when the edge pass ends."""



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
    rows: CheckedRows | None = None,
) -> ValidationReport:
    """Validate an input directory (or explicit edge and node locations), streaming.

    Parameters
    ----------
    input_url
        Directory holding ``edges/`` and ``nodes/`` (and optionally ``meta.json``), or
        an :class:`~asepr.storage.inputs.directory.InputDir` already opened (its shards are not listed
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
    rows
        Where to hand the checked rows as they are read (for instance
        :class:`asepr.storage.inputs.decoded_copy.DecodedCopy`, which writes the decoded copies that
        the later passes read instead of the Parquet shards); None: nowhere.

    Raises
    ------
    InputNotFoundError, SchemaError, InputError
        On the first problem found.
    """
    with stage("validate", log) as info:
        report = _validate_impl(
            input_url, edges, nodes, undirected, num_classes, check_duplicates,
            batch_rows, spill_dir, storage_options, rows,
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


def _meta_int(meta: dict | None, key: str) -> int | None:
    """``meta.json``'s count ``key``, None when absent (its type was checked when the input
    was opened: :func:`asepr.storage.inputs.directory.open_input`)."""
    value = (meta or {}).get(key)
    return None if value is None else int(value)


def _check_feat_dim(meta: dict | None, feat_dim: int, base_url: str) -> None:
    """``meta.json``'s ``feat_dim``, when it has one, is the shards' feature width: readers
    size the stores and the model by it."""
    claimed = _meta_int(meta, "feat_dim")
    if claimed is not None and claimed != feat_dim:
        raise InputError(format_problem(
            f"meta.json of {base_url}, key 'feat_dim'", f"the feature width of the node shards ({feat_dim:,})",
            f"{claimed:,}", "fix feat_dim in meta.json (or remove it), or re-run the importer."))


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
    claimed = _meta_int(meta, "num_nodes")
    if claimed is not None and claimed != num_nodes:
        raise InputError(
            format_problem(
                f"meta.json of {base_url}, key 'num_nodes'",
                f"the number of node rows ({num_nodes:,})",
                f"{claimed:,}",
                "a node shard is missing or extra; re-run the importer.",
            )
        )


def _check_all_nodes_seen(state: NodeState, base_url: str) -> None:
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
               batch_rows: int, spill_dir: str | None, rows: CheckedRows | None = None,
               stop: threading.Event | None = None) -> tuple[np.ndarray, int, int | None]:
    """Check every edge; return ``(degree, self_loops, duplicate_edges or None)``; with
    ``decoded_dir``, write the decoded copies there (:mod:`asepr.storage.inputs.decoded`). Once
    ``stop`` is set it ends at the next batch with :class:`_Stopped`."""
    copy = rows.edge_rows(len(edge_files), num_nodes) if rows is not None else None
    try:
        return _count_edges(edge_files, num_nodes, num_edges, undirected, check_duplicates, batch_rows,
                            spill_dir, copy, stop)
    finally:
        if copy is not None:
            copy.close()



class _Stopped(Exception):
    """The edge pass was stopped because the node pass failed (never reaches a user)."""


def _count_edges(edge_files, num_nodes: int, num_edges: int, undirected: bool, check_duplicates: bool,
                 batch_rows: int, spill_dir: str | None, copy: EdgeRows | None,
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
        on_batch = copy.add if copy is not None else None
        for src, dst in checked_edges(edge_files, batch_rows, num_nodes, expected, fix, on_batch):
            if stop is not None and stop.is_set():
                raise _Stopped()
            self_loops += int(count_endpoints(degree, src, dst))
            advance(len(src))
            if dedup is not None:
                dedup.add(src, dst, np.arange(position, position + len(src), dtype=np.int64))
            position += len(src)
        duplicates = dedup.count() if dedup is not None else None
    finally:
        if dedup is not None:
            dedup.close()
    return degree, self_loops, duplicates


def _node_and_edge_passes(state: NodeState, node_files, base_url: str, batch_rows: int, edge_pass,
                          table: NodeRows | None = None):
    """The node pass here and ``edge_pass(stop)`` on a thread beside it; the edge pass's
    result. Both are mostly decoding and numpy (which release the GIL), so on two cores
    they take about the longer one's time. A node error wins, as when the passes ran one
    after the other: the edge pass is stopped at its next batch and waited for first.
    """
    stop = threading.Event()
    bar = current()  # both passes count their rows into the stage's progress

    def counted_edge_pass(stop: threading.Event):
        with carried(bar):
            return edge_pass(stop)

    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="asepr-validate-edges") as pool:
        edges = pool.submit(counted_edge_pass, stop)
        try:
            try:
                node_pass(state, node_files, batch_rows, table)
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
    batch_rows, spill_dir, storage_options, rows=None,
) -> ValidationReport:
    meta, edge_shards, node_shards, base_url = _open_sources(input_url, edges, nodes, storage_options)
    if undirected is None:
        undirected = bool(meta.get("undirected", False)) if meta else False
    if num_classes is None:
        num_classes = _meta_int(meta, "num_classes")
        if num_classes is not None:  # label counts are kept per class
            check_claim(num_classes, 8, where=f"meta.json of {base_url}, key 'num_classes'", claim="a class count",
                        fix="fix num_classes in meta.json (the number of distinct labels), or remove it.")
    node_infos, edge_infos = shard_infos(node_shards), shard_infos(edge_shards)
    warnings: list[str] = []
    node_files, edge_files, layouts, categorical, edge_columns = schema_pass(
        node_shards, node_infos, edge_shards, edge_infos, warnings)
    num_nodes = sum(i.rows for i in node_infos)
    num_edges = sum(i.rows for i in edge_infos)
    _check_node_count(meta, num_nodes, base_url)
    expect(num_nodes + num_edges)

    state = NodeState(num_nodes, num_classes)
    degree, self_loops, duplicates = _node_and_edge_passes(
        state, node_files, base_url, batch_rows,
        lambda stop: _edge_pass(edge_files, num_nodes, num_edges, undirected, check_duplicates, batch_rows,
                                spill_dir, rows, stop),
        rows.node_rows(num_nodes) if rows is not None else None)
    _check_feat_dim(meta, int(state.feat_dim or 0), base_url)

    label_counts = state.label_counts
    classes = num_classes if num_classes is not None else len(label_counts)
    if len(label_counts) < classes:
        label_counts = np.concatenate([label_counts, np.zeros(classes - len(label_counts), np.int64)])
    empty_classes = np.flatnonzero(label_counts[:classes] == 0)[:10].tolist()
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
        split_counts=split_dict(state.split_counts),
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
