"""Vertex partitions of the fully-decentralized baseline: METIS or a seeded hash.

Every vertex has exactly one owner rank. The owner stores the vertex's feature row,
label, split and in-edges, serves them to the other ranks, and trains on it if it is a
training vertex. The :class:`PartitionBook` answers ``owner(global_nid)`` on every rank.

* ``metis``: pymetis on the symmetrised graph (self-loops and duplicate edges dropped),
  balancing vertex counts. It needs the whole structure in one process, so one rank
  computes it and writes the owner array into the run directory (DistDGL too partitions
  offline, in one process); it is for graphs of up to :data:`METIS_MAX_EDGES` input
  edges (the ``auto`` default switches to ``hash`` above that). The book holds one int32
  per vertex on every rank (4 |V| bytes). Training vertices are not balanced
  separately: with the seeded stratified splits of ``asepr import`` they follow the
  vertex balance (Cora, 4 parts: 402 to 411 training vertices per part; a second METIS
  constraint on them made the cut worse without evening them out).
* ``hash``: ``owner = splitmix64(global_nid + seed) mod W``. Stateless, O(1) per
  lookup, any graph size; it cuts about (W-1)/W of the edges.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from asepr.storage.commit.atomic import save_npy_atomic
from asepr.storage.errors import InputError, StoreError, format_problem
from asepr.storage.inputs.directory import InputDir, open_input, open_parquet
from asepr.storage.inputs.npy import load_npy
from asepr.training.config import FDS_PARTITIONERS
from asepr.training.graph.hashing import splitmix64

__all__ = [
    "METIS_MAX_EDGES",
    "PARTITIONERS",
    "PartitionBook",
    "count_input_rows",
    "cut_edges",
    "hash_owner",
    "iter_input_edges",
    "metis_owner",
    "resolve_partitioner",
]

log = logging.getLogger(__name__)

PARTITIONERS = FDS_PARTITIONERS
#: ``auto`` uses METIS up to this many input edges, and ``hash`` above.
METIS_MAX_EDGES = 5_000_000


def iter_input_edges(input_url: str | Path | InputDir, *, storage_options: dict | None = None):
    """Yield ``(src, dst)`` int64 arrays, one Parquet record batch of the edge shards at a time."""
    for shard in open_input(input_url, storage_options).edge_shards:
        for batch in open_parquet(shard).iter_batches(columns=["src", "dst"]):
            yield (batch.column("src").to_numpy().astype(np.int64, copy=False),
                   batch.column("dst").to_numpy().astype(np.int64, copy=False))


def count_input_rows(input_url: str | Path | InputDir, *, storage_options: dict | None = None) -> tuple[int, int]:
    """``(node rows, edge rows)`` of an input, from the Parquet footers (no data is read)."""
    source = open_input(input_url, storage_options)
    counts = [sum(open_parquet(s).metadata.num_rows for s in shards)
              for shards in (source.node_shards, source.edge_shards)]
    return counts[0], counts[1]


def resolve_partitioner(kind: str, num_edges: int) -> str:
    """``auto`` → ``metis`` up to :data:`METIS_MAX_EDGES` edges, else ``hash``."""
    if kind not in PARTITIONERS:
        raise ValueError(f'Unsupported FDS partitioner "{kind}". Valid choices are "auto", "metis", "hash".')
    if kind == "auto":
        return "metis" if num_edges <= METIS_MAX_EDGES else "hash"
    return kind


def hash_owner(global_nid: np.ndarray, world_size: int, seed: int = 0) -> np.ndarray:
    """The hash partition's owner rank (int64) of each ``global_nid``."""
    gid = np.asarray(global_nid, dtype=np.int64)
    with np.errstate(over="ignore"):
        h = splitmix64(gid.astype(np.uint64) + np.uint64(int(seed) & 0xFFFFFFFF) * np.uint64(0x632BE59BD9B4E019))
    return (h % np.uint64(world_size)).astype(np.int64)


