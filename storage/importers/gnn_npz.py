"""Importer for the gnn-benchmark ``.npz`` format (Cora, Amazon, Coauthor, ...).

The file (shchur/gnn-benchmark) holds a CSR adjacency (``adj_data``, ``adj_indices``,
``adj_indptr``, ``adj_shape``), a CSR feature matrix (``attr_*``) and ``labels``. Other
keys, among them object arrays that would need pickle (``class_names``), are never read.

Written (see :mod:`asepr.storage.inputs.writer` for the shard layout)::

    OUT/
      edges/part-*.parquet   src < dst: each undirected edge once, no self-loops, sorted
      nodes/part-*.parquet   id 0..N-1, feat = dense float32 rows of the CSR matrix,
                             label int64, split int8 (seeded stratified 60/20/20)
      meta.json              undirected: true, split {kind: stratified, seed}, counts
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any, Unpack

import numpy as np

import asepr.storage.importers._common as _common
from asepr.storage.errors import InputError, SchemaError, format_problem
from asepr.storage.importers.target import CommonOptions, ImportTarget, write_in_memory
from asepr.storage.resources import stage

__all__ = ["import_gnn_npz"]

log = logging.getLogger(__name__)

FORMAT = "gnn-npz"


def _csr(npz, prefix: str, url: str) -> tuple[np.ndarray, np.ndarray, np.ndarray, tuple[int, int]]:
    """Read and check one CSR matrix ``prefix_{data,indices,indptr,shape}``."""
    shape = _common.npz_array(npz, f"{prefix}_shape", url, ndim=1, kind="iu")
    if len(shape) != 2 or (shape < 0).any():
        raise SchemaError(
            format_problem(
                f"file {url}, array '{prefix}_shape'", "two non-negative sizes (rows, columns)",
                f"{shape.tolist()}", "the file is corrupt; download it again.",
            )
        )
    rows, cols = int(shape[0]), int(shape[1])
    indptr = _common.npz_array(npz, f"{prefix}_indptr", url, ndim=1, kind="iu").astype(np.int64)
    indices = _common.npz_array(npz, f"{prefix}_indices", url, ndim=1, kind="iu").astype(np.int64)
    data = _common.npz_array(npz, f"{prefix}_data", url, ndim=1, kind="iufb")
    problem = None
    if len(indptr) != rows + 1:
        problem = f"'{prefix}_indptr' of length {len(indptr)} for {rows} rows (expected {rows + 1})"
    elif indptr[0] != 0 or (np.diff(indptr) < 0).any():
        problem = f"'{prefix}_indptr' that does not start at 0 and never decrease"
    elif indptr[-1] != len(indices) or len(data) != len(indices):
        problem = (
            f"'{prefix}_indptr' ending at {int(indptr[-1])} with {len(indices)} indices "
            f"and {len(data)} values"
        )
    elif len(indices) and (indices.min() < 0 or indices.max() >= cols):
        problem = f"'{prefix}_indices' outside [0, {cols})"
    if problem:
        raise SchemaError(
            format_problem(
                f"file {url}, CSR matrix '{prefix}_*'", "a consistent CSR matrix", problem,
                "the file is corrupt or truncated; download it again.",
            )
        )
    return indptr, indices, data, (rows, cols)


def _adjacency(npz, url: str) -> tuple[np.ndarray, np.ndarray, int]:
    """``(indptr, indices, n)`` of the square CSR adjacency matrix."""
    adj_indptr, adj_indices, _, (n, n_cols) = _csr(npz, "adj", url)
    if n != n_cols:
        raise SchemaError(
            format_problem(
                f"file {url}, array 'adj_shape'", "a square adjacency matrix",
                f"shape ({n}, {n_cols})", "the file is not a gnn-benchmark graph.",
            )
        )
    return adj_indptr, adj_indices, n


def _features(npz, url: str, n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, int]:
    """``(indptr, indices, data, feat_dim)`` of the CSR feature matrix: one row per node, finite."""
    attr_indptr, attr_indices, attr_data, (attr_rows, feat_dim) = _csr(npz, "attr", url)
    if attr_rows != n:
        raise SchemaError(
            format_problem(
                f"file {url}, array 'attr_shape'", f"{n} rows (one per node)",
                f"{attr_rows} rows", "the file is corrupt; download it again.",
            )
        )
    if not np.isfinite(attr_data).all():
        raise InputError(
            format_problem(
                f"file {url}, array 'attr_data'", "finite feature values",
                f"{int((~np.isfinite(attr_data)).sum()):,} NaN or inf value(s)",
                "the file is corrupt; download it again.",
            )
        )
    return attr_indptr, attr_indices, attr_data, feat_dim


def import_gnn_npz(src: str | Path, out: str | Path, *, name: str | None = None,
                   undirected: bool | None = None, drop_self_loops: bool | None = None,
                   **common: Unpack[CommonOptions]) -> dict[str, Any]:
    """Import a gnn-benchmark ``.npz`` (or a directory holding exactly one) and return the
    committed ``meta.json``.

    Parameters
    ----------
    src
        The ``.npz`` file, or a directory with one ``.npz`` in it.
    out, **common
        The input directory to write, and the options every importer takes
        (:class:`~asepr.storage.importers.target.ImportTarget`); ``seed``: seed of the stratified
        60/20/20 split (the format ships no split).
    name
        Dataset name for ``meta.json``; default the file stem.
    undirected, drop_self_loops
        Accepted for a uniform CLI; only True is legal (the graph is always symmetrised,
        self-loops are always dropped).
    """
    _common.fixed_option(undirected, "undirected", True, FORMAT, "the graph is symmetrised")
    _common.fixed_option(drop_self_loops, "drop_self_loops", True, FORMAT, "self-loops are always dropped")
    target = ImportTarget.of(out, common)
    fs, path, url = target.source(src, "gnn-benchmark npz")
    dataset = _common.dataset_name(path, name)
    path, url = _common.single_file(fs, path, url, ".npz", "gnn-benchmark npz")

    with stage(f"import {FORMAT} {url}", log) as info, _common.open_npz(fs, path, url) as npz:
        adj_indptr, adj_indices, n = _adjacency(npz, url)
        labels = _common.npz_labels(npz, "labels", url, n)
        attr_indptr, attr_indices, attr_data, feat_dim = _features(npz, url, n)

        row_nid = np.repeat(np.arange(n, dtype=np.int64), np.diff(adj_indptr))
        src_nid, dst_nid, counts = _common.canonical_undirected(row_nid, adj_indices, n)
        del row_nid, adj_indices
        counts["stored_symmetric"] = counts["reverse_pairs"] * 2 == (
            counts["raw_entries"] - counts["self_loops_dropped"] - counts["exact_duplicates"]
        )
        split = _common.stratified_split(labels, target.seed)
        meta = write_in_memory(
            target, feat_dim, src_nid, dst_nid,
            lambda writer: _common.write_csr_nodes(
                writer, attr_indptr, attr_indices, attr_data.astype(np.float64), labels, split),
            {
                "name": dataset,
                "undirected": True,
                "num_classes": _common.num_classes_of(labels),
                "source": {"format": FORMAT, "path": str(src), "file": url},
                "split": _common.stratified_split_meta(target.seed, labels),
                "counts": counts,
            },
        )
        info.update(nodes=meta["num_nodes"], edges=meta["num_edges"])
    return meta
