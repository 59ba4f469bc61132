"""``asepr verify``, check 6: every partition's node rows equal the input's, bit for bit.

Fast path, one pass over the node shards and one over the stores: the input's rows
are scattered into a table indexed by ``global_nid`` (``x`` as raw 32-bit words, ``y``,
``split``, and which ids have a row), O(N * d) memory, then each partition's rows are
compared with the table rows of their ``global_nid`` as the partition is read for its
checksums (:func:`compare_rows`). The table is built only when it fits the memory
budget and the input has at most one row per id, or duplicate rows that are equal:
otherwise (and for a table that would not fit) :func:`compare_nodes_streaming`
compares partitions, loaded in groups that fit the budget, against a pass over the
node shards per group, which also compares every row of an id that has several.

The same rows are compared either way: each partition row with the input row(s) of
its id, ``x`` bit for bit (so ``-0.0 != 0.0`` and NaNs compare by payload), ``y`` and
``split`` by value; a partition node with no input row is reported.
"""

from __future__ import annotations

from dataclasses import dataclass

import numba
import numpy as np
import pyarrow as pa

from asepr.storage.inputs.directory import open_parquet
from asepr.storage.inputs.schema import check_node_schema, feature_matrix
from asepr.storage.partitions.store import PartitionStore

__all__ = [
    "NODE_FIELDS",
    "NodeTable",
    "RowMismatch",
    "build_node_table",
    "compare_nodes_streaming",
    "compare_rows",
    "first_input_rows",
    "mismatch_problems",
    "node_table_bytes",
]

#: The compared node arrays, in the order of the messages.
NODE_FIELDS = ("x", "y", "split")


def node_table_bytes(num_nodes: int, dim: int) -> int:
    """Bytes of the input node table: ``x`` words, ``y``, ``split`` and a presence flag."""
    return num_nodes * (4 * dim + 8 + 1 + 1)


@dataclass
class NodeTable:
    """The input's node rows by ``global_nid``; ``present[v]``: node ``v`` has a row."""

    x_bits: np.ndarray
    y: np.ndarray
    split: np.ndarray
    present: np.ndarray


@dataclass(frozen=True)
class RowMismatch:
    """The first partition row whose ``name`` differs from the input, and how many do."""

    part_id: int
    name: str
    global_nid: int
    part_local_nid: int
    rows: int


def _batch_columns(batch, layout, present: list[str]):
    n = batch.num_rows
    ids = batch.column("id").to_numpy()
    feat = feature_matrix(batch, layout)
    label = batch.column("label").to_numpy() if "label" in present else np.full(n, -1, np.int64)
    split = batch.column("split").to_numpy() if "split" in present else np.full(n, -1, np.int8)
    return ids, feat, label, split


