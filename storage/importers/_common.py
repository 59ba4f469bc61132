"""Helpers shared by the importers: paths, options, labels, splits, edges, node rows.

Everything here is format-agnostic. An importer module reads its format, then uses
these helpers to canonicalise edges, encode labels, draw the seeded stratified split
and stream node rows into an :class:`~asepr.storage.inputs.writer.InputWriter`.
"""

from __future__ import annotations

import contextlib
import math
import re
import zipfile
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import fsspec
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from asepr.storage.errors import (
    InputError,
    InputNotFoundError,
    SchemaError,
    StoreError,
    format_problem,
)
from asepr.storage.inputs.npy import load_npy, npz_member, npz_member_header
from asepr.storage.inputs.schema import SPLIT_NONE, SPLIT_TEST, SPLIT_TRAIN, SPLIT_VAL
from asepr.storage.integrity.claims import check_claim, check_stored
from asepr.storage.locations.fs import resolve, url_of
from asepr.storage.progress import expect

__all__ = [
    "DEFAULT_FRACTIONS",
    "ID_MAP_NAME",
    "LABEL_MAP_NAME",
    "bool_option",
    "canonical_undirected",
    "check_ids",
    "check_out",
    "dataset_name",
    "encode_labels",
    "fixed_option",
    "label_map",
    "node_chunk_rows",
    "npz_array",
    "npz_labels",
    "num_classes_of",
    "open_npz",
    "resolve_src",
    "single_file",
    "stratified_split",
    "stratified_split_meta",
    "write_csr_nodes",
    "write_dense_nodes",
]

DEFAULT_FRACTIONS = (0.6, 0.2, 0.2)
LABEL_MAP_NAME = "label_map.json"
ID_MAP_NAME = "id_map.parquet"

# Dense feature rows densified per write: bounds memory for wide feature matrices
# (coauthor-physics has 8,415 columns, about 33 KiB a row).
_CHUNK_BYTES = 32 << 20

_COMPRESSION_SUFFIXES = (".gz", ".bz2", ".xz", ".zst", ".zstd", ".lz4")


# -- paths -------------------------------------------------------------------------------
def resolve_src(
    src: str | Path, storage_options: dict | None, what: str
) -> tuple[fsspec.AbstractFileSystem, str, str]:
    """``(fs, path, url)`` of an existing source path; InputNotFoundError otherwise."""
    fs, path = resolve(src, storage_options)
    if not fs.exists(path):
        raise InputNotFoundError(
            format_problem(
                f"{what} {src}",
                "an existing file or directory",
                "nothing at that path",
                "check the spelling and that the dataset was downloaded there.",
            )
        )
    return fs, path, url_of(fs, path)


def single_file(
    fs: fsspec.AbstractFileSystem, path: str, url: str, suffix: str, what: str
) -> tuple[str, str]:
    """The one ``*suffix`` file that ``path`` is or (as a directory) holds: ``(path, url)``."""
    if not fs.isdir(path):
        return path, url
    matches = sorted(
        p for p in fs.ls(path, detail=False)
        if p.endswith(suffix) and not p.rstrip("/").rpartition("/")[2].startswith(".")
    )
    if not matches:
        raise InputNotFoundError(
            format_problem(
                f"{what} directory {url}",
                f"exactly one *{suffix} file",
                "none",
                f"point at the *{suffix} file itself, or at the folder that holds it.",
            )
        )
    if len(matches) > 1:
        names = ", ".join(m.rpartition("/")[2] for m in matches)
        raise InputError(
            format_problem(
                f"{what} directory {url}",
                f"exactly one *{suffix} file",
                f"{len(matches)} ({names})",
                "point at one of the files directly.",
            )
        )
    return matches[0], url_of(fs, matches[0])


def check_out(out: str | Path, storage_options: dict | None, overwrite: bool) -> None:
    """Fail before any work when ``out`` exists and ``overwrite`` is not set."""
    fs, path = resolve(out, storage_options)
    if not overwrite and fs.exists(path):
        raise StoreError(
            format_problem(
                f"output {out}",
                "a path that does not exist yet",
                "an existing file or directory",
                "choose another output path, or pass --overwrite to replace it.",
            )
        )


def dataset_name(path: str, name: str | None = None) -> str:
    """``name`` if given, else the file or directory stem (``cora.npz`` -> ``cora``)."""
    if name is not None:
        if not isinstance(name, str) or not name:
            raise InputError(
                format_problem("option name", "a non-empty string", repr(name))
            )
        return name
    base = path.rstrip("/").rpartition("/")[2]
    if re.search(r"[*?\[]", base):
        base = path.rstrip("/").rpartition("/")[0].rpartition("/")[2] or base
    for suffix in _COMPRESSION_SUFFIXES:
        base = base.removesuffix(suffix)
    return base.rsplit(".", 1)[0] if "." in base.lstrip(".") else base


