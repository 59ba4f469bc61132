"""Writing (and reading the metadata of) an asepr input directory.

Layout written by :class:`InputWriter`::

    OUT/
      edges/part-00000.parquet ...   src int64, dst int64 [, weight float32, ts int64]
      nodes/part-00000.parquet ...   id int64, feat fixed_size_list<float32>[d],
                                     label int64, split int8 [, categorical columns]
      meta.json                      name, num_nodes, num_edges, feat_dim, num_classes,
                                     undirected, split recipe and seed, source, shard lists
      <side files>                   label_map.json, id_map.parquet, ... (importer-specific)

Shards hold at most ``shard_rows`` rows; node shards are also capped at about
``shard_bytes`` of feature data, so a 8,000-dimensional feature matrix still streams
in bounded pieces. Everything is written under a hidden staging directory and renamed
into place by :meth:`InputWriter.commit`; a failed run leaves no ``OUT``.
"""

from __future__ import annotations

import contextlib
import json
import logging
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from asepr.storage.commit.atomic import staged_output
from asepr.storage.errors import AseprError, InputError, format_problem
from asepr.storage.inputs.schema import FORMAT_VERSION, META_NAME, node_schema
from asepr.storage.integrity.validate import validate_input
from asepr.storage.locations.fs import join, resolve, url_of
from asepr.storage.progress import advance

__all__ = ["InputWriter"]

log = logging.getLogger(__name__)

_COMPRESSION = "zstd"


class _ShardSink:
    """Rolls Parquet files ``DIR/part-NNNNN.parquet`` of at most ``max_rows`` rows."""

    def __init__(self, fs, directory: str, schema: pa.Schema, max_rows: int, row_group_rows: int):
        self.fs = fs
        self.directory = directory
        self.schema = schema
        self.max_rows = max_rows
        self.row_group_rows = max(1, min(row_group_rows, max_rows))
        self.files: list[str] = []
        self.rows_total = 0
        self._writer: pq.ParquetWriter | None = None
        self._handle = None
        self._rows_in_file = 0

    def _open_next(self) -> None:
        self._close_current()
        name = f"part-{len(self.files):05d}.parquet"
        self._handle = self.fs.open(join(self.directory, name), "wb")
        self._writer = pq.ParquetWriter(
            self._handle, self.schema, compression=_COMPRESSION, write_statistics=True
        )
        self.files.append(name)
        self._rows_in_file = 0

    def _close_current(self) -> None:
        if self._writer is not None:
            self._writer.close()
            self._handle.close()
            self._writer = None
            self._handle = None

    def write(self, table: pa.Table) -> None:
        table = table.cast(self.schema) if table.schema != self.schema else table
        start = 0
        while start < table.num_rows:
            if self._writer is None or self._rows_in_file >= self.max_rows:
                self._open_next()
            take = min(self.max_rows - self._rows_in_file, table.num_rows - start)
            self._writer.write_table(table.slice(start, take), row_group_size=self.row_group_rows)
            self._rows_in_file += take
            self.rows_total += take
            start += take
            advance(take)

    def close(self) -> None:
        self._close_current()


