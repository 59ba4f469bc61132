"""New edges as a text edge list, in the original ids of an imported input.

``asepr import edgelist`` numbers the nodes of an edge list ``0..N-1`` and, when the
original ids were not already those numbers, writes ``id_map.parquet`` (``global_nid``,
``original_id``) into the input. An increment of such a graph arrives the same way: a
CSV/TSV (or blank-separated) edge list naming nodes by their original ids. This module
turns it into what ``asepr ingest`` reads, Parquet edge shards in node ids:

* every file is read as :mod:`asepr.storage.importers.edgelist` reads it (comments, header,
  delimiter, ``weight`` and ``ts`` columns; :mod:`asepr.storage.importers._edge_text`), in
  two streaming passes with memory O(N) for the map and one block of text;
* an original id listed in the map takes its ``global_nid``; every other id is a new
  node, and the new ids are numbered from the output's next free id ``first_id`` in
  sorted order of their original ids (the importer's rule, so a rerun numbers them the
  same way);
* without a map (the input's ids were ``0..N-1`` already), the ids are node ids: those
  below ``first_id`` exist and the others must be exactly ``first_id ..`` without gaps;
* the new nodes get rows of the input's kind of featureless node: the constant feature
  ``[1.0]`` when the input was imported without a node table, else an all-zero vector
  (which ingest treats as a node without features); label -1, no split;
* the grown map is the committed rows plus one row per new id; :func:`write_id_map`
  replaces the file atomically.

The map is the input's, and every output partitioned from the input may grow it: the
outputs' node ids diverge (two outputs number their own new ids from the same next free
id), so each row an ingest appends names, in the column ``output``, the output it was
numbered for (null for the import's rows). An output's view of the map
(:func:`read_id_map` with its ``owner``) is the import's rows and its own; the rows of
the other outputs are carried through every rewrite unchanged. Rows of the view whose
``global_nid`` is ``first_id`` or more were written by an ingest that did not commit
(this module writes the map before ingest commits): they are dropped and the new ids
numbered again. :func:`id_map_digest` fingerprints the committed rows of a view so that
the output can tell whether the map is still the one its last ingest wrote. The caller
serialises the read-modify-write of the map (its ingests hold the map's lock from the
read through the commit).

The Parquet files are written with fixed row groups, so the same edge list and map give
the same bytes and the same fingerprint (ingest's exactly-once check).
"""

from __future__ import annotations

import hashlib
import io
import json
import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from asepr.storage.commit.atomic import write_bytes_atomic
from asepr.storage.errors import InputError, SchemaError, format_problem
from asepr.storage.importers._common import ID_MAP_NAME
from asepr.storage.importers._edge_text import (
    EDGE_SUFFIXES,
    StringIds,
    compression_of,
    first_bad,
    list_edge_files,
    no_nulls,
    read_batches,
    sniff,
)
from asepr.storage.inputs.schema import META_NAME, SPLIT_NONE, node_schema
from asepr.storage.locations.fs import join, resolve, url_of

__all__ = ["ID_MAP_NAME", "OWNER_COLUMN", "EdgeListIncrement", "IdMap", "constant_features", "id_map_digest",
           "map_edge_list", "read_id_map", "text_edge_files", "text_first_line", "write_id_map"]

log = logging.getLogger(__name__)

_PARQUET_MAGIC = b"PAR1"
#: Rows per row group of the converted files (fixed: the bytes must not depend on blocks).
ROW_GROUP_ROWS = 1 << 20
_BLOCK_BYTES = 16 << 20
_COMPRESSION = "zstd"


def text_first_line(fs, path: str) -> str | None:
    """The first line of the file when it is a text edge list rather than Parquet, else None."""
    with fs.open(path, "rb") as fh:
        head = fh.read(512)
    if head.startswith(_PARQUET_MAGIC) or b"\0" in head:
        return None
    try:
        text = head.decode("utf-8")
    except UnicodeDecodeError:
        return None
    first = text.splitlines()[0] if text.strip() else ""
    return first if any(sep in first for sep in (",", "\t", " ", ";")) else None