# -- options -----------------------------------------------------------------------------
def bool_option(value: Any, name: str, default: bool | None) -> bool | None:
    """A boolean option (None means ``default``)."""
    if value is None:
        return default
    if not isinstance(value, (bool, np.bool_)):
        raise InputError(
            format_problem(f"option {name}", "true or false", repr(value))
        )
    return bool(value)


def fixed_option(value: Any, name: str, fixed: bool, fmt: str, why: str) -> None:
    """Accept an option whose only legal value for ``fmt`` is ``fixed`` (None = unset)."""
    if value is None or (isinstance(value, (bool, np.bool_)) and bool(value) == fixed):
        return
    raise InputError(
        format_problem(
            f"option {name} for format \"{fmt}\"",
            f"{fixed} or unset ({why})",
            repr(value),
            f"drop the option {name}.",
        )
    )


# -- labels and splits -------------------------------------------------------------------
def stratified_split(
    labels: np.ndarray, seed: int, fractions: tuple[float, float, float] = DEFAULT_FRACTIONS
) -> np.ndarray:
    """Seeded per-class train/val/test split; unlabelled (-1) nodes get split -1.

    Classes are visited in increasing order with one ``np.random.default_rng(seed)``.
    Within a class the node ids are permuted; the first ``floor(f_train * n)`` become
    train (0), the next ``floor(f_val * n)`` val (1), the rest test (2). A non-empty
    class always gets at least one train node.
    """
    labels = np.asarray(labels, dtype=np.int64)
    split = np.full(len(labels), SPLIT_NONE, dtype=np.int8)
    rng = np.random.default_rng(seed)
    order = np.argsort(labels, kind="stable")
    sorted_labels = labels[order]
    start = int(np.searchsorted(sorted_labels, 0, side="left"))
    classes, first = np.unique(sorted_labels[start:], return_index=True)
    bounds = list(first + start) + [len(labels)]
    for i in range(len(classes)):
        global_nid = order[bounds[i]: bounds[i + 1]]
        n = len(global_nid)
        n_train = max(1, math.floor(fractions[0] * n + 1e-9))
        n_val = min(n - n_train, math.floor(fractions[1] * n + 1e-9))
        perm = rng.permutation(global_nid)
        split[perm[:n_train]] = SPLIT_TRAIN
        split[perm[n_train: n_train + n_val]] = SPLIT_VAL
        split[perm[n_train + n_val:]] = SPLIT_TEST
    return split


def stratified_split_meta(seed: int, labels: np.ndarray) -> dict[str, Any]:
    """The meta ``split`` entry for :func:`stratified_split` (``none`` when unlabelled)."""
    if not (np.asarray(labels) >= 0).any():
        return {"kind": "none"}
    return {"kind": "stratified", "fractions": list(DEFAULT_FRACTIONS), "seed": int(seed)}


def num_classes_of(labels: np.ndarray) -> int | None:
    """``max(label) + 1``, or None when no node is labelled."""
    labels = np.asarray(labels)
    known = labels[labels >= 0]
    return int(known.max()) + 1 if len(known) else None


def encode_labels(
    column: pa.Array | pa.ChunkedArray, where: str
) -> tuple[np.ndarray, list | None]:
    """Class ids (int64, -1 for null) of a label column, and the class values if mapped.

    Integer labels are kept as they are (they must be >= -1). Any other type (strings,
    booleans, floats) is mapped: the sorted distinct values become ``0..C-1`` and the
    list of values is returned so the caller can write ``label_map.json``.
    """
    if isinstance(column, pa.ChunkedArray):
        column = column.combine_chunks()
    if pa.types.is_integer(column.type):
        values = column.fill_null(-1).to_numpy(zero_copy_only=False).astype(np.int64)
        bad = values < -1
        if bad.any():
            first = int(np.flatnonzero(bad)[0])
            raise InputError(
                format_problem(
                    where,
                    "integer class ids >= 0 (or -1 / empty for unknown)",
                    f"{int(bad.sum()):,} value(s) below -1, the first {int(values[first])} at row {first}",
                    "recode the labels as 0..C-1 with -1 for unknown.",
                )
            )
        return values, None
    if pa.types.is_floating(column.type):
        column = pc.if_else(pc.is_nan(column), pa.scalar(None, column.type), column)
    if pa.types.is_dictionary(column.type):
        column = column.dictionary_decode()
    distinct = pc.unique(column.drop_null())
    distinct = distinct.take(pc.sort_indices(distinct))
    codes = pc.index_in(column, value_set=distinct).fill_null(-1)
    return codes.to_numpy(zero_copy_only=False).astype(np.int64), distinct.to_pylist()


