"""The optional node table of the edgelist importer (csv or parquet, held in memory).

Columns:

``id``            required, integer or string, once per node
label column      optional (option ``label_column``, default ``label``): integer class
                  ids are kept, strings / booleans are mapped to ``0..C-1``; empty = -1
``split``         optional: -1/0/1/2 or train/val/test (empty = none)
``feat``          optional list column holding the whole feature vector, or else
numeric columns   every other integer, float or bool column, in table order (f0, f1, ...)
other columns     carried into the node shards as categorical (string) attributes
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv
import pyarrow.parquet as pq

import asepr.storage.importers._common as _common
from asepr.storage.errors import InputError, SchemaError, format_problem
from asepr.storage.importers._edge_text import compression_of, first_bad

__all__ = ["NodeTable", "load_node_table"]

_SPLIT_NAMES = {"train": 0, "val": 1, "valid": 1, "validation": 1, "test": 2, "": -1, "none": -1}


@dataclass
class NodeTable:
    """A checked node table, its rows sorted by ``id``."""

    url: str
    table: pa.Table
    feature_columns: list[str]
    feature_list: bool  # the features are one list column 'feat'
    feat_dim: int
    labels: np.ndarray
    classes: list | None
    label_column: str | None
    split: np.ndarray | None
    extras: list[tuple[str, pa.DataType]]

    @property
    def ids(self) -> pa.Array:
        return self.table.column("id").combine_chunks()

    def extra_columns(self, lo: int, hi: int) -> dict[str, pa.Array]:
        return {n: self.table.column(n).slice(lo, hi - lo).combine_chunks() for n, _ in self.extras}

    def features(self, lo: int, hi: int) -> np.ndarray:
        """The float32 features of rows ``lo:hi``; non-finite values raise InputError."""
        part = self.table.slice(lo, hi - lo)
        if self.feature_list:
            flat = part.column("feat").combine_chunks().flatten().to_numpy(zero_copy_only=False)
            feat = flat.astype(np.float32).reshape(hi - lo, self.feat_dim)
        elif self.feature_columns:
            feat = np.column_stack([
                part.column(c).combine_chunks().cast(pa.float64()).to_numpy(zero_copy_only=False)
                for c in self.feature_columns
            ]).astype(np.float32)
        else:
            feat = np.zeros((hi - lo, 0), dtype=np.float32)
        finite = np.isfinite(feat)
        if not finite.all():
            row = first_bad(~finite.all(axis=1))
            col = first_bad(~finite[row])
            name = "feat" if self.feature_list else self.feature_columns[col]
            raise InputError(
                format_problem(
                    f"node table {self.url}, column '{name}'",
                    "finite numeric features (no empty, NaN or inf values)",
                    f"{feat[row, col]} for node id {self.ids[lo + row].as_py()!r}",
                    "impute or zero the missing values.",
                )
            )
        return feat


def _read(fs, path: str, url: str) -> pa.Table:
    try:
        if path.endswith(".parquet") or fs.isdir(path):
            return pq.read_table(path, filesystem=fs)
        compression = compression_of(path)
        with fs.open(path, "rb", compression=compression) as fh:
            first = fh.readline().decode("utf-8", errors="replace")
        delimiter = next((d for d in ("\t", ",", ";") if d in first), ",")
        with fs.open(path, "rb", compression=compression) as fh:
            return pacsv.read_csv(
                fh,
                parse_options=pacsv.ParseOptions(delimiter=delimiter),
                convert_options=pacsv.ConvertOptions(strings_can_be_null=True),
            )
    except (pa.ArrowInvalid, OSError, EOFError) as exc:
        raise InputError(
            format_problem(f"node table {url}", "a readable csv or parquet file with a header",
                           f"a read error ({exc})", "check the file is complete.")
        ) from exc


def _split_codes(column: pa.ChunkedArray, where: str) -> np.ndarray:
    column = column.combine_chunks()
    if pa.types.is_integer(column.type):
        codes = column.fill_null(-1).to_numpy(zero_copy_only=False).astype(np.int64)
        bad = ~np.isin(codes, [-1, 0, 1, 2])
        found = repr(int(codes[first_bad(bad)])) if bad.any() else ""
    elif pa.types.is_string(column.type) or pa.types.is_large_string(column.type):
        text = [("" if v is None else v.strip().lower()) for v in column.to_pylist()]
        codes = np.array([_SPLIT_NAMES.get(t, -9) for t in text], dtype=np.int64)
        bad = codes == -9
        found = repr(text[first_bad(bad)]) if bad.any() else ""
    else:
        bad, found, codes = np.ones(1, dtype=bool), f"dtype {column.type}", None
    if bad.any():
        raise InputError(
            format_problem(where, "split codes -1/0/1/2 or train/val/test (empty = none)", found,
                           "recode the split column.")
        )
    return codes.astype(np.int8)


def _checked_ids(table: pa.Table, url: str, integer_ids: bool) -> pa.Table:
    """Cast ``id`` to int64 or string (string when the edges disagree), reject nulls."""
    names = table.column_names
    if "id" not in names:
        raise SchemaError(
            format_problem(f"node table {url}", "a node id column named 'id'",
                           f"only the columns {names}", "name the id column 'id'.")
        )
    id_type = table.schema.field("id").type
    if pa.types.is_dictionary(id_type) or pa.types.is_large_string(id_type):
        target = pa.string()
    elif pa.types.is_integer(id_type):
        target = pa.int64()
    elif pa.types.is_string(id_type):
        target = pa.string()
    else:
        raise SchemaError(
            format_problem(f"node table {url}, column 'id'", "integer or string ids",
                           f"dtype {id_type}", "store the ids as integers or strings.")
        )
    if pa.types.is_integer(target) != integer_ids:
        target = pa.string()  # one side has non-integer ids: match them as strings
    if target != id_type:
        table = table.set_column(names.index("id"), "id", table.column("id").cast(target))
    if table.column("id").null_count:
        row = first_bad(table.column("id").is_null().to_numpy(zero_copy_only=False))
        raise InputError(
            format_problem(f"node table {url}, column 'id', data row {row + 1}", "a node id",
                           "an empty value", "fill it in or drop the row.")
        )
    return table


def load_node_table(
    node_table: str | Path,
    storage_options: dict | None,
    label_column: str | None,
    edge_id_type: pa.DataType,
) -> NodeTable:
    """Read, check and sort (by id) the node table.

    ``edge_id_type`` is the id type pass 1 found in the edge files; the table's ids are
    cast to strings when one side has integer ids and the other has not.
    """
    fs, path, url = _common.resolve_src(node_table, storage_options, "node table")
    table = _checked_ids(_read(fs, path, url), url, pa.types.is_integer(edge_id_type))
    table = table.take(pc.sort_indices(table.column("id")))
    ids = table.column("id").combine_chunks()
    if len(ids) > 1:
        same = pc.equal(ids.slice(1), ids.slice(0, len(ids) - 1)).to_numpy(zero_copy_only=False)
        if same.any():
            raise InputError(
                format_problem(f"node table {url}, column 'id'", "each node id once",
                               f"id {ids[first_bad(same) + 1].as_py()!r} more than once",
                               "keep one row per node.")
            )
    names = table.column_names

    explicit = label_column is not None
    label_column = label_column if explicit else "label"
    if label_column not in names:
        if explicit:
            raise SchemaError(
                format_problem(f"node table {url}, option label_column", f"a column named '{label_column}'",
                               f"only the columns {names}", "pass one of those as --label-column.")
            )
        label_column = None
    if label_column is not None:
        labels, classes = _common.encode_labels(
            table.column(label_column), f"node table {url}, column '{label_column}'"
        )
    else:
        labels, classes = np.full(len(ids), -1, dtype=np.int64), None
    split = _split_codes(table.column("split"), f"node table {url}, column 'split'") if "split" in names else None

    feature_columns, extras, feature_list = [], [], False
    for field in table.schema:
        t = field.type
        if field.name in ("id", "split", label_column):
            continue
        if pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_boolean(t):
            feature_columns.append(field.name)
        elif field.name == "feat":
            if not (pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t)):
                raise SchemaError(
                    format_problem(f"node table {url}, column 'feat'", "a list of numbers per node",
                                   f"dtype {t}", "rename the column, or store the features as a list.")
                )
            feature_list = True
        else:
            extras.append((field.name, pa.string()))
    if feature_list and feature_columns:
        raise SchemaError(
            format_problem(f"node table {url}", "features either in a 'feat' list column or in numeric columns",
                           f"both 'feat' and {feature_columns[:5]}", "keep one of the two layouts.")
        )
    if feature_list:
        feat = table.column("feat").combine_chunks()
        lengths = pc.list_value_length(feat).fill_null(-1).to_numpy(zero_copy_only=False)
        if len(lengths) and lengths.min() != lengths.max():
            raise InputError(
                format_problem(f"node table {url}, column 'feat'", "one feature list of the same length per node",
                               f"lengths from {lengths.min()} to {lengths.max()} (-1 = empty)",
                               "pad the vectors to one length.")
            )
        feat_dim = int(lengths[0]) if len(lengths) else 0
    else:
        feat_dim = len(feature_columns)
    for name, dtype in extras:
        try:
            column = table.column(name).cast(dtype)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
            raise SchemaError(
                format_problem(f"node table {url}, column '{name}'",
                               "numbers (features) or text (categorical attributes)",
                               f"dtype {table.schema.field(name).type}", "drop or convert the column.")
            ) from exc
        table = table.set_column(table.column_names.index(name), name, column)
    return NodeTable(url, table, feature_columns, feature_list, feat_dim, labels, classes,
                     label_column, split, extras)