def text_edge_files(url: str | Path, storage_options: dict | None = None) -> list[tuple[Any, str]] | None:
    """The files of ``url`` as ``(fs, path)`` when it names a text edge list, None for Parquet.

    A directory counts as text when it holds no ``.parquet`` file but edge-list files
    (``*.csv``, ``*.tsv``, ``*.txt``, ..., optionally compressed); a file or glob when its
    files are compressed text or start with a line of separated fields. None also when
    nothing is there (the Parquet discovery then says what is missing).
    """
    fs, path = resolve(url, storage_options)
    glob = any(c in path for c in "*?[")
    if not glob and not fs.exists(path):
        return None
    if not glob and fs.isdir(path) and any(p.endswith(".parquet") for p in fs.find(path)):
        return None
    try:
        files = list_edge_files(fs, path, url_of(fs, path))
    except InputError:
        return None
    text = [compression_of(p) is not None or text_first_line(fs, p) is not None for p in files]
    for p, is_text in zip(files, text):
        if not is_text:
            _refuse_named_text(fs, p)
    if not any(text):
        return None
    if not all(text):
        parquet = files[text.index(False)]
        raise InputError(format_problem(
            f"new edges {url}", "either Parquet shards or text edge lists",
            f"both: {url_of(fs, files[text.index(True)])} is text, {url_of(fs, parquet)} is not",
            "give the two kinds in separate ingests.",
        ))
    return [(fs, p) for p in files]


def _refuse_named_text(fs, path: str) -> None:
    """A file named as an edge list (``*.tsv``, ``*.csv``, ...) that is neither text nor
    Parquet is described as what it is (empty, binary), not as a Parquet file that fails."""
    base = path.rpartition("/")[2]
    if not base.lower().endswith(EDGE_SUFFIXES):
        return
    with fs.open(path, "rb") as fh:
        head = fh.read(512)
    if head.startswith(_PARQUET_MAGIC):
        return
    if not head:
        found = "an empty file (0 bytes)"
    elif b"\0" in head:
        found = f"binary content (a NUL byte at offset {head.index(bytes(1))})"
    else:
        first = head.splitlines()[0][:60] if head.strip() else head[:60]
        found = f"a first line without separated fields ({first!r})"
    raise InputError(format_problem(
        f"edge list {url_of(fs, path)}",
        "a text edge list (one edge per line: two ids separated by a tab, comma, semicolon or blanks)",
        found, "give the edge list that was meant (the file may be truncated or still being written), "
        "or Parquet shards."))


# --- the id map ----------------------------------------------------------------------------


#: The column of the output a row was numbered for (null: the import's rows).
OWNER_COLUMN = "output"


@dataclass
class IdMap:
    """An output's view of an input's ``id_map.parquet``: where it is, and its rows below
    ``first_id`` (the import's and this output's own)."""

    fs: Any
    path: str
    url: str
    table: pa.Table  # global_nid int64, original_id, output; sorted by global_nid
    pending: int  # rows at or above first_id, dropped (an ingest that did not commit)
    owner: str | None = None  # the output whose view this is
    others: pa.Table | None = None  # the rows of the other outputs, kept as they are

    @property
    def id_type(self) -> pa.DataType:
        return self.table.schema.field("original_id").type

    def with_rows(self, global_nid: np.ndarray, original_id: pa.Array) -> pa.Table:
        """The view grown by new rows of this output (in ``global_nid`` order)."""
        added = pa.table({"global_nid": pa.array(global_nid, pa.int64()), "original_id": original_id,
                          OWNER_COLUMN: pa.array([self.owner] * len(global_nid), pa.string())},
                         schema=self.table.schema)
        return pa.concat_tables([self.table, added]).combine_chunks()