def _iter_node_batches(node_shards, columns_extra: bool = True):
    """``(shard, row0, batch, layout, present)`` over every node shard, in order."""
    for shard in node_shards:
        pf = open_parquet(shard)
        layout, present, _ = check_node_schema(pf.schema_arrow, shard.url)
        columns = ["id", *layout.columns, *present] if columns_extra else ["id"]
        rows = max(1024, min(1 << 20, (16 << 20) // max(1, 4 * (layout.dim or 256))))
        row0 = 0
        for batch in pf.iter_batches(batch_size=rows, columns=columns):
            yield shard, row0, batch, layout, present
            row0 += batch.num_rows


@numba.njit(cache=True, nogil=True)
def _fill(ids, feat_bits, label, split, tx, ty, ts, present):
    """Scatter a batch into the table; False when an id already has a different row."""
    n = len(present)
    for i in range(len(ids)):
        v = ids[i]
        if v < 0 or v >= n:
            continue  # no partition node can have this id (their ids are checked in [0, N))
        if present[v]:
            same = ty[v] == label[i] and ts[v] == split[i]
            for j in range(tx.shape[1]):
                same = same and tx[v, j] == feat_bits[i, j]
            if not same:
                return False
            continue
        for j in range(tx.shape[1]):
            tx[v, j] = feat_bits[i, j]
        ty[v], ts[v], present[v] = label[i], split[i], True
    return True


def build_node_table(node_shards, num_nodes: int, dim: int) -> tuple[NodeTable | None, str]:
    """The input's node rows by id, or ``(None, why)`` when the streaming comparison must run
    instead (features of another width, or an id with two different rows)."""
    table = NodeTable(np.zeros((num_nodes, dim), np.uint32), np.zeros(num_nodes, np.int64),
                      np.zeros(num_nodes, np.int8), np.zeros(num_nodes, np.bool_))
    try:
        return _fill_table(table, node_shards, dim)
    finally:
        # Arrow's allocator keeps the decoded batches' memory unless told to let it go.
        pa.default_memory_pool().release_unused()


def _fill_table(table: NodeTable, node_shards, dim: int) -> tuple[NodeTable | None, str]:
    for shard, row0, batch, layout, present in _iter_node_batches(node_shards):
        ids, feat, label, split = _batch_columns(batch, layout, present)
        if feat.shape[1] != dim:
            return None, f"{shard.url} has features of width {feat.shape[1]}, the stores {dim}"
        bits = np.ascontiguousarray(feat, dtype=np.float32).view(np.uint32)
        if not _fill(ids, bits, label.astype(np.int64, copy=False), split.astype(np.int8, copy=False),
                     table.x_bits, table.y, table.split, table.present):
            return None, f"{shard.url} (rows from {row0}) repeats an id with another row"
    return table, ""


@numba.njit(cache=True, nogil=True)
def _compare(gids, x_bits, y, split, tx, ty, ts, present, first, count):
    n = len(present)
    for i in range(len(gids)):
        v = gids[i]
        if v < 0 or v >= n or not present[v]:
            continue
        same_x = True
        for j in range(x_bits.shape[1]):
            if x_bits[i, j] != tx[v, j]:
                same_x = False
                break
        differs = (not same_x, y[i] != ty[v], split[i] != ts[v])
        for f in range(3):
            if differs[f]:
                count[f] += 1
                if first[f] < 0:
                    first[f] = i


def compare_rows(table: NodeTable, part_id: int, gids: np.ndarray, x: np.ndarray, y: np.ndarray,
                 split: np.ndarray) -> tuple[list[RowMismatch], tuple[str, str] | None]:
    """Compare one partition's node rows with the table: the first mismatch per field,
    and the problem of nodes that have no input row (or None)."""
    first, count = np.full(3, -1, np.int64), np.zeros(3, np.int64)
    bits = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32)
    _compare(gids, bits, y, split, table.x_bits, table.y, table.split, table.present, first, count)
    mismatches = [RowMismatch(part_id, name, int(gids[first[f]]), int(first[f]), int(count[f]))
                  for f, name in enumerate(NODE_FIELDS) if count[f]]
    inside = (gids >= 0) & (gids < len(table.present))
    has_row = np.zeros(len(gids), dtype=bool)
    has_row[inside] = table.present[gids[inside]]
    missing = np.flatnonzero(~has_row)
    absent = None
    if len(missing):
        absent = (f"partition {part_id}", f"{len(missing):,} node(s) have no row in the input, e.g. "
                                          f"global_nid {gids[missing[:5]].tolist()}")
    return mismatches, absent


def first_input_rows(node_shards, wanted: set[int]) -> dict[int, tuple[str, int]]:
    """``global_nid -> (shard url, row)`` of the first input row of each wanted id (ids only)."""
    found: dict[int, tuple[str, int]] = {}
    want = np.array(sorted(wanted), dtype=np.int64)
    for shard, row0, batch, _, _ in _iter_node_batches(node_shards, columns_extra=False):
        if len(found) == len(want):
            break
        ids = batch.column("id").to_numpy()
        for i in np.flatnonzero(np.isin(ids, want)):
            found.setdefault(int(ids[i]), (shard.url, row0 + int(i)))
    return found


def mismatch_problems(mismatches: list[RowMismatch], node_shards) -> list[tuple[str, str]]:
    """The messages of the table comparison's mismatches (each names the input row)."""
    rows = first_input_rows(node_shards, {m.global_nid for m in mismatches}) if mismatches else {}
    return [(f"partition {m.part_id}",
             f"nodes/{m.name} of global_nid {m.global_nid} (part_local_nid {m.part_local_nid}) "
             f"differs from {rows[m.global_nid][0]} row {rows[m.global_nid][1]} "
             f"({m.rows:,} such rows in this partition)") for m in mismatches]


# --- the streaming comparison (wide features, or ids with several rows) -------------------


def _groups(stores: dict[int, PartitionStore], memory_budget: int) -> list[list[int]]:
    groups: list[list[int]] = []
    size = 0
    for p, store in stores.items():
        need = store.num_nodes * (8 + 8 + 1 + 1 + 4 * max(1, store.x.shape[1]))
        if groups and size + need <= memory_budget:
            groups[-1].append(p)
            size += need
        else:
            groups.append([p])
            size = need
    return groups


def _load_group(stores, group, damaged, problems) -> dict[int, dict[str, np.ndarray]]:
    loaded = {}
    for p in group:
        try:
            loaded[p] = stores[p].to_numpy(["nodes/global_nid", "nodes/x", "nodes/y", "nodes/split"])
        except Exception as exc:  # noqa: BLE001 - a damaged store may fail to decode in any way
            if p not in damaged:
                raise
            problems.append((f"partition {p}", f"node rows unreadable past the damage ({type(exc).__name__}: {exc})"))
    return loaded


def _compare_batch(loaded, seen, reported, shard, row0, ids, feat, label, split, problems) -> None:
    for p, arrays in loaded.items():
        gids = arrays["nodes/global_nid"]
        if not len(gids):
            continue
        pos = np.searchsorted(gids, ids)
        hit = np.flatnonzero(pos < len(gids))
        hit = hit[gids[pos[hit]] == ids[hit]]
        if not len(hit):
            continue
        local = pos[hit]
        seen[p][local] = True
        checks = (
            ("x", arrays["nodes/x"][local].view(np.uint32), np.ascontiguousarray(feat[hit]).view(np.uint32)),
            ("y", arrays["nodes/y"][local], label[hit]),
            ("split", arrays["nodes/split"][local], split[hit]),
        )
        for name, got, want in checks:
            if (p, name) in reported:
                continue
            diff = got != want
            if diff.ndim > 1:
                diff = diff.any(axis=1)
            if diff.any():
                i = int(np.flatnonzero(diff)[0])
                problems.append((
                    f"partition {p}",
                    f"nodes/{name} of global_nid {int(ids[hit[i]])} (part_local_nid {int(local[i])}) "
                    f"differs from {shard.url} row {row0 + int(hit[i])} ({int(diff.sum()):,} such rows in this batch)",
                ))
                reported.add((p, name))


def compare_nodes_streaming(stores: dict[int, PartitionStore], node_shards, memory_budget: int,
                            damaged: set[int]) -> list[tuple[str, str]]:
    """Partitions loaded in groups that fit ``memory_budget``, one pass over the node shards
    per group; ``(where, message)`` per problem."""
    problems: list[tuple[str, str]] = []
    for group in _groups(stores, memory_budget):
        loaded = _load_group(stores, group, damaged, problems)
        seen = {p: np.zeros(stores[p].num_nodes, dtype=bool) for p in loaded}
        reported: set[tuple[int, str]] = set()
        for shard, row0, batch, layout, present in _iter_node_batches(node_shards):
            ids, feat, label, split = _batch_columns(batch, layout, present)
            _compare_batch(loaded, seen, reported, shard, row0, ids, feat, label, split, problems)
        for p in loaded:
            missing = np.flatnonzero(~seen[p])
            if len(missing):
                problems.append((f"partition {p}", f"{len(missing):,} node(s) have no row in the input, e.g. "
                                                   f"global_nid {loaded[p]['nodes/global_nid'][missing[:5]].tolist()}"))
        del loaded
    return problems
