"""Stage ⑦ (and the first half of ⑨): route edge rows and node rows to partitions.

Each Dask task reads one input shard and writes **one** spill file, so every spill
file has exactly one writer. A spill file is a sequence of *segments*: the records of
one record batch that go to one partition, appended as raw bytes. Its index
(``*.idx.npy``: ``part_id, kind, offset, count`` per segment, ``kind`` 0 for an
assigned edge and 1 for a halo copy) is written last, atomically, and doubles as the
task's done marker: a rerun skips the shards whose index exists. A finaliser then
reads, for its partition, the matching segments of every spill file.

Spill layout (inside the run's staging directory)::

    route/edges-SSSSS.bin       records (src int64, dst int64), grouped per batch and partition
    route/edges-SSSSS.idx.npy   int64 [segments, 4]: part_id, kind, offset, count
    gather/nodes-SSSSS.bin      records (part_local_nid int64, y int64, split int8, x float32[d])
    gather/nodes-SSSSS.idx.npy  as above (kind 0)

Memory per task: one record batch plus its per-partition slices, never a shard.
"""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np

from asepr.pipeline.planning.needs import Need, RunShape
from asepr.pipeline.stream import iter_edge_batches
from asepr.storage.commit import failpoints
from asepr.storage.commit.atomic import refuse_symlink, save_npy_atomic
from asepr.storage.errors import StoreError, format_problem
from asepr.storage.inputs.decoded import decoded_row
from asepr.storage.inputs.directory import open_parquet
from asepr.storage.inputs.npy import load_npy, write_array
from asepr.storage.inputs.schema import check_node_schema, feature_matrix
from asepr.storage.locations.fs import Shard

__all__ = [
    "EDGE_RECORD",
    "EDGE_RECORD32",
    "SegmentWriter",
    "edge_record",
    "edge_spill_paths",
    "spill_paths",
    "gather_node_shard",
    "node_record",
    "node_spill_paths",
    "read_segments",
    "route_edge_shard",
    "write_grouped",
    "route_needs",
]

log = logging.getLogger(__name__)

EDGE_RECORD = np.dtype([("src", "<i8"), ("dst", "<i8")])
#: The routed edge record while every id fits ``int32`` (``asepr partition``; N <= 2**31).
EDGE_RECORD32 = np.dtype([("src", "<i4"), ("dst", "<i4")])
KIND_ASSIGNED, KIND_HALO = 0, 1
_NODE_BATCH_BYTES = 16 << 20


def node_record(feat_dim: int) -> np.dtype:
    """The spill record of one gathered node row."""
    return np.dtype([("local", "<i8"), ("y", "<i8"), ("split", "i1"), ("x", "<f4", (feat_dim,))])


def spill_paths(directory: str | Path, kind: str, index: int) -> tuple[Path, Path]:
    """The ``(records, index)`` files of one spill: ``KIND-IIIII.bin`` and ``KIND-IIIII.idx.npy``."""
    base = Path(directory) / f"{kind}-{index:05d}"
    return base.with_suffix(".bin"), Path(f"{base}.idx.npy")


def edge_record(narrow: bool = False) -> np.dtype:
    """The routed edge record: :data:`EDGE_RECORD32` when ``narrow``, else :data:`EDGE_RECORD`."""
    return EDGE_RECORD32 if narrow else EDGE_RECORD


def edge_spill_paths(route_dir: str | Path, shard_index: int, narrow: bool = False) -> tuple[Path, Path]:
    """The spill of one edge shard's routed rows (``edges32-*`` for narrow records, so a
    spill of the other width is never read as this one)."""
    return spill_paths(route_dir, "edges32" if narrow else "edges", shard_index)


def node_spill_paths(gather_dir: str | Path, shard_index: int) -> tuple[Path, Path]:
    """The spill of one node shard's gathered rows."""
    return spill_paths(gather_dir, "nodes", shard_index)


class SegmentWriter:
    """Appends record segments to one spill file; :meth:`close` writes the index."""

    def __init__(self, bin_path: Path, idx_path: Path):
        self.bin_path, self.idx_path = Path(bin_path), Path(idx_path)
        self.idx_path.unlink(missing_ok=True)
        refuse_symlink(self.bin_path)
        self._fh = open(self.bin_path, "wb")  # noqa: SIM115 - closed by close()/abort()
        self._offset = 0
        self._segments: list[tuple[int, int, int, int]] = []

    def write(self, part_id: int, kind: int, records: np.ndarray) -> None:
        if len(records) == 0:
            return
        write_array(self._fh, records)
        self._segments.append((int(part_id), int(kind), self._offset, len(records)))
        self._offset += len(records)

    def close(self) -> None:
        self._fh.close()
        save_npy_atomic(self.idx_path, np.array(self._segments, dtype=np.int64).reshape(-1, 4))

    def abort(self) -> None:
        self._fh.close()