def read_id_map(input_url: str, first_id: int, storage_options: dict | None = None, *,
                owner: str | None = None) -> IdMap | None:
    """The id map of the input at ``input_url`` (None without one): the view of ``owner``
    (the import's rows and those numbered for ``owner``), rows below ``first_id``."""
    fs, base = resolve(input_url, storage_options)
    path = join(base, ID_MAP_NAME)
    if not fs.exists(path):
        return None
    url = url_of(fs, path)
    try:
        table = pq.read_table(path, filesystem=fs)
    except (pa.ArrowInvalid, OSError) as exc:
        raise InputError(format_problem(f"id map {url}", "a Parquet file (columns global_nid, original_id)",
                                        f"an unreadable file ({exc})",
                                        "restore it from the input's import (`asepr import edgelist`).")) from exc
    names = table.schema.names
    if "global_nid" not in names or "original_id" not in names or not pa.types.is_integer(
            table.schema.field("global_nid").type) or (OWNER_COLUMN in names and not pa.types.is_string(
            table.schema.field(OWNER_COLUMN).type)):
        raise SchemaError(format_problem(f"id map {url}", "columns global_nid (int64), original_id [and output "
                                         "(text)]", f"columns {table.schema}".replace("\n", ", "),
                                         "restore it from the input's import."))
    if OWNER_COLUMN not in names:  # written by the import, or before rows named their output
        table = table.append_column(OWNER_COLUMN, pa.nulls(table.num_rows, pa.string()))
    table = table.select(["global_nid", "original_id", OWNER_COLUMN]).cast(
        pa.schema([("global_nid", pa.int64()), table.schema.field("original_id"), (OWNER_COLUMN, pa.string())]))
    rows_owner = table.column(OWNER_COLUMN)
    mine = pc.fill_null(pc.is_null(rows_owner), False)
    if owner is not None:
        mine = pc.or_(mine, pc.fill_null(pc.equal(rows_owner, owner), False))
    others, table = table.filter(pc.invert(mine)), table.filter(mine)
    gnid = table.column("global_nid").to_numpy()
    keep = gnid < first_id
    table = table.filter(pa.array(keep)).take(pa.array(np.argsort(gnid[keep], kind="stable"))).combine_chunks()
    _check_unique(table, url)
    return IdMap(fs, path, url, table, int(len(gnid) - keep.sum()), owner, others)


def _check_unique(table: pa.Table, url: str) -> None:
    """A map names each node once and each original id once, with node ids >= 0."""
    gnid = table.column("global_nid").to_numpy()
    problem = None
    if len(gnid) and gnid[0] < 0:
        problem = ("global_nid", f"node id {int(gnid[0])}")
    elif len(gnid) > 1 and (gnid[1:] == gnid[:-1]).any():
        problem = ("global_nid", f"node id {int(gnid[1:][gnid[1:] == gnid[:-1]][0])} twice")
    else:
        original = table.column("original_id")
        counts = pc.value_counts(original)
        twice = counts.filter(pc.greater(counts.field("counts"), 1))
        if len(twice):
            problem = ("original_id", f"id {twice[0]['values'].as_py()!r} twice")
    if problem is not None:
        raise SchemaError(format_problem(
            f"id map {url}, column '{problem[0]}'", "each node id (>= 0) and each original id once",
            problem[1], "restore the map from the input's import (`asepr import edgelist`); it was edited.",
        ))


def id_map_digest(table: pa.Table) -> str:
    """sha256 of the rows (``global_nid``, ``original_id``) of ``table`` (sorted by
    ``global_nid``), independent of the file's encoding and of the rows' ``output``."""
    table = table.select(["global_nid", "original_id"]).combine_chunks()
    sink = io.BytesIO()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    return hashlib.sha256(sink.getvalue()).hexdigest()


def write_id_map(id_map: IdMap, table: pa.Table) -> None:
    """Replace the map's file with the view ``table`` and the other outputs' rows, atomically."""
    if id_map.others is not None and id_map.others.num_rows:
        table = pa.concat_tables([table, id_map.others.cast(table.schema)])
    buffer = io.BytesIO()
    pq.write_table(table, buffer, compression=_COMPRESSION)
    write_bytes_atomic(id_map.path, buffer.getvalue(), fs=id_map.fs)


# --- reading the edge list -------------------------------------------------------------------


