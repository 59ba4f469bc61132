"""Builders for small input directories used across storage tests."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq


def node_table(ids, feat, label=None, split=None, layout="fixed") -> pa.Table:
    ids = np.asarray(ids, dtype=np.int64)
    feat = np.asarray(feat, dtype=np.float32)
    n, d = feat.shape
    cols = {"id": pa.array(ids)}
    if layout == "fixed":
        cols["feat"] = pa.FixedSizeListArray.from_arrays(pa.array(feat.reshape(-1)), d)
    elif layout == "list":
        cols["feat"] = pa.array([row.tolist() for row in feat], type=pa.list_(pa.float32()))
    elif layout == "columns":
        for j in range(d):
            cols[f"f{j}"] = pa.array(feat[:, j])
    if label is not None:
        cols["label"] = pa.array(np.asarray(label, dtype=np.int64))
    if split is not None:
        cols["split"] = pa.array(np.asarray(split, dtype=np.int8))
    return pa.table(cols)


def edge_table(src, dst, **extra) -> pa.Table:
    cols = {"src": pa.array(np.asarray(src, dtype=np.int64)), "dst": pa.array(np.asarray(dst, dtype=np.int64))}
    cols.update({k: pa.array(v) for k, v in extra.items()})
    return pa.table(cols)


def write_input(
    root: Path,
    *,
    num_nodes: int = 60,
    num_edges: int = 300,
    dim: int = 5,
    num_classes: int = 3,
    edge_shards: int = 3,
    node_shards: int = 2,
    seed: int = 0,
    meta: dict | None = None,
    layout: str = "fixed",
) -> dict:
    """Write a valid small input directory with several shards; return its arrays."""
    rng = np.random.default_rng(seed)
    src = rng.integers(0, num_nodes, num_edges)
    dst = rng.integers(0, num_nodes, num_edges)
    feat = rng.normal(size=(num_nodes, dim)).astype(np.float32)
    label = rng.integers(0, num_classes, num_nodes)
    label[::7] = -1
    split = rng.integers(-1, 3, num_nodes)
    (root / "edges").mkdir(parents=True)
    (root / "nodes").mkdir(parents=True)
    for i, idx in enumerate(np.array_split(np.arange(num_edges), edge_shards)):
        pq.write_table(edge_table(src[idx], dst[idx]), root / "edges" / f"part-{i:05d}.parquet")
    for i, idx in enumerate(np.array_split(np.arange(num_nodes), node_shards)):
        pq.write_table(
            node_table(idx, feat[idx], label[idx], split[idx], layout=layout),
            root / "nodes" / f"part-{i:05d}.parquet",
        )
    if meta is not None:
        (root / "meta.json").write_text(json.dumps({"num_classes": num_classes, **meta}))
    return {"src": src, "dst": dst, "feat": feat, "label": label, "split": split}


def _varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte, value = value & 0x7F, value >> 7
        out.append(byte | 0x80 if value else byte)
        if not value:
            return bytes(out)


def claim_rows(path: Path, rows: int, *, row_group_too: bool = False) -> None:
    """Rewrite the Thrift footer of a one-row-group Parquet file so that it claims ``rows``
    rows (``FileMetaData.num_rows``; with ``row_group_too`` the row group's ``num_rows``
    as well), leaving the pages as they are: a crafted or damaged footer.

    In Thrift's compact protocol ``num_rows`` follows field 2 in both structs, so it is
    the byte ``0x16`` (field delta 1, type i64) and the zigzag varint of the count; the
    file's first such field is ``FileMetaData.num_rows``, its last the row group's.
    """
    data = path.read_bytes()
    length = int.from_bytes(data[-8:-4], "little")
    footer = data[-8 - length:-8]
    actual = pq.ParquetFile(path).metadata.num_rows
    field = b"\x16" + _varint(actual << 1)
    at = [i for i in range(len(footer)) if footer.startswith(field, i)]
    chosen = [at[0], at[-1]] if row_group_too else at[:1]
    new = bytearray(footer)
    for i in reversed(chosen):
        new[i:i + len(field)] = b"\x16" + _varint(rows << 1)
    path.write_bytes(data[:-8 - length] + bytes(new) + len(new).to_bytes(4, "little") + b"PAR1")
    meta = pq.ParquetFile(path).metadata
    assert meta.num_rows == rows and (meta.row_group(0).num_rows == rows) == row_group_too
