"""The one way in to an input directory: its shards and its ``meta.json``, opened once.

An input directory is laid out as::

    INPUT/
      edges/*.parquet   edge shards (src, dst [, weight, ts]), in natural order
      nodes/*.parquet   node shards (id, feat [, label, split, categorical columns])
      meta.json         optional: name, num_nodes, num_edges, feat_dim, num_classes,
                        undirected, ... (see :mod:`asepr.storage.inputs.writer`)

:func:`open_input` lists both shard sets and reads ``meta.json`` once and returns an
:class:`InputDir`, which a run passes down instead of the URL, so no later stage
discovers the shards again. The fields of ``meta.json`` that asepr reads are typed
strictly: ``undirected`` must be a JSON boolean and the counts (``num_nodes``,
``num_edges``, ``feat_dim``, ``num_classes``) non-negative JSON integers; ``null``
stands for "not recorded". Anything else is an :class:`~asepr.storage.errors.InputError`
naming the file and the field, since a quoted ``"false"`` read as true would silently
change how every edge is counted.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from asepr.storage.errors import InputError, format_problem
from asepr.storage.inputs.node_table import NodeTable
from asepr.storage.inputs.schema import META_NAME
from asepr.storage.locations.fs import Shard, discover_shards, join, resolve, url_of

__all__ = ["InputDir", "input_paths", "open_input", "open_parquet", "read_meta"]

#: Fields of ``meta.json`` that asepr reads, and the JSON type each must have.
_META_BOOLEANS = ("undirected",)
_META_COUNTS = ("num_nodes", "num_edges", "feat_dim", "num_classes")
_META_STRINGS = ("name",)


@dataclass(frozen=True)
class InputDir:
    """An opened input directory: where it is, its shards and its ``meta.json``.

    Attributes
    ----------
    url
        The directory as given, without a trailing slash.
    edges_url, nodes_url
        The ``edges/`` and ``nodes/`` locations inside it.
    edge_shards, node_shards
        The shards, discovered once, in natural order (the stream order).
    meta
        ``meta.json`` with its read fields type-checked; ``{}`` when there is none.
    storage_options
        Passed to fsspec for every file of the input.
    node_table
        The validator's decoded copy of the node shards (:mod:`asepr.storage.inputs.node_table`),
        which the node passes read instead of the Parquet files; None (default) without one.
    """

    url: str
    edges_url: str
    nodes_url: str
    edge_shards: list[Shard]
    node_shards: list[Shard]
    meta: dict[str, Any]
    storage_options: dict | None = None
    node_table: NodeTable | None = None

    @property
    def undirected(self) -> bool:
        """``meta.json``'s ``undirected`` (each edge stored once), else False."""
        return bool(self.meta.get("undirected") or False)

    @property
    def num_nodes(self) -> int | None:
        """``meta.json``'s ``num_nodes``, or None when it is not recorded."""
        return self.meta.get("num_nodes")

    @property
    def num_classes(self) -> int | None:
        """``meta.json``'s ``num_classes``, or None when it is not recorded."""
        return self.meta.get("num_classes")


def input_paths(input_url: str | Path) -> tuple[str, str]:
    """The conventional ``edges/`` and ``nodes/`` locations inside an input directory."""
    base = str(input_url).rstrip("/")
    return f"{base}/edges", f"{base}/nodes"


#: What ``asepr import`` reads, by a file's suffix: the command that makes an input of it.
_IMPORT_BY_SUFFIX = {".csv": "edgelist", ".tsv": "edgelist", ".txt": "edgelist", ".edges": "edgelist",
                     ".el": "edgelist", ".gz": "edgelist", ".bz2": "edgelist", ".zst": "edgelist",
                     ".npz": "gnn-npz"}


def _refuse_a_file(base: str, storage_options: dict | None) -> None:
    """A file given where an input directory is expected (an edge list, an npz) is
    named as a file, with the import that turns it into an input."""
    try:
        fs, path = resolve(base, storage_options)
        is_file = fs.isfile(path)
    except (OSError, ValueError):
        return  # not reachable as a file: the shard discovery reports what is there
    if not is_file:
        return
    fmt = _IMPORT_BY_SUFFIX.get(Path(path).suffix.lower(), "FORMAT")
    raise InputError(format_problem(
        f"input {base}", "an input directory (edges/, nodes/ and meta.json, as `asepr import` writes it)",
        "a file", f"import it first: `asepr import {fmt} {base} OUT` (`asepr import -h` lists the formats), "
                  "then pass OUT."))


