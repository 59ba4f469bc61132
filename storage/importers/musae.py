"""Importer for the MUSAE csv + json format (Facebook page-page, Twitch, ...).

SRC is a directory (benedekrozemberczki/MUSAE) with three files:

- ``*_edges.csv``: a header (``id_1,id_2`` or ``from,to``), one edge per row;
- ``*_target.csv``: a header; the node id is column ``new_id`` if present, else ``id``
  (dense ``0..N-1``); the label column is option ``label_column``, by default the first
  of ``page_type``, ``mature``, ``target``, ``label`` that exists;
- ``*.json``: node id (a string) -> list of active binary feature indices (repeats
  allowed; a feature is 1.0 however often it is listed).

Written (see :mod:`asepr.storage.inputs.writer` for the shard layout)::

    OUT/
      edges/part-*.parquet   src < dst: each undirected edge once, no self-loops, sorted
      nodes/part-*.parquet   id 0..N-1, feat float32 (d = max feature index + 1),
                             label int64, split int8 (seeded stratified 60/20/20)
      meta.json              undirected: true, split {kind: stratified, seed}, counts
      label_map.json         only for string / bool labels: {column, classes, to_id}
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any, Unpack

import numpy as np
import pyarrow as pa
import pyarrow.csv as pacsv

import asepr.storage.importers._common as _common
from asepr.storage.errors import InputError, InputNotFoundError, SchemaError, format_problem
from asepr.storage.importers.target import CommonOptions, ImportTarget, write_in_memory
from asepr.storage.locations.fs import url_of
from asepr.storage.resources import stage

__all__ = ["LABEL_COLUMNS", "import_musae"]

log = logging.getLogger(__name__)

FORMAT = "musae"
LABEL_COLUMNS = ("page_type", "mature", "target", "label")
_ID_COLUMNS = ("new_id", "id")


def _find(fs, path: str, url: str, suffix: str, what: str) -> tuple[str, str]:
    matches = sorted(
        p for p in fs.ls(path, detail=False)
        if p.endswith(suffix) and not p.rstrip("/").rpartition("/")[2].startswith(".")
    )
    if len(matches) == 1:
        return matches[0], url_of(fs, matches[0])
    found = "no such file" if not matches else ", ".join(m.rpartition("/")[2] for m in matches)
    error = InputNotFoundError if not matches else InputError
    raise error(
        format_problem(
            f"MUSAE directory {url}",
            f"exactly one {what} file '*{suffix}'",
            found,
            "keep one dataset per directory, named as published (e.g. facebook_edges.csv).",
        )
    )


def _read_csv(fs, path: str, url: str) -> pa.Table:
    try:
        with fs.open(path, "rb") as fh:
            return pacsv.read_csv(fh, convert_options=pacsv.ConvertOptions(strings_can_be_null=True))
    except (pa.ArrowInvalid, OSError, UnicodeDecodeError) as exc:
        raise InputError(
            format_problem(
                f"file {url}", "a CSV file with a header row", f"a parse error ({exc})",
                "check the file is complete and comma-separated.",
            )
        ) from exc


def _int_column(table: pa.Table, column: str, url: str) -> np.ndarray:
    array = table.column(column)
    if not pa.types.is_integer(array.type):
        raise SchemaError(
            format_problem(
                f"file {url}, column '{column}'", "integer node ids", f"dtype {array.type}",
                "MUSAE ids are dense integers 0..N-1; fix the column or use the edgelist "
                "importer, which remaps any ids.",
            )
        )
    if array.null_count:
        first = int(np.flatnonzero(array.is_null().to_numpy(zero_copy_only=False))[0])
        raise InputError(
            format_problem(
                f"file {url}, column '{column}', data row {first}", "a node id", "an empty value",
                "fill in or drop the row.",
            )
        )
    return array.to_numpy().astype(np.int64)


def _features(fs, path: str, url: str, n: int) -> tuple[np.ndarray, np.ndarray, dict[str, int]]:
    """The binary feature matrix as CSR ``(indptr, indices)`` over nodes 0..n-1."""
    try:
        with fs.open(path, "rb") as fh:
            doc = json.load(fh)
    except (OSError, ValueError) as exc:
        raise InputError(
            format_problem(
                f"file {url}", "a JSON object {node id: [feature indices]}",
                f"unreadable JSON ({exc})", "the file is truncated or corrupt; download it again.",
            )
        ) from exc
    if not isinstance(doc, dict):
        raise SchemaError(
            format_problem(
                f"file {url}", "a JSON object {node id: [feature indices]}",
                f"a JSON {type(doc).__name__}", "use the MUSAE features file.",
            )
        )
    per_node: list[np.ndarray | None] = [None] * n
    repeats = 0
    for key, value in doc.items():
        try:
            global_nid = int(key)
        except ValueError:
            global_nid = -1
        if not 0 <= global_nid < n:
            raise InputError(
                format_problem(
                    f"file {url}, key {key!r}", f"a node id in 0..{n - 1} (the target file's ids)",
                    repr(key), "the features file does not belong to this target file.",
                )
            )
        indices = np.asarray(value) if isinstance(value, list) else None
        if indices is None or (len(indices) and (indices.dtype.kind not in "iu" or indices.min() < 0)):
            raise InputError(
                format_problem(
                    f"file {url}, key {key!r}", "a list of non-negative integer feature indices",
                    repr(value)[:80], "fix the entry; each feature index must be an integer >= 0.",
                )
            )
        unique = np.unique(indices.astype(np.int64))
        repeats += len(indices) - len(unique)
        per_node[global_nid] = unique
    empty = np.zeros(0, dtype=np.int64)
    missing = sum(1 for v in per_node if v is None)
    rows = [empty if v is None else v for v in per_node]
    lengths = np.fromiter((len(v) for v in rows), dtype=np.int64, count=n)
    indptr = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(lengths, out=indptr[1:])
    indices = np.concatenate(rows) if n else empty
    return indptr, indices, {"feature_repeats_ignored": repeats, "nodes_without_features": missing}


def _labels(fs, path: str, url: str, label_column: str | None) -> tuple[np.ndarray, list | None, str]:
    """Labels of nodes ``0..N-1`` from the target file, the mapped classes, the column used."""
    target = _read_csv(fs, path, url)
    names = target.column_names
    id_column = next((c for c in _ID_COLUMNS if c in names), None)
    if id_column is None:
        raise SchemaError(
            format_problem(f"file {url}", "a node id column 'new_id' or 'id'", f"only the columns {names}",
                           "name the node id column 'id'.")
        )
    if label_column is None:
        label_column = next((c for c in LABEL_COLUMNS if c in names), None)
        if label_column is None:
            raise SchemaError(
                format_problem(f"file {url}", f"a label column (one of {list(LABEL_COLUMNS)})",
                               f"only the columns {names}", "pass --label-column NAME.")
            )
    elif label_column not in names:
        raise SchemaError(
            format_problem(f"file {url}, option label_column", f"a column named '{label_column}'",
                           f"only the columns {names}", "pass one of those as --label-column.")
        )
    global_nid = _int_column(target, id_column, url)
    n = len(global_nid)
    valid = (global_nid >= 0) & (global_nid < n)
    seen = np.bincount(global_nid[valid], minlength=n)
    if not valid.all() or (seen != 1).any():
        if not valid.all():
            row = int(np.flatnonzero(~valid)[0])
            found = f"id {int(global_nid[row])} at data row {row + 1}"
        else:
            bad = int(np.flatnonzero(seen != 1)[0])
            found = f"id {bad} {'missing' if seen[bad] == 0 else 'repeated'}"
        raise InputError(
            format_problem(
                f"file {url}, column '{id_column}'", f"each id 0..{n - 1} exactly once ({n} rows)", found,
                "MUSAE ids are dense; use the edgelist importer with a node table for other ids.",
            )
        )
    codes, classes = _common.encode_labels(target.column(label_column), f"file {url}, column '{label_column}'")
    labels = np.full(n, -1, dtype=np.int64)
    labels[global_nid] = codes
    return labels, classes, label_column


def _edges(fs, path: str, url: str, n: int) -> tuple[np.ndarray, np.ndarray, dict[str, int]]:
    """The canonical undirected edges of the edge file, and what was dropped."""
    table = _read_csv(fs, path, url)
    if table.num_columns < 2:
        raise SchemaError(
            format_problem(f"file {url}", "two id columns (id_1,id_2 or from,to)",
                           f"the columns {table.column_names}", "use the MUSAE edge file.")
        )
    c1, c2 = table.column_names[:2]
    src_raw, dst_raw = _int_column(table, c1, url), _int_column(table, c2, url)
    _common.check_ids(src_raw, n, f"file {url}, column '{c1}' (data rows from 1)", 1)
    _common.check_ids(dst_raw, n, f"file {url}, column '{c2}' (data rows from 1)", 1)
    return _common.canonical_undirected(src_raw, dst_raw, n)


def import_musae(src: str | Path, out: str | Path, *, label_column: str | None = None,
                 name: str | None = None, undirected: bool | None = None, drop_self_loops: bool | None = None,
                 **common: Unpack[CommonOptions]) -> dict[str, Any]:
    """Import a MUSAE dataset directory; returns the committed ``meta.json``.

    Parameters
    ----------
    src
        The directory holding ``*_edges.csv``, ``*_target.csv`` and ``*.json``.
    out, **common
        The input directory to write, and the options every importer takes
        (:class:`~asepr.storage.importers.target.ImportTarget`); ``seed``: seed of the stratified
        60/20/20 split (MUSAE ships no split).
    label_column
        Label column of the target file; default the first of :data:`LABEL_COLUMNS`.
    name
        Dataset name for ``meta.json``; default the directory name.
    undirected, drop_self_loops
        Accepted for a uniform CLI; only True is legal.
    """
    _common.fixed_option(undirected, "undirected", True, FORMAT, "the graph is symmetrised")
    _common.fixed_option(drop_self_loops, "drop_self_loops", True, FORMAT, "self-loops are always dropped")
    target = ImportTarget.of(out, common)
    fs, path, url = target.source(src, "MUSAE directory")
    if not fs.isdir(path):
        raise InputError(
            format_problem(
                f"MUSAE source {url}", "a directory with *_edges.csv, *_target.csv and *.json",
                "a file", "pass the dataset's directory.",
            )
        )
    dataset = _common.dataset_name(path, name)
    edges_path, edges_url = _find(fs, path, url, "_edges.csv", "edge")
    target_path, target_url = _find(fs, path, url, "_target.csv", "target")
    json_path, json_url = _find(fs, path, url, ".json", "features")

    with stage(f"import {FORMAT} {url}", log) as info:
        labels, classes, label_column = _labels(fs, target_path, target_url, label_column)
        n = len(labels)
        src_nid, dst_nid, counts = _edges(fs, edges_path, edges_url, n)
        indptr, indices, feat_counts = _features(fs, json_path, json_url, n)
        if feat_counts["nodes_without_features"]:
            log.warning(
                "%s: %d node(s) have no entry; their features are all zero",
                json_url, feat_counts["nodes_without_features"],
            )
        counts.update(feat_counts)
        feat_dim = int(indices.max()) + 1 if len(indices) else 0
        split = _common.stratified_split(labels, target.seed)

        def write_nodes(writer) -> None:
            _common.write_csr_nodes(writer, indptr, indices, None, labels, split)
            if classes is not None:
                writer.write_json(_common.LABEL_MAP_NAME, _common.label_map(label_column, classes))

        meta = write_in_memory(target, feat_dim, src_nid, dst_nid, write_nodes, {
            "name": dataset,
            "undirected": True,
            "num_classes": len(classes) if classes is not None else _common.num_classes_of(labels),
            "label_column": label_column,
            "source": {
                "format": FORMAT,
                "path": str(src),
                "files": {"edges": edges_url, "target": target_url, "features": json_url},
            },
            "split": _common.stratified_split_meta(target.seed, labels),
            "counts": counts,
            **({"label_map": _common.LABEL_MAP_NAME} if classes is not None else {}),
        })
        info.update(nodes=meta["num_nodes"], edges=meta["num_edges"])
    return meta
