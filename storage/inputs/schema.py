"""The input format: column names, dtypes and how node features are laid out.

Edges (``edges/*.parquet``)::

    src     int64     required, 0 <= src < N
    dst     int64     required, 0 <= dst < N
    weight  float32   optional, finite
    ts      int64     optional

Nodes (``nodes/*.parquet``), one row per node, ids dense ``0..N-1``::

    id      int64                         required
    feat    fixed_size_list<float32>[d]   required, one of three layouts:
            | list<float32> (every row d long)
            | columns f0 .. f{d-1} float32
    label   int64     optional (absent means all -1), -1 = unknown, else 0 <= label < C
    split   int8      optional (absent means all -1): 0 train, 1 val, 2 test, -1 none
    <other> any       optional categorical attribute columns (``category``, ``dept``, ...)
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from asepr.storage.errors import SchemaError, format_problem

__all__ = [
    "FORMAT_VERSION",
    "META_NAME",
    "EDGE_REQUIRED",
    "EDGE_OPTIONAL",
    "NODE_OPTIONAL",
    "SPLIT_NONE",
    "SPLIT_TRAIN",
    "SPLIT_VAL",
    "SPLIT_TEST",
    "FeatureLayout",
    "check_edge_schema",
    "check_node_schema",
    "feature_matrix",
    "node_schema",
    "EDGE_SCHEMA",
]

META_NAME = "meta.json"
FORMAT_VERSION = 1

EDGE_REQUIRED = {"src": pa.int64(), "dst": pa.int64()}
EDGE_OPTIONAL = {"weight": pa.float32(), "ts": pa.int64()}
NODE_OPTIONAL = {"label": pa.int64(), "split": pa.int8()}
EDGE_SCHEMA = pa.schema([("src", pa.int64()), ("dst", pa.int64())])

SPLIT_NONE, SPLIT_TRAIN, SPLIT_VAL, SPLIT_TEST = -1, 0, 1, 2

_FCOL = re.compile(r"^f(\d+)$")


def node_schema(dim: int, extra: list[tuple[str, pa.DataType]] = ()) -> pa.Schema:
    """The canonical node schema that importers and the generator write."""
    return pa.schema(
        [
            ("id", pa.int64()),
            ("feat", pa.list_(pa.float32(), dim)),
            ("label", pa.int64()),
            ("split", pa.int8()),
            *extra,
        ]
    )


@dataclass(frozen=True)
class FeatureLayout:
    """How a node file stores its feature vectors.

    ``kind`` is ``"fixed"`` (``feat`` is a fixed-size list), ``"list"`` (``feat`` is a
    variable list that must still be ``dim`` long everywhere; ``dim`` is None until a
    row is seen) or ``"columns"`` (``f0..f{dim-1}``).
    """

    kind: str
    dim: int | None
    columns: tuple[str, ...]


def _dtype_problem(url: str, column: str, expected: pa.DataType, found: pa.DataType) -> SchemaError:
    return SchemaError(
        format_problem(
            f"{url}, column '{column}'",
            f"dtype {expected}",
            f"dtype {found}",
            f"cast the column before writing, e.g. pyarrow `table.set_column(..., "
            f"'{column}', table['{column}'].cast(pa.{expected}()))`, or use `asepr import`.",
        )
    )


def _missing_problem(url: str, column: str, found: list[str], hint: str) -> SchemaError:
    return SchemaError(
        format_problem(
            f"{url}, column '{column}'",
            f"a column named '{column}'",
            f"only the columns {found}",
            hint,
        )
    )


def check_edge_schema(schema: pa.Schema, url: str) -> list[str]:
    """Check an edge file's schema; return the columns to read."""
    names = list(schema.names)
    for column, dtype in EDGE_REQUIRED.items():
        if column not in names:
            raise _missing_problem(
                url, column, names, "name the endpoint columns 'src' and 'dst' (int64)."
            )
        if schema.field(column).type != dtype:
            raise _dtype_problem(url, column, dtype, schema.field(column).type)
    columns = list(EDGE_REQUIRED)
    for column, dtype in EDGE_OPTIONAL.items():
        if column in names:
            if schema.field(column).type != dtype:
                raise _dtype_problem(url, column, dtype, schema.field(column).type)
            columns.append(column)
    return columns


