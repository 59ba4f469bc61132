"""Importer for the Open Graph Benchmark's raw layout (``ogbn-*`` and ``ogbl-*`` datasets).

A dataset folder as OGB's download unpacks it (``DIR`` = ``.../ogbn_arxiv``)::

    DIR/raw/edge.csv.gz            one edge "src,dst" per line, no header
    DIR/raw/num-node-list.csv.gz   one line: the node count (one graph)
    DIR/raw/num-edge-list.csv.gz   one line: the edge count
    DIR/raw/node-feat.csv.gz       (optional) one row of d numbers per node
    DIR/raw/node-label.csv.gz      (node property) one label per node; empty or NaN: unknown
    DIR/split/<scheme>/{train,valid,test}.csv.gz
                                   node property: the node ids of each split, one per line
    DIR/split/<scheme>/{train,valid,test}.pt
                                   link property: dicts of tensors, the held-out edges and
                                   their negatives (``edge``/``edge_neg``, or
                                   ``source_node``/``target_node``/``target_node_neg``)

Written (see :mod:`asepr.storage.inputs.writer`)::

    OUT/edges/part-*.parquet       the edges of edge.csv.gz, in order (for a link dataset
                                   these are OGB's training edges)
    OUT/nodes/part-*.parquet       id 0..N-1, feat (float32), label, split (the published
                                   split; none for a link dataset)
    OUT/ogb-valid.parquet, ogb-test.parquet
                                   link property: the held-out positives ``src, dst`` and,
                                   per source, its negatives ``dst_neg`` (list<int64>) when
                                   OGB gives them per edge
    OUT/ogb-valid-neg.parquet, ogb-test-neg.parquet
                                   link property: OGB's shared negative edges ``src, dst``
    OUT/meta.json                  ogb {name, task, scheme, eval_metric, eval_tables}

The CSVs are streamed block by block (:data:`BLOCK_BYTES` of text at a time) and written
shard by shard: memory holds the labels and the split (O(N)) and one block. The held-out
edge sets of a link dataset are read whole (they are torch files); the training split
file is not read, its edges being those of ``edge.csv.gz``. An undirected OGB graph
(``add_inverse_edge`` in OGB's catalogue: products, proteins, ppa, collab, ddi) stores
each edge once, as asepr's undirected inputs do; ``undirected`` overrides the catalogue.
"""

from __future__ import annotations

import gzip
import logging
from pathlib import Path
from typing import Any, Unpack

import numpy as np
import pyarrow as pa
import pyarrow.csv as pacsv

import asepr.storage.importers._common as _common
from asepr.storage.errors import InputError, InputNotFoundError, SchemaError, format_problem
from asepr.storage.importers.target import CommonOptions, ImportTarget
from asepr.storage.inputs.schema import SPLIT_NONE, SPLIT_TEST, SPLIT_TRAIN, SPLIT_VAL
from asepr.storage.inputs.writer import InputWriter
from asepr.storage.integrity.claims import check_claim
from asepr.storage.locations.fs import join
from asepr.storage.resources import stage

__all__ = ["import_ogb"]

log = logging.getLogger(__name__)

FORMAT = "ogb"
#: Bytes of CSV text parsed per block.
BLOCK_BYTES = 16 << 20
#: OGB's catalogue (its master.csv): graphs whose loader adds the reverse of every edge,
#: and each dataset's evaluation metric.
UNDIRECTED = {"ogbn-products", "ogbn-proteins", "ogbl-ppa", "ogbl-collab", "ogbl-ddi"}
EVAL_METRIC = {"ogbn-products": "acc", "ogbn-arxiv": "acc", "ogbn-papers100M": "acc", "ogbn-proteins": "rocauc",
               "ogbl-ppa": "hits@100", "ogbl-collab": "hits@50", "ogbl-ddi": "hits@20", "ogbl-citation2": "mrr"}
SPLITS = (("train", SPLIT_TRAIN), ("valid", SPLIT_VAL), ("test", SPLIT_TEST))


def _csv_blocks(fs, path: str, url: str, columns: int, dtype: pa.DataType):
    """Record batches of a headerless gzip CSV of ``columns`` columns, block by block."""
    types = {f"f{i}": dtype for i in range(columns)}
    fh = fs.open(path, "rb")
    try:
        stream = pa.CompressedInputStream(pa.PythonFile(fh, mode="r"), "gzip")
        reader = pacsv.open_csv(
            stream, read_options=pacsv.ReadOptions(autogenerate_column_names=True, block_size=BLOCK_BYTES),
            parse_options=pacsv.ParseOptions(ignore_empty_lines=False),  # an empty label is a row
            convert_options=pacsv.ConvertOptions(column_types=types))
        if len(reader.schema) != columns:
            raise SchemaError(format_problem(f"file {url}", f"{columns} column(s) per line",
                                             f"{len(reader.schema)}", "the file is not OGB's raw layout."))
        for batch in reader:
            if pa.types.is_integer(dtype) and any(c.null_count for c in batch.columns):
                raise InputError(format_problem(f"file {url}", "a node id or count in every field",
                                                "an empty field",
                                                "the file is corrupt or truncated; download the dataset again."))
            yield batch
    except (pa.ArrowInvalid, OSError, EOFError) as exc:
        raise InputError(format_problem(f"file {url}", f"gzip CSV rows of {columns} {dtype} value(s)",
                                        f"{type(exc).__name__}: {exc}",
                                        "the file is corrupt or truncated; download the dataset again.")) from exc
    finally:
        fh.close()