class InputWriter:
    """Writes an input directory shard by shard, atomically.

    Use as a context manager; nothing is visible at ``out`` until :meth:`commit`.

    Parameters
    ----------
    out
        Output directory (path or fsspec URL).
    feat_dim
        Width ``d`` of the node feature vectors.
    shard_rows
        Maximum rows per shard file.
    shard_bytes
        Approximate cap on the uncompressed feature bytes in one node shard.
    edge_columns
        Optional edge columns to write besides ``src`` and ``dst`` (``weight``, ``ts``).
    node_extra
        Extra categorical node columns, as ``(name, pyarrow type)`` pairs.
    overwrite
        Replace an existing output directory.
    """

    def __init__(
        self,
        out: str | Path,
        *,
        feat_dim: int,
        shard_rows: int = 1_000_000,
        shard_bytes: int = 256 << 20,
        edge_columns: tuple[str, ...] = (),
        node_extra: list[tuple[str, pa.DataType]] = (),
        overwrite: bool = False,
        storage_options: dict | None = None,
    ):
        if shard_rows < 1:
            raise InputError(
                format_problem("--shard-rows", "a positive row count", str(shard_rows))
            )
        self.fs, self.path = resolve(out, storage_options)
        self.url = url_of(self.fs, self.path)
        self.feat_dim = int(feat_dim)
        self.shard_rows = int(shard_rows)
        self.overwrite = overwrite
        bytes_per_node = max(1, 4 * self.feat_dim)
        self.node_shard_rows = max(1, min(self.shard_rows, shard_bytes // bytes_per_node))
        node_rg = max(1, min(self.node_shard_rows, (16 << 20) // bytes_per_node))
        edge_fields = [("src", pa.int64()), ("dst", pa.int64())]
        extra_types = {"weight": pa.float32(), "ts": pa.int64()}
        edge_fields += [(c, extra_types[c]) for c in edge_columns]
        self._edge_schema = pa.schema(edge_fields)
        self._node_schema = node_schema(self.feat_dim, list(node_extra))
        self._edge_rg = min(self.shard_rows, 1 << 20)
        self._node_rg = node_rg
        self._stack: contextlib.ExitStack | None = None
        self.staging: str | None = None
        self._edges: _ShardSink | None = None
        self._nodes: _ShardSink | None = None
        self._committed = False

    # -- context management -------------------------------------------------------
    def __enter__(self) -> "InputWriter":
        self._stack = contextlib.ExitStack()
        self.staging = self._stack.enter_context(
            staged_output(self.fs, self.path, overwrite=self.overwrite)
        )
        self.fs.makedirs(join(self.staging, "edges"), exist_ok=True)
        self.fs.makedirs(join(self.staging, "nodes"), exist_ok=True)
        self._edges = _ShardSink(
            self.fs, join(self.staging, "edges"), self._edge_schema, self.shard_rows, self._edge_rg
        )
        self._nodes = _ShardSink(
            self.fs, join(self.staging, "nodes"), self._node_schema, self.node_shard_rows, self._node_rg
        )
        return self

    def __exit__(self, exc_type, exc, tb) -> bool:
        for sink in (self._edges, self._nodes):
            if sink is not None:
                with contextlib.suppress(Exception):
                    sink.close()
        if exc_type is None and not self._committed:
            err = InputError(
                f"output {self.url}: the writer was closed without commit(); nothing was written."
            )
            self._stack.__exit__(InputError, err, None)
            raise err
        return bool(self._stack.__exit__(exc_type, exc, tb))

    # -- writing --------------------------------------------------------------------
    def write_edges(self, src: np.ndarray, dst: np.ndarray, **extra: np.ndarray) -> None:
        """Append edges in stream order."""
        columns = {"src": np.asarray(src, dtype=np.int64), "dst": np.asarray(dst, dtype=np.int64)}
        for name in self._edge_schema.names[2:]:
            columns[name] = np.asarray(extra[name])
        self._edges.write(pa.table(columns, schema=self._edge_schema))

    def write_nodes(
        self,
        global_nid: np.ndarray,
        feat: np.ndarray,
        label: np.ndarray,
        split: np.ndarray,
        **extra: Any,
    ) -> None:
        """Append node rows; ``feat`` is ``[n, d]``."""
        feat = np.ascontiguousarray(feat, dtype=np.float32)
        n = len(global_nid)
        if feat.shape != (n, self.feat_dim):
            raise InputError(
                format_problem(
                    f"output {self.url}, node features",
                    f"shape ({n}, {self.feat_dim})",
                    f"shape {feat.shape}",
                )
            )
        arrays = [
            pa.array(np.asarray(global_nid, dtype=np.int64)),
            pa.FixedSizeListArray.from_arrays(pa.array(feat.reshape(-1)), self.feat_dim),
            pa.array(np.asarray(label, dtype=np.int64)),
            pa.array(np.asarray(split, dtype=np.int8)),
        ]
        for field in list(self._node_schema)[4:]:
            arrays.append(pa.array(extra[field.name], type=field.type))
        self._nodes.write(pa.Table.from_arrays(arrays, schema=self._node_schema))

    def side_path(self, name: str) -> str:
        """Path (on ``self.fs``) of a side file inside the staging directory."""
        return join(self.staging, name)

    def write_json(self, name: str, obj: Any) -> None:
        with self.fs.open(self.side_path(name), "w") as fh:
            json.dump(obj, fh, indent=2, sort_keys=True)
            fh.write("\n")

    def write_table(self, name: str, table: pa.Table) -> None:
        with self.fs.open(self.side_path(name), "wb") as fh:
            pq.write_table(table, fh, compression=_COMPRESSION)

    @property
    def num_edges(self) -> int:
        return self._edges.rows_total

    @property
    def num_nodes(self) -> int:
        return self._nodes.rows_total

    def close_shards(self) -> None:
        """Finish the shard files (so they can be validated before :meth:`commit`)."""
        self._edges.close()
        self._nodes.close()

    def commit(
        self, meta: dict[str, Any], *, validate: bool = True, check_duplicates: bool = True
    ) -> dict[str, Any]:
        """Close all shards, validate them, write ``meta.json`` and move into place.

        With ``validate`` the staged output goes through
        :func:`asepr.storage.integrity.validate.validate_input` first, so a bad dataset never appears
        at ``out``; the report's counts are stored under ``meta["validation"]``.
        """
        self.close_shards()
        full = {
            "format": "asepr-input",
            "format_version": FORMAT_VERSION,
            **meta,
            "num_nodes": self.num_nodes,
            "num_edges": self.num_edges,
            "feat_dim": self.feat_dim,
            "shards": {"edges": self._edges.files, "nodes": self._nodes.files},
        }
        if validate:
            staged_url = url_of(self.fs, self.staging)
            try:
                report = validate_input(
                    staged_url,
                    undirected=bool(meta.get("undirected", False)),
                    num_classes=meta.get("num_classes"),
                    check_duplicates=check_duplicates,
                    storage_options=self.fs.storage_options,
                )
            except AseprError as exc:
                # Name the output the user asked for, not the hidden staging directory.
                message = str(exc).replace(staged_url, self.url)
                raise type(exc)(f"{message} (the output was not written)") from exc
            full["validation"] = {
                "self_loops": report.self_loops,
                "duplicate_edges": report.duplicate_edges,
                "isolated_nodes": report.isolated_nodes,
                "max_degree": report.max_degree,
                "labelled_nodes": report.labelled_nodes,
                "label_counts": report.label_counts,
                "split_counts": report.split_counts,
                "warnings": report.warnings,
            }
        self.write_json(META_NAME, full)
        self._committed = True
        return full