def check_node_schema(schema: pa.Schema, url: str) -> tuple[FeatureLayout, list[str], list[str]]:
    """Check a node file's schema.

    Returns
    -------
    layout
        The feature layout.
    present
        The optional columns (``label``, ``split``) that are present.
    categorical
        Other columns, taken as categorical attributes.
    """
    names = list(schema.names)
    if "id" not in names:
        raise _missing_problem(url, "id", names, "add an int64 'id' column (dense 0..N-1).")
    if schema.field("id").type != pa.int64():
        raise _dtype_problem(url, "id", pa.int64(), schema.field("id").type)

    fcols = sorted(
        ((int(m.group(1)), n) for n in names if (m := _FCOL.match(n))), key=lambda t: t[0]
    )
    if "feat" in names:
        ftype = schema.field("feat").type
        if pa.types.is_fixed_size_list(ftype) and ftype.value_type == pa.float32():
            layout = FeatureLayout("fixed", ftype.list_size, ("feat",))
        elif (pa.types.is_list(ftype) or pa.types.is_large_list(ftype)) and ftype.value_type == pa.float32():
            layout = FeatureLayout("list", None, ("feat",))
        else:
            raise SchemaError(
                format_problem(
                    f"{url}, column 'feat'",
                    "fixed_size_list<float32>[d] or list<float32>",
                    f"dtype {ftype}",
                    "cast the features to float32 vectors, e.g. "
                    "`pa.FixedSizeListArray.from_arrays(flat.astype('float32'), d)`.",
                )
            )
        used = {"feat"}
    elif fcols:
        indices = [i for i, _ in fcols]
        if indices != list(range(len(indices))):
            missing = sorted(set(range(max(indices) + 1)) - set(indices))[:5]
            raise SchemaError(
                format_problem(
                    f"{url}, feature columns f0..f{max(indices)}",
                    "contiguous columns f0..f{d-1}",
                    f"gaps, e.g. no column {', '.join(f'f{i}' for i in missing)}",
                    "add the missing columns or renumber them.",
                )
            )
        for _, name in fcols:
            if schema.field(name).type != pa.float32():
                raise _dtype_problem(url, name, pa.float32(), schema.field(name).type)
        layout = FeatureLayout("columns", len(fcols), tuple(n for _, n in fcols))
        used = set(layout.columns)
    else:
        raise _missing_problem(
            url,
            "feat",
            names,
            "store features as a 'feat' fixed_size_list<float32> column, or as "
            "float32 columns f0..f{d-1}.",
        )

    present = []
    for column, dtype in NODE_OPTIONAL.items():
        if column in names:
            if schema.field(column).type != dtype:
                raise _dtype_problem(url, column, dtype, schema.field(column).type)
            present.append(column)
    categorical = [n for n in names if n not in used and n != "id" and n not in NODE_OPTIONAL]
    return layout, present, categorical


def feature_matrix(batch: pa.RecordBatch, layout: FeatureLayout) -> np.ndarray:
    """The ``[n, d]`` float32 feature matrix of a batch (zero-copy where possible).

    The caller has checked the schema; this only reshapes. For the ``list`` layout it
    returns a matrix only when every row has the same length; otherwise it raises
    ``ValueError`` with the offending lengths (the validator turns that into a message).
    """
    n = batch.num_rows
    if layout.kind == "columns":
        if not layout.columns:
            return np.zeros((n, 0), dtype=np.float32)
        return np.column_stack(
            [batch.column(c).to_numpy(zero_copy_only=False) for c in layout.columns]
        ).astype(np.float32, copy=False)
    column = batch.column("feat")
    if column.null_count:
        raise ValueError(f"{column.null_count} null feature vectors")
    if layout.kind == "fixed":
        flat = column.flatten().to_numpy(zero_copy_only=False)
        return flat.reshape(n, layout.dim)
    offsets = column.offsets.to_numpy()
    lengths = np.diff(offsets)
    if n and (lengths.min() != lengths.max()):
        raise ValueError(f"row lengths vary from {lengths.min()} to {lengths.max()}")
    width = int(lengths[0]) if n else (layout.dim or 0)
    flat = column.flatten().to_numpy(zero_copy_only=False)
    return flat.reshape(n, width)