def _width(fs, path: str, url: str) -> int:
    """The number of columns on the first line of a gzip CSV."""
    try:
        with fs.open(path, "rb") as fh, gzip.open(fh, "rt") as text:
            line = text.readline()
    except (OSError, EOFError) as exc:
        raise InputError(format_problem(f"file {url}", "a gzip CSV", f"{type(exc).__name__}: {exc}",
                                        "the file is corrupt; download the dataset again.")) from exc
    return len(line.strip().split(",")) if line.strip() else 0


def _column(fs, path: str, url: str, dtype: pa.DataType) -> np.ndarray:
    """The one column of a small headerless gzip CSV (counts, labels, split ids); an empty
    file is an empty column."""
    if not _width(fs, path, url):
        return np.empty(0, dtype=dtype.to_pandas_dtype())
    parts = [b.column(0).to_numpy(zero_copy_only=False) for b in _csv_blocks(fs, path, url, 1, dtype)]
    return np.concatenate(parts) if parts else np.empty(0, dtype=dtype.to_pandas_dtype())


def _count(fs, raw: str, name: str) -> int:
    path = join(raw, name)
    url = _need(fs, path, "the graph's size")
    values = _column(fs, path, url, pa.int64())
    if len(values) != 1 or values[0] < 0:
        raise SchemaError(format_problem(
            f"file {url}", "one line with one non-negative count (a single graph)",
            f"{len(values)} line(s)" if len(values) != 1 else f"{int(values[0])}",
            "asepr imports OGB's single-graph datasets (ogbn-*, ogbl-*), not graph-property ones."))
    return int(values[0])


def _need(fs, path: str, what: str) -> str:
    if not fs.exists(path):
        raise InputNotFoundError(format_problem(
            f"OGB dataset file {path}", f"the file ({what})", "nothing at that path",
            "point at the dataset folder (the one holding raw/ and split/), unpacked from OGB's zip."))
    return path


def _scheme(fs, path: str, scheme: str | None) -> tuple[str, str]:
    """``(scheme, "node" | "link")`` of ``DIR/split/<scheme>``."""
    root = join(path, "split")
    found = sorted(p.rstrip("/").rpartition("/")[2] for p in fs.ls(root, detail=False)
                   if fs.isdir(p)) if fs.isdir(root) else []
    if scheme is None and len(found) != 1:
        raise InputError(format_problem(
            f"OGB dataset {path}, folder split/", "exactly one split scheme, or the option split_scheme",
            f"{', '.join(found) or 'none'}", "pass --split-scheme NAME (one of the folders under split/)."))
    scheme = scheme if scheme is not None else found[0]
    if scheme not in found:
        raise InputNotFoundError(format_problem(
            f"OGB dataset {path}, folder split/{scheme}", "a split scheme folder", f"schemes {found}",
            "pass one of the folders under split/ as --split-scheme."))
    folder = join(root, scheme)
    if all(fs.exists(join(folder, f"{s}.csv.gz")) for s, _ in SPLITS):
        return scheme, "node"
    if all(fs.exists(join(folder, f"{s}.pt")) for s in ("valid", "test")):
        return scheme, "link"
    raise SchemaError(format_problem(
        f"OGB dataset {path}, folder split/{scheme}",
        "train/valid/test.csv.gz (node property) or valid/test.pt (link property)",
        f"{sorted(p.rpartition('/')[2] for p in fs.ls(folder, detail=False))}",
        "the folder is not OGB's layout; unpack the dataset's zip again."))


def _labels(fs, raw: str, n: int) -> np.ndarray:
    """Labels (int64, -1 unknown) of ``node-label.csv.gz``, or all -1 without it."""
    path = join(raw, "node-label.csv.gz")
    if not fs.exists(path):
        return np.full(n, -1, dtype=np.int64)
    width = _width(fs, path, path)
    if width != 1:
        raise SchemaError(format_problem(
            f"file {path}", "one label per node (a single task)", f"{width} columns",
            "multi-task labels (ogbn-proteins) are not importable; asepr trains one label."))
    values = _column(fs, path, path, pa.float64())
    if len(values) != n:
        raise SchemaError(format_problem(f"file {path}", f"{n} lines (one per node)", f"{len(values)}",
                                         "the file does not belong to this graph."))
    known = ~np.isnan(values)
    if (values[known] < 0).any() or (values[known] != np.round(values[known])).any():
        raise InputError(format_problem(f"file {path}", "non-negative integer class ids",
                                        "a negative or fractional value", "the file is corrupt."))
    return np.where(known, values, -1).astype(np.int64)


