"""Importer for the heterophilous-graphs ``.npz`` format (Tolokers, Squirrel, ...).

The file (yandex-research/heterophilous-graphs) holds ``node_features`` (N x d),
``node_labels`` (N), ``edges`` (E x 2, each undirected edge once) and
``train_masks`` / ``val_masks`` / ``test_masks`` (S x N bool, one row per published
split).

Written (see :mod:`asepr.storage.inputs.writer` for the shard layout)::

    OUT/
      edges/part-*.parquet   src < dst: each undirected edge once, no self-loops, sorted
      nodes/part-*.parquet   id 0..N-1, feat float32, label int64,
                             split int8 from published split ``split_index`` (default 0)
      meta.json              undirected: true, split {kind: published, index}, counts
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any, Unpack

import numpy as np

import asepr.storage.importers._common as _common
from asepr.storage.errors import InputError, SchemaError, format_problem
from asepr.storage.importers.target import CommonOptions, ImportTarget, write_in_memory
from asepr.storage.inputs.schema import SPLIT_NONE, SPLIT_TEST, SPLIT_TRAIN, SPLIT_VAL
from asepr.storage.resources import stage

__all__ = ["import_hetero_npz"]

log = logging.getLogger(__name__)

FORMAT = "hetero-npz"
_MASKS = (("train_masks", SPLIT_TRAIN), ("val_masks", SPLIT_VAL), ("test_masks", SPLIT_TEST))


def _published_split(npz, url: str, n: int, split_index: int) -> tuple[np.ndarray, int]:
    """The split codes of published split ``split_index``, and how many splits exist."""
    split = np.full(n, SPLIT_NONE, dtype=np.int8)
    owner = np.full(n, -1, dtype=np.int64)
    num_splits = None
    for i, (key, code) in enumerate(_MASKS):
        masks = _common.npz_array(npz, key, url, kind="bi")
        if masks.ndim == 1:
            masks = masks[None, :]
        if masks.ndim != 2 or masks.shape[1] != n:
            raise SchemaError(
                format_problem(
                    f"file {url}, array '{key}'", f"shape (splits, {n})", f"shape {masks.shape}",
                    "the file is corrupt or not in the heterophilous-graphs format.",
                )
            )
        if num_splits is None:
            num_splits = masks.shape[0]
            if not 0 <= split_index < num_splits:
                raise InputError(
                    format_problem(
                        f"option split_index for file {url}",
                        f"a published split in 0..{num_splits - 1}",
                        str(split_index),
                        f"pass --split-index between 0 and {num_splits - 1}.",
                    )
                )
        elif masks.shape[0] != num_splits:
            raise SchemaError(
                format_problem(
                    f"file {url}, array '{key}'", f"{num_splits} split rows like 'train_masks'",
                    f"{masks.shape[0]}", "the file is corrupt.",
                )
            )
        member = masks[split_index].astype(bool)
        clash = member & (owner >= 0)
        if clash.any():
            first = int(np.flatnonzero(clash)[0])
            other = _MASKS[int(owner[first])][0]
            raise InputError(
                format_problem(
                    f"file {url}, split {split_index}",
                    "each node in at most one of train_masks, val_masks, test_masks",
                    f"{int(clash.sum()):,} node(s) in both '{other}' and '{key}', the first node {first}",
                    "choose another --split-index, or fix the masks so they do not overlap.",
                )
            )
        owner[member] = i
        split[member] = code
    return split, int(num_splits)


def _split_index_option(split_index) -> int:
    """The ``split_index`` option as an int (default 0)."""
    if split_index is None:
        return 0
    if isinstance(split_index, (bool, np.bool_)) or not isinstance(split_index, (int, np.integer)):
        raise InputError(
            format_problem(
                "option split_index", "an integer (a published split, 0 = the first)",
                repr(split_index), "pass --split-index 0..9.",
            )
        )
    return int(split_index)


def _undirected_edges(npz, url: str, n: int) -> tuple[np.ndarray, np.ndarray, dict[str, int]]:
    """``(src, dst, counts)``: each undirected edge of ``edges`` once, without self-loops."""
    edges = _common.npz_array(npz, "edges", url, ndim=2, kind="iu")
    if edges.shape[1] != 2:
        raise SchemaError(
            format_problem(
                f"file {url}, array 'edges'", "shape (E, 2)", f"shape {edges.shape}",
                "the file is not in the heterophilous-graphs format.",
            )
        )
    edges = edges.astype(np.int64)
    _common.check_ids(edges[:, 0], n, f"file {url}, array 'edges', column 0")
    _common.check_ids(edges[:, 1], n, f"file {url}, array 'edges', column 1")
    return _common.canonical_undirected(edges[:, 0], edges[:, 1], n)


def _features(npz, url: str, n: int) -> np.ndarray:
    """``node_features``: one finite row per node."""
    feat = _common.npz_array(npz, "node_features", url, ndim=2, kind="iufb")
    if feat.shape[0] != n:
        raise SchemaError(
            format_problem(
                f"file {url}, array 'node_features'", f"{n} rows (one per label)",
                f"shape {feat.shape}", "the file is corrupt.",
            )
        )
    finite = np.isfinite(feat).all(axis=1)
    if not finite.all():
        raise InputError(
            format_problem(
                f"file {url}, array 'node_features'", "finite feature values",
                f"NaN or inf in {int((~finite).sum()):,} row(s), the first node {int(np.flatnonzero(~finite)[0])}",
                "impute or zero the missing values.",
            )
        )
    return feat


def import_hetero_npz(src: str | Path, out: str | Path, *, split_index: int | None = None,
                      name: str | None = None, undirected: bool | None = None,
                      drop_self_loops: bool | None = None, **common: Unpack[CommonOptions]) -> dict[str, Any]:
    """Import a heterophilous-graphs ``.npz`` (or a directory holding exactly one) and
    return the committed ``meta.json``.

    Parameters
    ----------
    src
        The heterophilous-graphs ``.npz`` file, or a directory holding one.
    out, **common
        The input directory to write, and the options every importer takes
        (:class:`~asepr.storage.importers.target.ImportTarget`); ``seed``: unused (the split is
        published); accepted for a uniform call.
    split_index
        Which published split to keep (default 0).
    name
        Dataset name for ``meta.json``; default the file stem.
    undirected, drop_self_loops
        Accepted for a uniform CLI; only True is legal.
    """
    _common.fixed_option(undirected, "undirected", True, FORMAT, "the graph is undirected")
    _common.fixed_option(drop_self_loops, "drop_self_loops", True, FORMAT, "self-loops are always dropped")
    split_index = _split_index_option(split_index)
    target = ImportTarget.of(out, common)
    fs, path, url = target.source(src, "heterophilous npz")
    dataset = _common.dataset_name(path, name)
    path, url = _common.single_file(fs, path, url, ".npz", "heterophilous npz")

    with stage(f"import {FORMAT} {url}", log) as info, _common.open_npz(fs, path, url) as npz:
        labels = _common.npz_labels(npz, "node_labels", url)
        n = len(labels)
        split, num_splits = _published_split(npz, url, n, split_index)
        src_nid, dst_nid, counts = _undirected_edges(npz, url, n)
        feat = _features(npz, url, n)

        meta = write_in_memory(
            target, feat.shape[1], src_nid, dst_nid,
            lambda writer: _common.write_dense_nodes(writer, feat, labels, split),
            {
                "name": dataset,
                "undirected": True,
                "num_classes": _common.num_classes_of(labels),
                "source": {"format": FORMAT, "path": str(src), "file": url},
                "split": {"kind": "published", "index": split_index, "num_published": num_splits},
                "counts": counts,
            },
        )
        info.update(nodes=meta["num_nodes"], edges=meta["num_edges"])
    return meta