def read_segments(
    spills: list[tuple[Path, Path]], part_id: int, dtype: np.dtype
) -> dict[int, np.ndarray]:
    """All records of ``part_id`` from the spill files, per kind, in spill order."""
    pieces: dict[int, list[np.ndarray]] = {}
    for bin_path, idx_path in spills:
        index = load_npy(idx_path)
        mine = index[index[:, 0] == part_id]
        if not len(mine):
            continue
        with open(bin_path, "rb") as fh:
            for _, kind, offset, count in mine:
                fh.seek(int(offset) * dtype.itemsize)
                block = np.fromfile(fh, dtype=dtype, count=int(count))
                if len(block) != count:
                    raise StoreError(
                        format_problem(
                            f"spill file {bin_path}",
                            f"{count} records at record {offset}",
                            f"{len(block)}",
                            "the staging directory is damaged; rerun with --overwrite to start clean.",
                        )
                    )
                pieces.setdefault(int(kind), []).append(block)
    return {kind: np.concatenate(blocks) for kind, blocks in pieces.items()}


def _group_by(part: np.ndarray, num_parts: int) -> tuple[np.ndarray, np.ndarray]:
    # Partition ids fit int16 (k <= 32767), for which numpy's stable sort is a radix
    # sort: 3 against 42 CPU ms for a 1M-row batch (docs/results/implementation-choices/micro.md).
    key = part.astype(np.int16, copy=False)
    order = np.argsort(key, kind="stable")
    bounds = np.searchsorted(key[order], np.arange(num_parts + 1))
    return order, bounds


def _changed(shard: Shard, expected: int, found: str) -> None:
    raise StoreError(
        format_problem(
            f"edge shard {shard.url}",
            f"{expected:,} rows (as when it was partitioned)",
            found,
            "the input changed during the run; rerun `asepr partition` with --overwrite.",
        )
    )


def route_edge_shard(
    shard: Shard,
    shard_index: int,
    parts_path: str,
    route_dir: str,
    *,
    num_parts: int,
    halo: int = 0,
    undirected: bool = False,
    master_path: str | None = None,
    batch_rows: int = 1 << 20,
    narrow: bool = False,
) -> list[list[int]]:
    """Route the rows of one edge shard to per-partition segments of one spill file.

    Parameters
    ----------
    shard, shard_index
        The edge shard and its position in stream order; its decoded copy is read
        when it has one (``Shard.decoded``, :mod:`asepr.storage.inputs.decoded`).
    parts_path
        The ``.npy`` with the partition id of every row of the shard.
    route_dir
        Where the spill file goes.
    halo, undirected, master_path
        With ``halo`` 1, an edge also goes (as a halo copy) to the master partition
        of its destination, and for an undirected input to that of its source, when
        that is not the partition it was assigned to; ``master_path`` is the
        ``int32 [N]`` master array (``.npy``, memory-mapped).
    narrow
        Write :data:`EDGE_RECORD32` records (every id below 2**31), half the bytes.

    Returns
    -------
    list of [assigned, halo] counts per partition.
    """
    parts = load_npy(parts_path, mmap_mode="r")
    master = load_npy(master_path, mmap_mode="r") if halo else None
    counts = np.zeros((num_parts, 2), dtype=np.int64)
    bin_path, idx_path = edge_spill_paths(route_dir, shard_index, narrow)
    record = edge_record(narrow)
    writer = SegmentWriter(bin_path, idx_path)
    try:
        row0 = 0
        for batch in iter_edge_batches([shard], batch_rows, prefetch=0):
            n = len(batch.src)
            if row0 + n > len(parts):
                _changed(shard, len(parts), "more rows")
            records = np.empty(n, dtype=record)
            records["src"] = batch.src
            records["dst"] = batch.dst
            part = np.asarray(parts[row0 : row0 + n])
            write_grouped(writer, records, part, num_parts, KIND_ASSIGNED, counts)
            if halo:
                to_dst = np.asarray(master[records["dst"]]).astype(np.int64)
                copy = to_dst != part
                write_grouped(writer, records[copy], to_dst[copy], num_parts, KIND_HALO, counts)
                if undirected:
                    to_src = np.asarray(master[records["src"]]).astype(np.int64)
                    copy = (to_src != part) & (to_src != to_dst)
                    write_grouped(writer, records[copy], to_src[copy], num_parts, KIND_HALO, counts)
            row0 += n
            failpoints.failpoint("route")
        if row0 != len(parts):
            _changed(shard, len(parts), f"{row0:,} rows")
        writer.close()
    except BaseException:
        writer.abort()
        raise
    return counts.tolist()


