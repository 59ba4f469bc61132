"""Where each replica's master is: the routing that exact inference sets up once per graph.

A vertex-cut partition stores, for every local row, whether this partition holds the
vertex's master, but not where the master of a replica is. Routing learns it without
reading any other rank's store, through a **directory rank** per vertex (``global_nid
mod W``):

1. every rank sends each of its rows to the vertex's directory rank as one int64,
   ``global_nid · 2 + is_master``;
2. the directory tells every replica holder the rank of the master, and every master
   the ranks of its replicas, one int64 per (replica, master) pair each way:
   ``(global_nid · W + other rank) · 2 + served`` (``served`` is 1 at the master).

Both sides then order the rows of one (replica rank, master rank) pair by
``global_nid``, so the per-layer buffers of :class:`asepr.training.evaluation.inference.ExactInference`
carry no ids. Packing the fields into one word halves the request and divides the
answers by three against sending each field as its own int64; it needs
``(global_nid + 1) · 2W <= 2^63``, checked on every rank before anything is sent.
"""

from __future__ import annotations

import numpy as np
import torch

from asepr.storage.errors import StoreError, format_problem
from asepr.training.group.comm import Comm

__all__ = ["route_replicas"]


def route_replicas(global_nid: torch.Tensor, is_master: torch.Tensor, comm: Comm, category: str, span: int,
                   holder: str) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    """The local rows of every (replica, master) pair, by the other rank (a collective).

    Parameters
    ----------
    global_nid, is_master
        This rank's rows (``global_nid`` sorted) and whether each is the vertex's master.
    comm, category
        The process group and the byte counter's category.
    span
        One more than the largest ``global_nid`` on any rank.
    holder
        What this rank loaded, for messages (e.g. ``"rank 0: partitions [0]"``).

    Returns
    -------
    replica_rows, master_rows
        ``replica_rows[r]``: the sorted local rows whose master is on rank ``r``;
        ``master_rows[r]``: the sorted local master rows of which rank ``r`` holds a replica.
    """
    w = comm.world_size
    if span > 2**63 // (2 * w):  # the largest word, span · 2W - 1, is then below 2^63
        raise StoreError(format_problem(
            f"the vertex ids of the partitions loaded by the {w} ranks", f"global_nid below {2**63 // (2 * w):,}",
            f"{span - 1:,}", "renumber the input's vertices densely (asepr import does)."))
    directory = global_nid % w
    request = global_nid * 2 + is_master.to(torch.int64)
    got = comm.all_to_all([request[directory == d] for d in range(w)], category)
    replies, bad = _directory_replies(got, w)
    told = torch.cat(comm.all_to_all(replies, category))
    if comm.max_int(len(bad)):  # every rank raises, none waits in the next collective
        raise StoreError(format_problem(
            f"the partitions loaded by the {w} ranks ({holder})",
            "exactly one master replica of every vertex",
            f"vertices {bad} with 0 or several masters" if bad else "such vertices (listed by another rank)",
            "load each partition on exactly one rank (asepr.training.graph.data.rank_partitions), all of one generation."))
    served = (told & 1) == 1  # this row is the master; the other rank holds a replica
    other = (told >> 1) % w
    local_nid = torch.searchsorted(global_nid, (told >> 1) // w)
    return _rows_by_rank(local_nid[~served], other[~served], w), _rows_by_rank(local_nid[served], other[served], w)


def _rows_by_rank(local_nid: torch.Tensor, rank: torch.Tensor, w: int) -> list[torch.Tensor]:
    """``local_nid`` split by ``rank``, each part sorted (the order both sides agree on)."""
    return [torch.sort(local_nid[rank == r]).values for r in range(w)]


def _directory_replies(got: list[torch.Tensor], w: int) -> tuple[list[torch.Tensor], list[int]]:
    """A directory rank's answers to the packed rows each rank sent, and up to five
    vertices without exactly one master.

    Every replica holder gets ``(global_nid, master rank, 0)``, every master
    ``(global_nid, replica rank, 1)``, each packed into one int64.
    """
    packed = torch.cat(got).numpy()
    gid, master = packed >> 1, (packed & 1).astype(bool)
    holder = np.repeat(np.arange(w, dtype=np.int64), [len(g) for g in got])
    uniq, inverse = np.unique(gid, return_inverse=True)
    masters = np.bincount(inverse, weights=master, minlength=len(uniq))
    bad = uniq[masters != 1][:5].tolist()
    master_rank = np.zeros(len(uniq), dtype=np.int64)
    master_rank[inverse[master]] = holder[master]
    rep = ~master
    to_replica = (gid[rep] * w + master_rank[inverse[rep]]) * 2
    to_master = (gid[rep] * w + holder[rep]) * 2 + 1
    rows = torch.from_numpy(np.concatenate([to_replica, to_master]))
    dest = torch.from_numpy(np.concatenate([holder[rep], master_rank[inverse[rep]]]))
    return [rows[dest == r] for r in range(w)], bad