def label_map(column_name: str, classes: list) -> dict[str, Any]:
    """The ``label_map.json`` document: class id ``i`` is ``classes[i]``."""
    return {
        "column": column_name,
        "classes": classes,
        "to_id": {str(value): i for i, value in enumerate(classes)},
    }


# -- edges -------------------------------------------------------------------------------
def canonical_undirected(
    src: np.ndarray, dst: np.ndarray, num_nodes: int
) -> tuple[np.ndarray, np.ndarray, dict[str, int]]:
    """Drop self-loops, orient each edge ``src < dst`` and keep one copy, sorted.

    Returns the edges and counts: ``raw_entries``, ``self_loops_dropped``,
    ``duplicates_dropped`` (all entries folded away: repeats and reverse copies),
    ``exact_duplicates`` (an ordered pair stored more than once) and
    ``reverse_pairs`` (edges stored in both directions).
    """
    src = np.asarray(src, dtype=np.int64)
    dst = np.asarray(dst, dtype=np.int64)
    raw = len(src)
    keep = src != dst
    loops = raw - int(np.count_nonzero(keep))
    src, dst = src[keep], dst[keep]
    n = max(int(num_nodes), 1)
    if n <= 3_000_000_000:
        directed = np.unique(src * n + dst)
        lo, hi = np.minimum(src, dst), np.maximum(src, dst)
        key = np.unique(lo * n + hi)
        out_src, out_dst = key // n, key % n
        n_directed = len(directed)
    else:  # keys would overflow int64: sort pairs instead
        pairs = np.unique(np.stack([src, dst], axis=1), axis=0)
        n_directed = len(pairs)
        lohi = np.unique(np.sort(pairs, axis=1), axis=0)
        out_src, out_dst = lohi[:, 0].copy(), lohi[:, 1].copy()
    counts = {
        "raw_entries": raw,
        "self_loops_dropped": loops,
        "duplicates_dropped": len(src) - len(out_src),
        "exact_duplicates": len(src) - n_directed,
        "reverse_pairs": n_directed - len(out_src),
    }
    return out_src, out_dst, counts