def write_grouped(writer, records, part, num_parts, kind, counts) -> None:
    if not len(records):
        return
    order, bounds = _group_by(part, num_parts)
    records = records[order]
    for p in np.flatnonzero(np.diff(bounds)):
        writer.write(int(p), kind, records[bounds[p] : bounds[p + 1]])
        counts[p, kind] += bounds[p + 1] - bounds[p]


def gather_node_shard(
    shard: Shard,
    shard_index: int,
    global_nid_paths: dict[int, str],
    gather_dir: str,
    *,
    feat_dim: int,
) -> int:
    """Send every row of one node shard to each partition that holds the node.

    ``global_nid_paths[p]`` is the sorted ``global_nid`` array (``.npy``) of partition
    ``p``; only the partitions listed are served. Returns the number of rows read.
    """
    global_nids = {p: load_npy(path, mmap_mode="r") for p, path in global_nid_paths.items()}
    dtype = node_record(feat_dim)
    bin_path, idx_path = node_spill_paths(gather_dir, shard_index)
    writer = SegmentWriter(bin_path, idx_path)
    rows = 0
    try:
        pf = open_parquet(shard)
        layout, present, _ = check_node_schema(pf.schema_arrow, shard.url)
        columns = ["id", *layout.columns, *present]
        batch_rows = max(1024, min(1 << 20, _NODE_BATCH_BYTES // max(1, 4 * feat_dim)))
        for batch in pf.iter_batches(batch_size=batch_rows, columns=columns):
            ids = batch.column("id").to_numpy()
            n = len(ids)
            feat = feature_matrix(batch, layout) if n else np.zeros((0, feat_dim), np.float32)
            label = batch.column("label").to_numpy() if "label" in present else np.full(n, -1, np.int64)
            split = batch.column("split").to_numpy() if "split" in present else np.full(n, -1, np.int8)
            contiguous = n > 0 and int(ids[-1]) - int(ids[0]) == n - 1 and bool((np.diff(ids) == 1).all())
            for p, g in global_nids.items():
                if not len(g):
                    continue
                if contiguous:
                    # Ids first..first+n-1 in order (shards written in id order): the
                    # partition's nodes in that range are a slice of its sorted ids, so
                    # the work is O(its nodes here), not a search per row and partition.
                    lo = int(np.searchsorted(g, ids[0], side="left"))
                    hi = int(np.searchsorted(g, ids[-1], side="right"))
                    pos = np.arange(lo, hi, dtype=np.int64)
                    hit = np.asarray(g[lo:hi]) - int(ids[0])
                else:
                    pos = np.searchsorted(g, ids)
                    hit = np.flatnonzero(pos < len(g))
                    hit = hit[np.asarray(g[pos[hit]]) == ids[hit]]
                    pos = pos[hit]
                if not len(hit):
                    continue
                records = np.empty(len(hit), dtype=dtype)
                records["local"] = pos
                records["y"] = label[hit]
                records["split"] = split[hit]
                records["x"] = feat[hit]
                writer.write(p, KIND_ASSIGNED, records)
            rows += n
        writer.close()
    except BaseException:
        writer.abort()
        raise
    return rows


def route_needs(s: RunShape) -> Need:
    """Memory and disk of :func:`route_edge_shard`: a task maps its shard's ``int16``
    partitions and holds a batch as ``int64`` columns, its records (``int32`` pairs while
    N <= 2**31, else ``int64``: ``r`` B), ``int64`` partitions, the argsort and the grouped
    records (``34 + 2r`` B per row); a halo also maps ``master`` int32[N] and groups the
    copies. Each edge row is written once (``r`` B), plus its halo copies; the decoded
    edge copy it read is then deleted."""
    record = edge_record(s.n <= 2**31).itemsize
    task = 2 * s.e_s + (34 + 2 * record) * s.b
    if s.halo_copies:
        task += 4 * s.n + 57 * s.b * s.halo_copies
    return Need(task=task, tasks=s.edge_shards, written=record * s.e * (1 + s.halo_copies),
                removed=decoded_row(s.n) * s.e)