def open_input(url: str | Path | InputDir, storage_options: dict | None = None) -> InputDir:
    """Open an input directory: read ``meta.json`` and discover its shards, once.

    Parameters
    ----------
    url
        The input directory (a local path or an fsspec URL). An :class:`InputDir`
        is returned as it is, so a function may take either.
    storage_options
        Passed to fsspec.

    Returns
    -------
    InputDir

    Raises
    ------
    InputNotFoundError
        ``edges/`` or ``nodes/`` is missing or holds no Parquet file.
    InputError
        ``meta.json`` is unreadable or a field has the wrong JSON type, or a shard
        cannot be listed (a symbolic link loop, a broken link, no permission).
    """
    if isinstance(url, InputDir):
        return url
    base = str(url).rstrip("/")
    _refuse_a_file(base, storage_options)
    meta = read_meta(base, storage_options) or {}
    edges_url, nodes_url = input_paths(base)
    edge_shards = discover_shards(edges_url, what="edge shards", storage_options=storage_options)
    node_shards = discover_shards(nodes_url, what="node shards", storage_options=storage_options)
    return InputDir(
        url=base,
        edges_url=edges_url,
        nodes_url=nodes_url,
        edge_shards=edge_shards,
        node_shards=node_shards,
        meta=meta,
        storage_options=storage_options,
    )


def open_parquet(shard: Shard) -> pq.ParquetFile:
    """Open a shard as Parquet, turning corrupt or truncated files into InputError."""
    try:
        return pq.ParquetFile(shard.open("rb"))
    except (pa.ArrowInvalid, pa.ArrowIOError, OSError, ValueError) as exc:
        raise InputError(
            format_problem(
                f"file {shard.url} ({shard.size:,} bytes)",
                "a readable Parquet file",
                f"a file Parquet cannot open ({exc})",
                "the file is truncated or not Parquet; re-copy or re-export it.",
            )
        ) from exc


def read_meta(input_url: str | Path, storage_options: dict | None = None) -> dict[str, Any] | None:
    """The ``meta.json`` of an input directory, or None when it has none.

    The fields asepr reads are checked: ``undirected`` is a JSON boolean, the counts
    are non-negative JSON integers and ``name`` is a string (each may be ``null``).

    Raises
    ------
    InputError
        The file is not a JSON object, or a field has the wrong type; the message
        names the file and the field.
    """
    fs, path = resolve(input_url, storage_options)
    meta_path = join(path, META_NAME)
    if not fs.exists(meta_path):
        return None
    where = f"file {url_of(fs, meta_path)}"
    try:
        with fs.open(meta_path, "r") as fh:
            meta = json.load(fh)
    except (OSError, ValueError) as exc:
        raise InputError(
            format_problem(
                where,
                "a JSON object",
                f"unreadable content ({exc})",
                "delete it (it is optional) or re-run the importer.",
            )
        ) from exc
    if not isinstance(meta, dict):
        raise InputError(format_problem(where, "a JSON object", type(meta).__name__))
    _check_meta_types(meta, where)
    return meta


def _json_type(value: Any) -> str:
    """How JSON spells the type of a decoded value."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int):
        return "an integer"
    if isinstance(value, float):
        return "a number with a fraction or exponent"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "an array"
    return "an object"


def _check_meta_types(meta: dict[str, Any], where: str) -> None:
    """Raise InputError on the first read field of ``meta`` with the wrong JSON type."""
    for key, value in meta.items():
        if value is None:
            continue
        if key in _META_BOOLEANS and not isinstance(value, bool):
            expected, fix = "a JSON boolean (true or false)", f'write "{key}": true or false, without quotes.'
        elif key in _META_COUNTS and (isinstance(value, bool) or not isinstance(value, int) or value < 0):
            expected = "a non-negative JSON integer"
            fix = f'write the count as a bare integer, e.g. "{key}": 2708, or re-run the importer.'
        elif key in _META_STRINGS and not isinstance(value, str):
            expected, fix = "a JSON string", f'write "{key}" as a quoted string.'
        else:
            continue
        raise InputError(
            format_problem(f"{where}, field '{key}'", expected,
                           f"{json.dumps(value)} ({_json_type(value)})", fix)
        )
