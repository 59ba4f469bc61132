"""The ``metis`` reference: an offline METIS vertex partition, for small graphs only.

METIS partitions the vertices of the whole (symmetrised, simple) graph in memory; the
assignment kernel then treats each vertex's METIS part as its community's partition.
It is a quality reference, not a streaming algorithm: its memory grows with |E|. With
shares (:mod:`asepr.pipeline.capacity`) METIS is asked for parts of those target weights
(``tpwgts``), and the kernel's caps and balance term follow the shares as for ASEP.
"""

from __future__ import annotations

import numpy as np

from asepr.pipeline.planning.needs import Need, RunShape
from asepr.pipeline.stream import iter_edge_batches
from asepr.storage.locations.fs import Shard

__all__ = ["metis_membership", "metis_needs"]


def _symmetric_csr(edge_shards: list[Shard], num_nodes: int, batch_rows: int) -> tuple[np.ndarray, np.ndarray]:
    """``(xadj, adjncy)`` of the symmetrised graph without self-loops or repeated edges."""
    n = num_nodes
    srcs, dsts = [], []
    for batch in iter_edge_batches(edge_shards, batch_rows):
        keep = batch.src != batch.dst
        srcs.append(batch.src[keep])
        dsts.append(batch.dst[keep])
    src = np.concatenate(srcs + [np.zeros(0, np.int64)])
    dst = np.concatenate(dsts + [np.zeros(0, np.int64)])
    a = np.concatenate([src, dst])
    b = np.concatenate([dst, src])
    key = np.unique(a * n + b)
    a, b = key // n, key % n
    xadj = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(np.bincount(a, minlength=n), out=xadj[1:])
    return xadj, b


def metis_membership(edge_shards: list[Shard], num_nodes: int, num_parts: int, seed: int,
                     batch_rows: int, shares: tuple[float, ...] | None = None) -> np.ndarray:
    """The METIS part (int32) of every vertex, for ``num_parts`` parts.

    Parameters
    ----------
    edge_shards
        The edge shards (read whole into memory).
    num_nodes
        N.
    num_parts, seed
        k and METIS's seed.
    batch_rows
        Rows per decoded batch.
    shares
        Each part's target share of the vertices (None: equal parts).
    """
    import pymetis

    if num_parts == 1:
        return np.zeros(num_nodes, dtype=np.int32)
    xadj, adjncy = _symmetric_csr(edge_shards, num_nodes, batch_rows)
    opts = pymetis.Options(seed=seed)
    weights = {} if shares is None else {"tpwgts": [float(s) for s in shares]}
    adjacency = pymetis.CSRAdjacency(xadj, adjncy) if hasattr(pymetis, "CSRAdjacency") else None
    if adjacency is not None:
        _, membership = pymetis.part_graph(num_parts, adjacency, options=opts, **weights)
    else:
        _, membership = pymetis.part_graph(num_parts, xadj=xadj, adjncy=adjncy, options=opts, **weights)
    return np.asarray(membership, dtype=np.int32)


def metis_needs(s: RunShape) -> Need:
    """Memory of :func:`metis_membership`, in memory: src/dst lists and their
    concatenations, both directions, the unique sorted keys and the CSR: about 16 int64
    per edge row, plus METIS's own copy of the graph (estimated, not derived), beside
    ``degree`` and ``attr_cluster_id``."""
    held = 12 * s.n
    return Need(driver=held + 128 * s.e + 48 * s.e + 16 * s.n)