class _Lookup:
    """Original ids -> ``global_nid`` through a sorted (int) or hashed (string) id set."""

    def __init__(self, original: pa.Array, global_nid: np.ndarray):
        self.global_nid = np.asarray(global_nid, dtype=np.int64)
        self.original = original
        if pa.types.is_integer(original.type):
            values = original.to_numpy()
            self._order = np.argsort(values, kind="stable")
            self._sorted = values[self._order]
        else:
            self._order = self._sorted = None

    def __call__(self, values: pa.Array) -> tuple[np.ndarray, np.ndarray]:
        """``(global_nid, found)``; ``global_nid`` is -1 where not found."""
        if not len(self.global_nid):
            return np.full(len(values), -1, np.int64), np.zeros(len(values), bool)
        if self._sorted is None:
            index = pc.index_in(values, value_set=self.original)
            found = index.is_valid().to_numpy(zero_copy_only=False)
            position = index.fill_null(0).to_numpy(zero_copy_only=False).astype(np.int64)
        else:
            queries = values.to_numpy()
            at = np.minimum(np.searchsorted(self._sorted, queries), len(self._sorted) - 1)
            found = self._sorted[at] == queries
            position = self._order[at]
        return np.where(found, self.global_nid[position], -1), found


def _id_type_error(url: str, id_map: IdMap, exc: Exception) -> InputError:
    return InputError(format_problem(
        f"edge list {url}", f"integer original ids, as in the id map {id_map.url} (original_id is "
        f"{id_map.id_type})", f"a non-integer id ({exc})",
        "give the original ids the input was imported with, or ingest Parquet in node ids.",
    ))


def _batches(fs, plans, id_type: pa.DataType, id_map: IdMap | None):
    """``(plan, row0, src, dst, batch)`` over every file, the ids read as ``id_type``."""
    for plan in plans:
        try:
            for row0, batch in read_batches(fs, plan, id_type, _BLOCK_BYTES):
                src, dst = batch.column(plan.src), batch.column(plan.dst)
                no_nulls(plan, row0, plan.src, src)
                no_nulls(plan, row0, plan.dst, dst)
                yield plan, row0, src, dst, batch
        except StringIds as exc:
            if id_map is None:
                raise InputError(format_problem(
                    f"edge list {plan.url}", "integer node ids (the input has no id map, so its ids are node ids)",
                    f"a non-integer id ({exc})", "give the edges in the output's node ids.",
                )) from exc
            raise _id_type_error(plan.url, id_map, exc) from exc


def _unknown_ids(fs, plans, id_type, id_map: IdMap | None, known: _Lookup | None, first_id: int) -> pa.Array:
    """Pass 1: the distinct ids the map does not hold (without a map: ids outside 0..first_id-1)."""
    parts: list[pa.Array] = []
    pending = 0
    for _, _, src, dst, _ in _batches(fs, plans, id_type, id_map):
        values = pa.concat_arrays([src, dst])
        if known is not None:
            found = known(values)[1]
        else:
            ids = values.to_numpy()
            found = (ids >= 0) & (ids < first_id)
        if not found.all():
            parts.append(pc.unique(values.filter(pa.array(~found))))
            pending += len(parts[-1])
            if pending > 1 << 20:
                parts, pending = [pc.unique(pa.concat_arrays(parts))], 0
    if not parts:
        return pa.array([], type=id_type)
    unique = pc.unique(pa.concat_arrays(parts))
    return unique.take(pc.sort_indices(unique))


def _check_plain_ids(fs, plans, new: pa.Array, first_id: int) -> None:
    """Without a map the new ids must be ``first_id ..`` without gaps; the error names the
    first row (file, column, row) that holds the first id out of place."""
    ids = new.to_numpy()
    expected = np.arange(first_id, first_id + len(ids))
    if not len(ids) or np.array_equal(ids, expected):
        return
    bad = int(ids[first_bad(ids != expected)])
    where = f"new edges {plans[0].url}"
    for plan, row0, src, dst, _ in _batches(fs, plans, pa.int64(), None):
        hits = [(int(np.flatnonzero(col.to_numpy() == bad)[0]), name)
                for col, name in ((src, plan.src), (dst, plan.dst)) if (col.to_numpy() == bad).any()]
        if hits:
            row, column = min(hits)
            where = plan.at_row(row0 + row, column)
            break
    raise InputError(format_problem(
        where,
        f"node ids: existing nodes 0..{first_id - 1}, new nodes {first_id}..{first_id + len(ids) - 1} "
        "without gaps (the input has no id map, so its edge list's ids are node ids)",
        f"id {bad}",
        "number the new nodes from the output's next free id on, or import the grown edge list again.",
    ))