# -- node rows ---------------------------------------------------------------------------
def node_chunk_rows(writer) -> int:
    """Rows densified per write: at most a node shard and about 32 MiB of features."""
    per_row = max(1, 4 * writer.feat_dim)
    return max(1, min(writer.node_shard_rows, _CHUNK_BYTES // per_row))


def write_csr_nodes(
    writer,
    indptr: np.ndarray,
    indices: np.ndarray,
    data: np.ndarray | None,
    labels: np.ndarray,
    split: np.ndarray,
) -> None:
    """Write nodes ``0..N-1`` whose features are a CSR matrix, densifying per chunk.

    ``data`` None means binary features (a repeated index is still 1.0); otherwise
    repeated ``(row, column)`` entries are summed, as scipy does.
    """
    n = len(indptr) - 1
    d = writer.feat_dim
    step = node_chunk_rows(writer)
    expect(n)
    for lo in range(0, n, step):
        hi = min(n, lo + step)
        a, b = int(indptr[lo]), int(indptr[hi])
        rows = np.repeat(np.arange(hi - lo, dtype=np.int64), np.diff(indptr[lo: hi + 1]))
        flat = rows * d + indices[a:b]
        if data is None:
            block = np.zeros((hi - lo) * d, dtype=np.float32)
            block[flat] = 1.0
        else:
            block = np.bincount(flat, weights=data[a:b], minlength=(hi - lo) * d).astype(np.float32)
        writer.write_nodes(
            np.arange(lo, hi, dtype=np.int64), block.reshape(hi - lo, d), labels[lo:hi], split[lo:hi]
        )


def write_dense_nodes(writer, feat, labels: np.ndarray, split: np.ndarray) -> None:
    """Write nodes ``0..N-1`` from a dense ``[N, d]`` array (or array-like), per chunk."""
    n = len(labels)
    step = node_chunk_rows(writer)
    expect(n)
    for lo in range(0, n, step):
        hi = min(n, lo + step)
        writer.write_nodes(
            np.arange(lo, hi, dtype=np.int64), feat[lo:hi], labels[lo:hi], split[lo:hi]
        )


# -- npz ---------------------------------------------------------------------------------
_NPZ_ERRORS = (OSError, ValueError, EOFError, zipfile.BadZipFile, zlib.error, KeyError)


def _npz_unreadable(url: str, exc: BaseException) -> InputError:
    return InputError(
        format_problem(
            f"file {url}",
            "a readable .npz archive",
            f"{type(exc).__name__}: {exc}",
            "the file is truncated or corrupt; download it again (see SHA256SUMS).",
        )
    )


@contextlib.contextmanager
def open_npz(fs: fsspec.AbstractFileSystem, path: str, url: str) -> Iterator[Any]:
    """Open an ``.npz`` without pickle; read errors become InputError naming the file."""
    with fs.open(path, "rb") as fh:
        try:
            npz = load_npy(fh, allow_pickle=False)
        except _NPZ_ERRORS as exc:
            raise _npz_unreadable(url, exc) from exc
        if not hasattr(npz, "files"):
            raise SchemaError(
                format_problem(
                    f"file {url}", "an .npz archive of named arrays",
                    f"a single .npy array of shape {getattr(npz, 'shape', '?')}",
                    "save the arrays with numpy.savez.",
                )
            )
        with npz:
            yield npz


def _check_npz_claim(header: tuple | None, key: str, url: str) -> None:
    """Refuse a member whose header (:func:`asepr.storage.inputs.npy.npz_member_header`) claims
    more data than the member holds, or than fits in memory, before numpy allocates it
    (:mod:`asepr.storage.integrity.claims`)."""
    if header is None:
        return
    shape, dtype, stored = header
    elements = int(np.prod(shape, dtype=object))
    where = f"file {url}, array '{key}'"
    fix = "the file is truncated, damaged or crafted; download it again (see SHA256SUMS)."
    claim = f"a header (shape {shape}, {dtype})"
    check_stored(elements * dtype.itemsize, stored, where=where, claim=claim, fix=fix)
    check_claim(elements, dtype.itemsize, where=where, claim=f"an array of {elements:,} elements", fix=fix)


def npz_array(npz, key: str, url: str, *, ndim: int | None = None, kind: str | None = None) -> np.ndarray:
    """Read one array from an open npz, checking presence, rank and dtype kind."""
    if key not in npz.files:
        raise SchemaError(
            format_problem(
                f"file {url}",
                f"an array named '{key}'",
                f"only {sorted(npz.files)}",
                "this file is not in the expected format; check the importer (FORMAT) you chose.",
            )
        )
    try:
        header = npz_member_header(npz, key)
    except _NPZ_ERRORS as exc:
        raise _npz_unreadable(f"{url}, array '{key}'", exc) from exc
    _check_npz_claim(header, key, url)
    try:
        array = npz_member(npz, key)
    except _NPZ_ERRORS as exc:
        raise _npz_unreadable(f"{url}, array '{key}'", exc) from exc
    if ndim is not None and array.ndim != ndim:
        raise SchemaError(
            format_problem(
                f"file {url}, array '{key}'", f"{ndim} dimension(s)", f"shape {array.shape}",
                "this file is not in the expected format.",
            )
        )
    if kind is not None and array.dtype.kind not in kind:
        names = {"i": "integer", "u": "unsigned", "f": "float", "b": "bool"}
        expected = " or ".join(names.get(k, k) for k in kind)
        raise SchemaError(
            format_problem(
                f"file {url}, array '{key}'", f"{expected} values", f"dtype {array.dtype}",
                "this file is not in the expected format.",
            )
        )
    return array


def npz_labels(npz, key: str, url: str, num_nodes: int | None = None) -> np.ndarray:
    """The 1-d integer label array ``key`` as int64; each a class id >= 0, or -1 for unknown.

    With ``num_nodes``, the array must hold one label per node.
    """
    labels = npz_array(npz, key, url, ndim=1, kind="iu").astype(np.int64)
    if num_nodes is not None and len(labels) != num_nodes:
        raise SchemaError(
            format_problem(
                f"file {url}, array '{key}'", f"one label per node ({num_nodes})",
                f"{len(labels)} labels", "the file is corrupt; download it again.",
            )
        )
    if (labels < -1).any():
        raise InputError(
            format_problem(
                f"file {url}, array '{key}'", "class ids >= 0 (or -1 for unknown)",
                f"the value {int(labels.min())}", "recode the labels.",
            )
        )
    return labels


def check_ids(values: np.ndarray, num_nodes: int, where: str, row_base: int = 0) -> None:
    """Raise InputError when an id lies outside ``[0, num_nodes)``.

    The first bad id is reported at row ``row_base + index`` (1 for data rows of a CSV).
    """
    if len(values) == 0:
        return
    bad = (values < 0) | (values >= num_nodes)
    if bad.any():
        first = int(np.flatnonzero(bad)[0])
        raise InputError(
            format_problem(
                where,
                f"node ids in [0, {num_nodes})",
                f"{int(bad.sum()):,} id(s) out of range, the first {int(values[first])} "
                f"at row {row_base + first}",
                "the file is corrupt or its arrays do not belong together.",
            )
        )