def _node_split(fs, folder: str, n: int) -> np.ndarray:
    split = np.full(n, SPLIT_NONE, dtype=np.int8)
    for name, code in SPLITS:
        path = join(folder, f"{name}.csv.gz")
        ids = _column(fs, path, path, pa.int64())
        _common.check_ids(ids, n, f"file {path}", row_base=1)
        if (split[ids] != SPLIT_NONE).any() or len(np.unique(ids)) != len(ids):
            raise InputError(format_problem(f"file {path}", "node ids in no other split, each once",
                                            "a node listed twice", "the split files do not belong together."))
        split[ids] = code
    return split


def _load_pt(path: str, fs) -> dict:
    import torch  # a link dataset's held-out sets are torch files

    try:
        with fs.open(path, "rb") as fh:
            obj = torch.load(fh, weights_only=True, map_location="cpu")
    except Exception as exc:  # noqa: BLE001 - unpickling refused or a damaged file
        raise InputError(format_problem(f"file {path}", "a torch file of tensors (weights_only)",
                                        f"{type(exc).__name__}: {exc}",
                                        "the file is damaged or not OGB's; download the dataset again.")) from exc
    if not isinstance(obj, dict):
        raise SchemaError(format_problem(f"file {path}", "a dict of tensors", type(obj).__name__))
    return {k: np.asarray(v.numpy() if hasattr(v, "numpy") else v) for k, v in obj.items()}


def _pairs(arr: np.ndarray, path: str, key: str, n: int) -> np.ndarray:
    if arr.ndim != 2 or arr.shape[1] != 2:
        raise SchemaError(format_problem(f"file {path}, entry {key}", "an [k, 2] array of node ids",
                                         f"shape {arr.shape}", "the file is not OGB's layout."))
    arr = arr.astype(np.int64)
    _common.check_ids(arr.reshape(-1), n, f"file {path}, entry {key}")
    return arr


def _eval_tables(fs, folder: str, n: int) -> dict[str, pa.Table]:
    """The link property's held-out sets as tables, by side-file name."""
    tables = {}
    for name in ("valid", "test"):
        path = join(folder, f"{name}.pt")
        d = _load_pt(path, fs)
        if "edge" in d and "edge_neg" in d:
            pos, neg = _pairs(d["edge"], path, "edge", n), _pairs(d["edge_neg"], path, "edge_neg", n)
            tables[f"ogb-{name}.parquet"] = pa.table({"src": pos[:, 0], "dst": pos[:, 1]})
            tables[f"ogb-{name}-neg.parquet"] = pa.table({"src": neg[:, 0], "dst": neg[:, 1]})
        elif {"source_node", "target_node", "target_node_neg"} <= set(d):
            src, dst = d["source_node"].astype(np.int64), d["target_node"].astype(np.int64)
            neg = d["target_node_neg"].astype(np.int64)
            if src.shape != dst.shape or neg.ndim != 2 or neg.shape[0] != len(src):
                raise SchemaError(format_problem(f"file {path}", "source_node, target_node [k] and target_node_neg [k, q]",
                                                 f"shapes {src.shape}, {dst.shape}, {neg.shape}", "the file is not OGB's layout."))
            for key, ids in (("source_node", src), ("target_node", dst), ("target_node_neg", neg.reshape(-1))):
                _common.check_ids(ids, n, f"file {path}, entry {key}")
            dst_neg = pa.FixedSizeListArray.from_arrays(pa.array(neg.reshape(-1)), neg.shape[1])
            tables[f"ogb-{name}.parquet"] = pa.table({"src": src, "dst": dst, "dst_neg": dst_neg})
        else:
            raise SchemaError(format_problem(
                f"file {path}", "entries edge and edge_neg, or source_node, target_node and target_node_neg",
                f"entries {sorted(d)}", "the file is not a link-property split of OGB."))
    return tables


def _write_edges(writer: InputWriter, fs, raw: str, n: int, m: int) -> None:
    path = join(raw, "edge.csv.gz")
    _need(fs, path, "the edges")
    rows = 0
    for batch in _csv_blocks(fs, path, path, 2, pa.int64()):
        src = batch.column(0).to_numpy(zero_copy_only=False)
        dst = batch.column(1).to_numpy(zero_copy_only=False)
        _common.check_ids(src, n, f"file {path}", row_base=rows + 1)
        _common.check_ids(dst, n, f"file {path}", row_base=rows + 1)
        writer.write_edges(src, dst)
        rows += len(src)
    if rows != m:
        raise SchemaError(format_problem(f"file {path}", f"{m:,} edges (num-edge-list.csv.gz)", f"{rows:,}",
                                         "the files do not belong together; unpack the dataset again."))


