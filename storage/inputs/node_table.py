"""The validator's decoded copy of the node table, for the stages that read the nodes again.

A partition run reads the node shards three more times after validating them: a sample
and a labelling pass for attribute clustering, and the gather of every partition's
node rows. Each of those decodes the feature column again (ZSTD, list offsets), and the
gather spills every replicated row to disk once more before a partition's store is
written. The validator decodes every row anyway, so it writes the checked rows into
three raw files indexed by node id (:class:`NodeTableWriter`):

- ``nodes.x``: ``float32 [N, d]``, row ``i`` is node ``i``'s features;
- ``nodes.y``: ``int64 [N]``, the labels (-1 where the input has no ``label`` column);
- ``nodes.split``: ``int8 [N]``, the split codes (-1 without a ``split`` column);

and, only when the shards do not list the ids as ``0, 1, ..., N-1`` in order,
``nodes.order``: ``int64 [N]``, the id of each row in shard order (row numbers are what
the k-means sample draws, so a sample picks the same rows from the copy as from the
shards).

Readers (:class:`NodeTable`) take a block of rows or gather rows by id, one window at a
time, so the resident memory is the block being read, not the table. While the batches
name runs of ids in order (``asepr synth``, most imports), the columns are written with
``O_DIRECT`` and every read uses it too where the filesystem takes it
(:mod:`asepr.storage.locations.direct_io`): the table is written once and read three times, and through
the page cache each of its pages was a fresh one. The files are written by this process
into a directory it created, opened with ``O_EXCL | O_NOFOLLOW``, and their sizes are
checked before they are read. A copy is ``4d + 9`` bytes per node on local disk; the
run removes it when it ends.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from asepr.storage.errors import StoreError, format_problem
from asepr.storage.locations.direct_io import (
    ALIGN,
    DirectWriter,
    aligned_empty,
    open_direct,
    pread_into,
    write_at,
)

__all__ = ["NODE_TABLE_ROW_EXTRA", "WINDOW_BYTES", "NodeTable", "NodeTableWriter", "node_table_bytes"]

#: Bytes per node besides the features: ``y`` (int64) and ``split`` (int8).
NODE_TABLE_ROW_EXTRA = 9
_COLUMNS = {"x": np.float32, "y": np.int64, "split": np.int8}
#: A gather maps at most this many bytes of a file at once (:meth:`NodeTable.gather`).
WINDOW_BYTES = 16 << 20


def _path(directory: str | Path, name: str) -> Path:
    return Path(directory) / f"nodes.{name}"


def node_table_bytes(num_nodes: int, feat_dim: int) -> int:
    """Bytes of a node table of N nodes and width d (without the optional order file)."""
    return num_nodes * (4 * feat_dim + NODE_TABLE_ROW_EXTRA)


def _is_run(ids: np.ndarray, first: int) -> bool:
    """Whether ``ids`` are ``first, first + 1, ...`` in order."""
    return bool(len(ids)) and int(ids[0]) == first and int(ids[-1]) == first + len(ids) - 1 \
        and bool((np.diff(ids) == 1).all())


class NodeTableWriter:
    """Writes checked node batches into a new node table in ``directory``.

    The files are created on the first batch (that fixes the width d) and sized for N
    rows. Batches may come in any order; together they must name every id once (the
    validator checks that), which :meth:`close` does not check again.
    """

    def __init__(self, directory: str | Path, num_nodes: int):
        self.directory = Path(directory)
        self.num_nodes = num_nodes
        self.feat_dim: int | None = None
        self._fds: dict[str, int] = {}
        # While batches come as runs of ids in order, each column is appended with O_DIRECT
        # (asepr.storage.locations.direct_io); the first batch that is not finishes them for good.
        self._direct: dict[str, DirectWriter] = {}
        self._order_fd: int | None = None
        self._rows = 0  # rows seen so far, in shard order

    def _create(self, name: str, nbytes: int, direct: bool = False) -> int:
        flags = os.O_RDWR | os.O_CREAT | os.O_EXCL
        if direct:
            fd, is_direct = open_direct(_path(self.directory, name), flags)
            self._direct[name] = DirectWriter(fd, is_direct)
        else:
            fd = os.open(_path(self.directory, name), flags | getattr(os, "O_NOFOLLOW", 0), 0o600)
        os.ftruncate(fd, nbytes)
        return fd

    def _open(self, feat_dim: int) -> None:
        self.feat_dim = feat_dim
        sizes = {"x": 4 * feat_dim, "y": 8, "split": 1}
        for name, width in sizes.items():
            self._fds[name] = self._create(name, self.num_nodes * width, direct=True)

    def _end_direct(self) -> None:
        """Write what the ``O_DIRECT`` writers hold; later batches go through the page cache."""
        writers, self._direct = self._direct, {}
        for writer in writers.values():
            writer.close()

    def _record_order(self, ids: np.ndarray) -> None:
        """Keep the row → id order when the shards stop listing ids as 0, 1, 2, ..."""
        first = self._rows
        self._rows += len(ids)
        if self._order_fd is None:
            if not len(ids) or _is_run(ids, first):
                return
            self._order_fd = self._create("order", self.num_nodes * 8)
            write_at(self._order_fd, np.arange(first, dtype=np.int64), 0)
        write_at(self._order_fd, ids.astype(np.int64, copy=False), first * 8)

    def add(self, ids: np.ndarray, feat: np.ndarray, label: np.ndarray | None, split: np.ndarray | None) -> None:
        """Write one batch: checked ids (in ``[0, N)``, each once), ``[b, d]`` features,
        labels and split codes (None: -1)."""
        n = len(ids)
        if not n:
            return
        if self.feat_dim is None:
            self._open(int(feat.shape[1]))
        self._record_order(ids)
        columns = {
            "x": np.asarray(feat, dtype=np.float32),
            "y": np.full(n, -1, np.int64) if label is None else np.asarray(label, dtype=np.int64),
            "split": np.full(n, -1, np.int8) if split is None else np.asarray(split, dtype=np.int8),
        }
        first = int(ids[0])
        run = _is_run(ids, first)
        if run and self._direct and all(w.offset == first * columns[name][:1].nbytes
                                        for name, w in self._direct.items()):
            for name, data in columns.items():
                self._direct[name].write(data)
            return
        self._end_direct()
        if run:
            for name, data in columns.items():
                write_at(self._fds[name], data, first * data[:1].nbytes)
            return
        for name, data in columns.items():
            dtype = _COLUMNS[name]
            shape = (self.num_nodes, self.feat_dim) if name == "x" else (self.num_nodes,)
            out = np.memmap(_path(self.directory, name), dtype=dtype, mode="r+", shape=shape)
            out[ids] = data
            out.flush()
            del out

    def close(self) -> None:
        """Close the files (a table without rows gets width 0)."""
        if self.feat_dim is None and not self._fds:
            self._open(0)
        self._end_direct()
        for fd in [*self._fds.values(), *([self._order_fd] if self._order_fd is not None else [])]:
            os.close(fd)
        self._fds, self._order_fd = {}, None


class NodeTable:
    """A node table written by :class:`NodeTableWriter`, its file sizes checked.

    Raises
    ------
    StoreError
        Naming the file: a file is missing or its size is not the one of N rows.
    """

    def __init__(self, directory: str | Path, num_nodes: int, feat_dim: int):
        self.directory = str(directory)
        self.num_nodes = num_nodes
        self.feat_dim = feat_dim
        widths = {"x": 4 * feat_dim, "y": 8, "split": 1, "order": 8}
        self.has_order = os.path.lexists(_path(directory, "order"))
        for name, width in widths.items():
            if name == "order" and not self.has_order:
                continue
            path = _path(directory, name)
            size = os.stat(path, follow_symlinks=False).st_size if os.path.lexists(path) else -1
            if size != num_nodes * width:
                raise StoreError(format_problem(
                    f"decoded node table {path}", f"{num_nodes * width:,} bytes ({num_nodes:,} nodes)",
                    "no file" if size < 0 else f"{size:,} bytes", "rerun the command: the copy is rewritten."))

    def _read(self, name: str, start: int, stop: int) -> np.ndarray:
        dtype = np.dtype(_COLUMNS.get(name, np.int64))
        row_bytes = dtype.itemsize * (self.feat_dim if name == "x" else 1)
        fd, _ = open_direct(_path(self.directory, name), os.O_RDONLY)
        try:
            data = pread_into(fd, start * row_bytes, (stop - start) * row_bytes)
        finally:
            os.close(fd)
        if len(data) != (stop - start) * row_bytes:
            raise StoreError(format_problem(
                f"decoded node table {_path(self.directory, name)}", f"rows {start:,}..{stop - 1:,}",
                f"{len(data):,} of their {(stop - start) * row_bytes:,} bytes",
                "rerun the command: the copy is rewritten."))
        out = data.view(dtype)
        return out.reshape(-1, self.feat_dim) if name == "x" else out

    def rows(self, start: int, stop: int) -> np.ndarray:
        """``float32 [stop - start, d]``: the features of ids ``start..stop-1``."""
        return self._read("x", start, stop)

    def column(self, name: str, start: int = 0, stop: int | None = None) -> np.ndarray:
        """The ``y`` or ``split`` column of ids ``start..stop-1`` (default: all, O(N))."""
        return self._read(name, start, self.num_nodes if stop is None else stop)

    def ids_of_rows(self, rows: np.ndarray) -> np.ndarray:
        """The node ids at shard-order row numbers ``rows`` (sorted)."""
        if not self.has_order:
            return np.asarray(rows, dtype=np.int64)
        order = np.memmap(_path(self.directory, "order"), dtype=np.int64, mode="r", shape=(self.num_nodes,))
        out = np.array(order[rows])
        del order
        return out

    def _gather_column(self, name: str, ids: np.ndarray) -> np.ndarray:
        """Column ``name`` at sorted ``ids``, mapping one window of the file at a time."""
        dtype = np.dtype(_COLUMNS[name])
        tail = (self.feat_dim,) if name == "x" else ()
        out = np.empty((len(ids), *tail), dtype=dtype)
        row_bytes = dtype.itemsize * (self.feat_dim if name == "x" else 1)
        if not len(ids) or not row_bytes:
            return out
        window = max(1, WINDOW_BYTES // row_bytes)
        fd, _ = open_direct(_path(self.directory, name), os.O_RDONLY)
        try:
            scratch = aligned_empty(window * row_bytes + 2 * ALIGN)
            i = 0
            while i < len(ids):
                lo = int(ids[i])
                j = int(np.searchsorted(ids, lo + window, side="left"))
                hi = int(ids[j - 1]) + 1
                data = pread_into(fd, lo * row_bytes, (hi - lo) * row_bytes, scratch)
                if len(data) != (hi - lo) * row_bytes:
                    raise StoreError(format_problem(
                        f"decoded node table {_path(self.directory, name)}", f"rows {lo:,}..{hi - 1:,}",
                        f"{len(data):,} of their {(hi - lo) * row_bytes:,} bytes",
                        "rerun the command: the copy is rewritten."))
                out[i:j] = data.view(dtype).reshape(-1, *tail)[ids[i:j] - lo]
                i = j
        finally:
            os.close(fd)
        return out

    def gather(self, ids: np.ndarray, columns: tuple[str, ...] = ("x", "y", "split")) -> tuple[np.ndarray, ...]:
        """``columns`` (default ``(x, y, split)``) of the nodes ``ids``.

        The files are read one window of at most :data:`WINDOW_BYTES` at a time into one
        buffer, so the memory is one window's, whatever the span of ``ids``.
        """
        ids = np.asarray(ids, dtype=np.int64)
        order = None
        if len(ids) > 1 and not bool((ids[1:] >= ids[:-1]).all()):
            order = np.argsort(ids, kind="stable")
            ids = ids[order]
        out = tuple(self._gather_column(name, ids) for name in columns)
        if order is not None:
            for column in out:
                column[order] = column.copy()
        return out