class _ShardFile:
    """One Parquet file written in row groups of exactly :data:`ROW_GROUP_ROWS` rows."""

    def __init__(self, path: Path, schema: pa.Schema):
        self.path = path
        self.schema = schema
        self.rows = 0
        self._writer = pq.ParquetWriter(str(path), schema, compression=_COMPRESSION)
        self._pending: list[pa.Table] = []
        self._pending_rows = 0

    def write(self, table: pa.Table) -> None:
        self._pending.append(table.cast(self.schema))
        self._pending_rows += table.num_rows
        self.rows += table.num_rows
        if self._pending_rows >= ROW_GROUP_ROWS:
            whole = pa.concat_tables(self._pending)
            cut = (whole.num_rows // ROW_GROUP_ROWS) * ROW_GROUP_ROWS
            self._writer.write_table(whole.slice(0, cut), row_group_size=ROW_GROUP_ROWS)
            self._pending = [whole.slice(cut)]
            self._pending_rows = whole.num_rows - cut

    def close(self) -> None:
        if self._pending_rows or not self.rows:
            self._writer.write_table(pa.concat_tables(self._pending) if self._pending
                                     else self.schema.empty_table(), row_group_size=ROW_GROUP_ROWS)
        self._writer.close()


@dataclass
class EdgeListIncrement:
    """What :func:`map_edge_list` wrote: Parquet edge files (one per text file, named by the
    text file's url), the new nodes' file, and the grown id map to commit."""

    edge_files: list[tuple[str, Path]] = field(default_factory=list)
    node_file: Path | None = None
    new_nodes: int = 0
    id_map: IdMap | None = None
    grown_map: pa.Table | None = None

    @property
    def committed_map_digest(self) -> str | None:
        """The digest of the grown map (what the map holds once the ingest commits)."""
        return id_map_digest(self.grown_map) if self.grown_map is not None else None


def _write_edges(fs, plans, id_type, id_map, lookup_old: _Lookup | None, lookup_new: _Lookup | None,
                 work: Path) -> list[tuple[str, Path]]:
    """Pass 2: the edges in node ids, one Parquet file per text file."""
    written: list[tuple[str, Path]] = []
    files: dict[str, _ShardFile] = {}
    for plan, row0, src, dst, batch in _batches(fs, plans, id_type, id_map):
        if plan.url not in files:
            extras = [(c, pa.float32() if c == "weight" else pa.int64()) for c in plan.extras]
            path = work / f"edges-{len(files):05d}.parquet"
            files[plan.url] = _ShardFile(path, pa.schema([("src", pa.int64()), ("dst", pa.int64()), *extras]))
            written.append((plan.url, path))
        values = pa.concat_arrays([src, dst])
        if lookup_old is None:
            ids = values.to_numpy().astype(np.int64)
        else:
            ids, found = lookup_old(values)
            if lookup_new is not None and not found.all():
                extra, _ = lookup_new(values)
                ids = np.where(found, ids, extra)
        n = len(src)
        columns = {"src": ids[:n], "dst": ids[n:]}
        for name, column in (("weight", plan.weight), ("ts", plan.ts)):
            if column:
                no_nulls(plan, row0, column, batch.column(column))
                columns[name] = batch.column(column)
        files[plan.url].write(pa.table(columns))
    for sink in files.values():
        sink.close()
    return written


def _node_rows(path: Path, first_id: int, count: int, feat_dim: int, constant: bool) -> None:
    schema = node_schema(feat_dim)
    sink = _ShardFile(path, schema)
    step = max(1, (16 << 20) // max(1, 4 * feat_dim))
    for lo in range(0, count, step):
        n = min(step, count - lo)
        feat = np.full(n * feat_dim, 1.0 if constant else 0.0, dtype=np.float32)
        sink.write(pa.Table.from_arrays([
            pa.array(np.arange(first_id + lo, first_id + lo + n, dtype=np.int64)),
            pa.FixedSizeListArray.from_arrays(pa.array(feat), feat_dim),
            pa.array(np.full(n, -1, np.int64)),
            pa.array(np.full(n, SPLIT_NONE, np.int8)),
        ], schema=schema))
    sink.close()


def _sniff(fs, path: str, known: _Lookup | None, id_type: pa.DataType):
    """:func:`asepr.storage.importers._edge_text.sniff`, with one more clue for the header guess.

    The importer takes a first line of two non-integer fields for a header. Here the map
    tells more: a first line whose two fields are not endpoint names (``src``/``dst``,
    ``source``/``target``) but are both ids the map holds is an edge, not a header.
    """
    plan = sniff(fs, path, None, None)
    if plan.empty or not plan.header or known is None or plan.extras:
        return plan
    names = (plan.src.strip(), plan.dst.strip())
    if {n.lower() for n in names} & {"src", "dst", "source", "target"}:
        return plan
    try:
        values = pa.array(names).cast(id_type)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        return plan
    if known(values)[1].all():
        log.info("%s: the first line names two known ids, so it is read as an edge, not a header", plan.url)
        return sniff(fs, path, False, plan.delimiter)
    return plan


def constant_features(input_url: str, storage_options: dict | None = None) -> bool:
    """Whether the input was imported without node features (every node ``[1.0]``)."""
    fs, base = resolve(input_url, storage_options)
    path = join(base, META_NAME)
    if not fs.exists(path):
        return False
    with fs.open(path, "r") as fh:
        try:
            meta = json.load(fh)
        except ValueError:
            return False
    return isinstance(meta, dict) and meta.get("features") == "constant"


def map_edge_list(
    files: list[tuple[Any, str]],
    work: Path,
    *,
    id_map: IdMap | None,
    first_id: int,
    feat_dim: int,
    constant: bool,
) -> EdgeListIncrement:
    """Write the text edge ``files`` (``(fs, path)`` pairs) as Parquet in node ids under ``work``.

    Parameters
    ----------
    files
        The edge list files, in order.
    work
        An empty local directory for the converted files.
    id_map
        The input's map (:func:`read_id_map`), or None when the input has none.
    first_id
        The output's next free node id ``N``: new nodes are ``N, N+1, ...``.
    feat_dim, constant
        The output's feature width, and whether its featureless nodes are ``[1.0]``.

    Raises
    ------
    InputError, SchemaError
        A file that is not an edge list, an empty field, ids of the wrong kind.
    """
    fs = files[0][0]
    result = EdgeListIncrement(id_map=id_map)
    id_type = id_map.id_type if id_map is not None else pa.int64()
    lookup_old = (_Lookup(id_map.table.column("original_id").combine_chunks(),
                          id_map.table.column("global_nid").to_numpy()) if id_map is not None else None)
    plans = [p for p in (_sniff(f, path, lookup_old, id_type) for f, path in files) if not p.empty]
    if not plans:
        raise InputError(format_problem(f"new edges {url_of(fs, files[0][1])}", "at least one edge row",
                                        "no rows", "check the files are the right ones and not empty."))
    new = _unknown_ids(fs, plans, id_type, id_map, lookup_old, first_id)
    if id_map is None:
        _check_plain_ids(fs, plans, new, first_id)
    new_nid = np.arange(first_id, first_id + len(new), dtype=np.int64)
    lookup_new = _Lookup(new, new_nid) if id_map is not None and len(new) else None
    result.edge_files = _write_edges(fs, plans, id_type, id_map, lookup_old, lookup_new, work)
    result.new_nodes = len(new)
    if len(new):
        result.node_file = work / "nodes-00000.parquet"
        _node_rows(result.node_file, first_id, len(new), feat_dim, constant)
    if id_map is not None and (len(new) or id_map.pending):
        result.grown_map = id_map.with_rows(new_nid, new)
    log.info("edge list: %d edge file(s) mapped to node ids, %d new node(s) from id %d", len(plans), len(new),
             first_id)
    return result