def _write_nodes(writer: InputWriter, fs, raw: str, n: int, d: int, labels: np.ndarray, split: np.ndarray) -> None:
    path = join(raw, "node-feat.csv.gz")
    start = 0
    if d:
        for batch in _csv_blocks(fs, path, path, d, pa.float32()):
            k = batch.num_rows
            if start + k > n:
                break
            feat = np.column_stack([c.to_numpy(zero_copy_only=False) for c in batch.columns])
            if not np.isfinite(feat).all():
                raise InputError(format_problem(f"file {path}", "finite feature values",
                                                f"NaN or inf in rows {start + 1:,}-{start + k:,}",
                                                "the file is corrupt; download the dataset again."))
            ids = np.arange(start, start + k, dtype=np.int64)
            writer.write_nodes(ids, feat, labels[ids], split[ids])
            start += k
        if start != n:
            raise SchemaError(format_problem(f"file {path}", f"{n:,} rows (one per node)",
                                             f"{start:,} or more", "the file does not belong to this graph."))
        return
    step = max(1, writer.node_shard_rows)
    for lo in range(0, n, step):
        ids = np.arange(lo, min(n, lo + step), dtype=np.int64)
        writer.write_nodes(ids, np.zeros((len(ids), 0), dtype=np.float32), labels[ids], split[ids])


def import_ogb(src: str | Path, out: str | Path, *, name: str | None = None, split_scheme: str | None = None,
               undirected: bool | None = None, **common: Unpack[CommonOptions]) -> dict[str, Any]:
    """Import an OGB node- or link-property dataset folder (see the module docstring) and
    return the committed ``meta.json``.

    Parameters
    ----------
    src
        The dataset folder (holding ``raw/`` and ``split/``).
    out, **common
        The input directory to write, and the options every importer takes
        (:class:`~asepr.storage.importers.target.ImportTarget`); ``seed``: unused: OGB publishes
        its splits.
    name
        Dataset name; default the folder's name with ``_`` read as ``-`` (``ogbn-arxiv``).
    split_scheme
        The folder under ``split/``; needed only when there are several.
    undirected
        Whether each edge stands for both directions; default from OGB's catalogue
        (:data:`UNDIRECTED`), False for a dataset it does not list.
    """
    target = ImportTarget.of(out, common)
    fs, path, url = target.source(src, "OGB dataset folder")
    dataset = _common.dataset_name(path, name) if name is not None else path.rstrip("/").rpartition("/")[2].replace("_", "-")
    undirected = _common.bool_option(undirected, "undirected", dataset in UNDIRECTED)
    raw = join(path, "raw")
    _need(fs, join(raw, "edge.csv.gz"), "the edges")
    with stage(f"import {FORMAT} {url}", log) as info:
        n, m = _count(fs, raw, "num-node-list.csv.gz"), _count(fs, raw, "num-edge-list.csv.gz")
        # Labels (int64), split (int8) and node ids (int64) are held per node while importing.
        check_claim(n, 17, where=f"file {join(raw, 'num-node-list.csv.gz')}", claim="a node count",
                    fix="the file does not belong to this dataset or was altered; unpack OGB's zip again.")
        scheme, task = _scheme(fs, path, split_scheme)
        folder = join(join(path, "split"), scheme)
        labels = _labels(fs, raw, n)
        split = _node_split(fs, folder, n) if task == "node" else np.full(n, SPLIT_NONE, dtype=np.int8)
        tables = _eval_tables(fs, folder, n) if task == "link" else {}
        feat_path = join(raw, "node-feat.csv.gz")
        d = _width(fs, feat_path, feat_path) if fs.exists(feat_path) else 0
        with target.writer(d) as writer:
            _write_edges(writer, fs, raw, n, m)
            _write_nodes(writer, fs, raw, n, d, labels, split)
            for side, table in tables.items():
                writer.write_table(side, table)
            meta = writer.commit({
                "name": dataset,
                "undirected": bool(undirected),
                "num_classes": _common.num_classes_of(labels),
                "source": {"format": FORMAT, "path": str(src), "folder": url},
                "split": {"kind": "published", "scheme": scheme} if task == "node" else {"kind": "none"},
                "ogb": {"name": dataset, "task": task, "scheme": scheme, "eval_metric": EVAL_METRIC.get(dataset),
                        "eval_tables": sorted(tables)},
            })
        info.update(nodes=meta["num_nodes"], edges=meta["num_edges"])
    return meta