def metis_owner(input_url: str | Path, world_size: int, *, num_nodes: int, seed: int = 0,
                storage_options: dict | None = None) -> tuple[np.ndarray, int]:
    """METIS on the symmetrised input graph: ``(owner int32 [num_nodes], symmetric edge cut)``.

    Holds the whole structure in memory (about 40 bytes per input edge at the peak).
    """
    import pymetis

    t0 = time.perf_counter()
    srcs, dsts = [], []
    for src, dst in iter_input_edges(input_url, storage_options=storage_options):
        bad = (src < 0) | (src >= num_nodes) | (dst < 0) | (dst >= num_nodes)
        if bad.any():
            i = int(np.flatnonzero(bad)[0])
            raise InputError(format_problem(f"edge shards of {input_url}", f"node ids in 0..{num_nodes - 1}",
                                            f"the edge ({int(src[i])}, {int(dst[i])})",
                                            "run `asepr validate` on the input."))
        keep = src != dst
        srcs.append(src[keep])
        dsts.append(dst[keep])
    src = np.concatenate(srcs + [np.zeros(0, np.int64)])
    dst = np.concatenate(dsts + [np.zeros(0, np.int64)])
    del srcs, dsts
    key = np.unique(np.concatenate([src * num_nodes + dst, dst * num_nodes + src]))
    del src, dst
    a, b = key // num_nodes, key % num_nodes
    del key
    if world_size == 1:
        return np.zeros(num_nodes, dtype=np.int32), 0
    xadj = np.zeros(num_nodes + 1, dtype=np.int64)
    np.cumsum(np.bincount(a, minlength=num_nodes), out=xadj[1:])
    _, membership = pymetis.part_graph(world_size, pymetis.CSRAdjacency(xadj, b),
                                       options=pymetis.Options(seed=int(seed)))
    owner = np.asarray(membership, dtype=np.int32)
    cut = int((owner[a] != owner[b]).sum()) // 2
    log.info("metis: %d vertices, %d symmetric edges into %d parts, cut %d (%.1f%%) in %.1f s", num_nodes,
             len(a) // 2, world_size, cut, 100.0 * cut / max(len(a) // 2, 1), time.perf_counter() - t0)
    return owner, cut


@dataclass(frozen=True, eq=False)
class PartitionBook:
    """``global_nid`` → owner rank, for a METIS owner array or the seeded hash."""

    kind: str
    world_size: int
    num_nodes: int
    seed: int = 0
    owner_array: np.ndarray | None = None  # int32 [num_nodes], metis only

    FILE = "fds-partition.npy"

    def __post_init__(self) -> None:
        if self.kind not in ("metis", "hash"):
            raise ValueError(f'Unsupported partition book "{self.kind}". Valid choices are "metis", "hash".')
        if self.kind == "metis" and (self.owner_array is None or len(self.owner_array) != self.num_nodes):
            raise ValueError("a metis partition book needs one owner per node")

    def owner(self, global_nid):
        """The owner rank (int64) of each id; a torch tensor in, a torch tensor out."""
        as_torch = isinstance(global_nid, torch.Tensor)
        gid = global_nid.numpy() if as_torch else np.asarray(global_nid, dtype=np.int64)
        if self.kind == "metis":
            out = self.owner_array[gid].astype(np.int64)
        else:
            out = hash_owner(gid, self.world_size, self.seed)
        return torch.from_numpy(out) if as_torch else out

    def save(self, run_dir: str | Path) -> None:
        """Write the METIS owner array to ``RUN/fds-partition.npy`` (atomically); hash has no state."""
        if self.kind != "metis":
            return
        Path(run_dir).mkdir(parents=True, exist_ok=True)
        save_npy_atomic(Path(run_dir) / self.FILE, self.owner_array.astype(np.int32), durable=True)

    @classmethod
    def load(cls, run_dir: str | Path, world_size: int, num_nodes: int) -> PartitionBook:
        """The METIS book a run directory holds."""
        path = Path(run_dir) / cls.FILE
        try:
            owner = load_npy(path, allow_pickle=False)
        except (OSError, ValueError) as exc:
            raise StoreError(format_problem(f"partition book {path}", "the owner array rank 0 wrote",
                                            f"unreadable ({type(exc).__name__}: {exc})",
                                            "start a new run (without --resume).")) from exc
        if owner.shape != (num_nodes,) or (len(owner) and (owner.min() < 0 or owner.max() >= world_size)):
            raise StoreError(format_problem(f"partition book {path}",
                                            f"{num_nodes} owners in 0..{world_size - 1}",
                                            f"shape {owner.shape}", "start a new run (without --resume)."))
        return cls("metis", world_size, num_nodes, owner_array=owner)


def cut_edges(book: PartitionBook, src: np.ndarray, dst: np.ndarray) -> int:
    """How many of the edges ``(src, dst)`` join vertices of different owners."""
    return int((book.owner(np.asarray(src)) != book.owner(np.asarray(dst))).sum())
