"""One rank's share of the graph in the fully-decentralized baseline.

Rank r streams the input's Parquet shards once and keeps only what it owns under the
:class:`~asepr.training.fds.partition.PartitionBook`:

* the node rows of its vertices (``global_nid`` sorted, features, labels, splits);
* the **in-edges** of its vertices, as a CSR by destination over its ``local_nid``
  (the row in ``global_nid``) whose entries are the sources' ``global_nid``. For an
  undirected input (each edge stored once) both directions are kept, so an edge
  {u, v} is an in-edge of v at v's owner and an in-edge of u at u's owner.

The structure is partitioned, not replicated (DistDGL keeps it partitioned too): a
rank never holds O(|E|) of it, and sampling a remote vertex's in-neighbours is a
request to its owner (:mod:`asepr.training.fds.remote`). Each rank reads every shard but
keeps about 1/W of it; reading the input is loading, not training traffic.

ID spaces: ``global_nid`` (the input's node id) and ``local_nid`` (the row on the
owning rank). Every id and count is int64.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from asepr.storage import SPLIT_TRAIN
from asepr.storage.errors import InputError, format_problem
from asepr.storage.inputs.directory import open_input, open_parquet
from asepr.storage.inputs.schema import check_node_schema, feature_matrix
from asepr.storage.resources import peak_rss_bytes
from asepr.training.fds.partition import PartitionBook, iter_input_edges

__all__ = ["FdsGraph", "load_fds_graph"]

log = logging.getLogger(__name__)


@dataclass
class FdsGraph:
    """The vertices a rank owns, their rows, and their in-edges (all tensors on CPU)."""

    rank: int
    book: PartitionBook
    global_nid: torch.Tensor  # int64 [n], sorted: the owned vertices
    x: torch.Tensor  # float32 [n, d]
    y: torch.Tensor  # int64 [n], -1 unknown
    split: torch.Tensor  # int8 [n]
    in_ptr: torch.Tensor  # int64 [n + 1]: CSR by destination over local_nid
    in_src: torch.Tensor  # int64 [m_in]: the sources' global_nid
    num_nodes: int  # |V| of the whole graph
    undirected: bool

    @property
    def num_owned(self) -> int:
        return int(self.global_nid.shape[0])

    @property
    def num_in_edges(self) -> int:
        return int(self.in_src.shape[0])

    def local_nid(self, global_nid: torch.Tensor) -> torch.Tensor:
        """Rows of owned vertices (the caller guarantees ownership)."""
        return torch.searchsorted(self.global_nid, global_nid)

    def idx(self, split: int) -> torch.Tensor:
        """``local_nid`` of the owned vertices of one split."""
        return torch.nonzero(self.split == split).view(-1)

    @property
    def train_idx(self) -> torch.Tensor:
        return self.idx(SPLIT_TRAIN)


def _owned_rows(input_url, node_shards, book: PartitionBook, rank: int):
    ids, feats, labels, splits = [], [], [], []
    for shard in node_shards:
        pf = open_parquet(shard)
        layout, present, _ = check_node_schema(pf.schema_arrow, shard.url)
        for batch in pf.iter_batches(columns=["id", *layout.columns, *present]):
            gid = batch.column("id").to_numpy().astype(np.int64, copy=False)
            bad = (gid < 0) | (gid >= book.num_nodes)
            if bad.any():
                raise InputError(format_problem(f"file {shard.url}, column 'id'", f"ids in 0..{book.num_nodes - 1}",
                                                f"id {int(gid[bad][0])}", "run `asepr validate` on the input."))
            mine = book.owner(gid) == rank
            n = int(mine.sum())
            ids.append(gid[mine])
            feats.append(feature_matrix(batch, layout)[mine])
            labels.append(batch.column("label").to_numpy()[mine] if "label" in present
                          else np.full(n, -1, np.int64))
            splits.append(batch.column("split").to_numpy()[mine] if "split" in present
                          else np.full(n, -1, np.int8))
    if not ids:
        return np.zeros(0, np.int64), np.zeros((0, 0), np.float32), np.zeros(0, np.int64), np.zeros(0, np.int8)
    gid = np.concatenate(ids)
    order = np.argsort(gid, kind="stable")
    gid = gid[order]
    if len(gid) > 1 and (np.diff(gid) == 0).any():
        dup = int(gid[1:][np.diff(gid) == 0][0])
        raise InputError(format_problem(f"node shards of {input_url}", "one row per node id",
                                        f"several rows for id {dup}", "run `asepr validate` on the input."))
    return (gid, np.concatenate(feats)[order].astype(np.float32, copy=False),
            np.concatenate(labels)[order].astype(np.int64, copy=False),
            np.concatenate(splits)[order].astype(np.int8, copy=False))


def load_fds_graph(input_url: str | Path, book: PartitionBook, rank: int, *,
                   storage_options: dict | None = None) -> FdsGraph:
    """Rank ``rank``'s share of the input under ``book`` (see the module docstring).

    Raises
    ------
    InputError
        An id out of ``0..num_nodes-1``, a duplicate node row, or an edge whose owned
        endpoint has no node row.
    """
    t0 = time.perf_counter()
    source = open_input(input_url, storage_options)
    undirected = source.undirected
    gid, x, y, split = _owned_rows(input_url, source.node_shards, book, rank)
    srcs, dsts = [], []
    for src, dst in iter_input_edges(source):
        bad = (src < 0) | (src >= book.num_nodes) | (dst < 0) | (dst >= book.num_nodes)
        if bad.any():
            i = int(np.flatnonzero(bad)[0])
            raise InputError(format_problem(f"edge shards of {input_url}", f"node ids in 0..{book.num_nodes - 1}",
                                            f"the edge ({int(src[i])}, {int(dst[i])})",
                                            "run `asepr validate` on the input."))
        mine = book.owner(dst) == rank
        srcs.append(src[mine])
        dsts.append(dst[mine])
        if undirected:
            mine = book.owner(src) == rank
            srcs.append(dst[mine])
            dsts.append(src[mine])
    src = np.concatenate(srcs + [np.zeros(0, np.int64)])
    dst = np.concatenate(dsts + [np.zeros(0, np.int64)])
    del srcs, dsts
    local = np.searchsorted(gid, dst)
    missing = (local >= len(gid)) | (gid[np.minimum(local, max(len(gid) - 1, 0))] != dst) if len(dst) else None
    if missing is not None and missing.any():
        raise InputError(format_problem(f"input {input_url}", "a node row for every edge endpoint",
                                        f"no row for node {int(dst[missing][0])}", "run `asepr validate` on the input."))
    order = np.argsort(local, kind="stable")
    in_ptr = np.zeros(len(gid) + 1, dtype=np.int64)
    np.cumsum(np.bincount(local, minlength=len(gid)), out=in_ptr[1:])
    graph = FdsGraph(
        rank=rank, book=book, global_nid=torch.from_numpy(gid), x=torch.from_numpy(np.ascontiguousarray(x)),
        y=torch.from_numpy(y), split=torch.from_numpy(split), in_ptr=torch.from_numpy(in_ptr),
        in_src=torch.from_numpy(np.ascontiguousarray(src[order])), num_nodes=book.num_nodes, undirected=undirected,
    )
    log.info("rank %d: %d of %d vertices, %d in-edges loaded in %.1f s (peak RSS %.0f MiB)", rank,
             graph.num_owned, book.num_nodes, graph.num_in_edges, time.perf_counter() - t0,
             peak_rss_bytes() / 2**20)
    return graph
