"""Remote neighbour sampling and feature fetching (the per-step traffic of FDS).

Both are collectives: **every rank calls them in the same order with the same
fanouts**, also with nothing to ask (it still serves the others). Requests and replies
travel by :meth:`asepr.training.group.comm.Comm.all_to_all`, which counts them by category:

===================  ==========================================================
category             what
===================  ==========================================================
``sampling``         frontier ``global_nid`` sent to their owners (int64) and the
                     replies: per requested vertex its sampled in-degree, then
                     the sampled in-neighbours' ``global_nid`` (int64)
``feature_requests`` ``global_nid`` of the feature rows wanted from each owner
``features``         the feature rows (float32, d per row)
``control``          the row counts every all_to_all sends first (8 bytes a peer)
===================  ==========================================================

A rank's own vertices go through the same code path but never leave the process and
are not counted (``Comm.all_to_all`` counts other ranks' shares only).
"""

from __future__ import annotations

import torch

from asepr.training.group.comm import Comm
from asepr.training.fds.graph import FdsGraph
from asepr.training.graph.sampler import sample_in_edges

__all__ = ["DistNeighborSampler", "FeatureFetcher", "split_by_owner"]


def split_by_owner(graph: FdsGraph, global_nid: torch.Tensor, world_size: int):
    """``(order, counts)``: ``global_nid[order]`` grouped by owner rank 0..W-1 (stable)."""
    owner = graph.book.owner(global_nid)
    order = torch.argsort(owner, stable=True)
    counts = torch.bincount(owner, minlength=world_size)
    return order, counts.tolist()


class FeatureFetcher:
    """Feature rows of any vertices: local rows directly, remote rows from their owners."""

    def __init__(self, graph: FdsGraph, comm: Comm, category: str = "features",
                 request_category: str = "feature_requests"):
        self.graph = graph
        self.comm = comm
        self.category = category
        self.request_category = request_category
        #: Remote rows received, and rows served to other ranks, since construction.
        self.rows_fetched = 0
        self.rows_served = 0

    def fetch(self, global_nid: torch.Tensor) -> torch.Tensor:
        """``x[global_nid]`` as a float32 ``[len, d]`` tensor (a collective)."""
        comm, graph = self.comm, self.graph
        w, me = comm.world_size, comm.rank
        order, counts = split_by_owner(graph, global_nid, w)
        asked = list(torch.split(global_nid[order], counts))
        wanted = comm.all_to_all(asked, self.request_category)
        rows = [graph.x[graph.local_nid(ids)] for ids in wanted]
        got = comm.all_to_all(rows, self.category)
        out = torch.empty((len(global_nid), graph.x.shape[1]), dtype=graph.x.dtype)
        out[order] = torch.cat(got) if got else out[:0]
        self.rows_fetched += sum(len(ids) for j, ids in enumerate(asked) if j != me)
        self.rows_served += sum(len(ids) for j, ids in enumerate(wanted) if j != me)
        return out


class DistNeighborSampler:
    """Uniform neighbour sampling over the partitioned graph, with NeighborSampler's contract.

    Each hop keeps, for every frontier vertex, at most ``fanout`` of its in-edges
    uniformly without replacement (:func:`asepr.training.graph.sampler.sample_in_edges`, run by the
    vertex's owner), and the next frontier is the vertices new to the sample. The
    result is the union subgraph of all hops, relabelled so that the seeds come first:
    ``(n_id, edge_index)`` exactly as :class:`asepr.training.graph.sampler.NeighborSampler` returns
    on the whole graph, with ``n_id`` in ``global_nid``.
    """

    def __init__(self, graph: FdsGraph, comm: Comm, category: str = "sampling"):
        self.graph = graph
        self.comm = comm
        self.category = category

    def _hop(self, frontier: torch.Tensor, fanout: int, generator: torch.Generator | None):
        """Sampled in-edges of ``frontier``: ``(dst_pos, src_global_nid)`` (a collective)."""
        comm, graph = self.comm, self.graph
        w = comm.world_size
        order, counts = split_by_owner(graph, frontier, w)
        asked = list(torch.split(frontier[order], counts))
        wanted = comm.all_to_all(asked, self.category)
        replies = []
        for ids in wanted:  # serve in rank order: the draws are reproducible
            seg, src = sample_in_edges(graph.in_ptr, graph.in_src, graph.local_nid(ids), fanout, generator)
            replies.append(torch.cat([torch.bincount(seg, minlength=len(ids)), src]))
        answers = comm.all_to_all(replies, self.category)
        dst_pos, src_gid = [], []
        positions = torch.split(order, counts)
        for j, reply in enumerate(answers):
            n = counts[j]
            dst_pos.append(torch.repeat_interleave(positions[j], reply[:n]))
            src_gid.append(reply[n:])
        return torch.cat(dst_pos), torch.cat(src_gid)

    def sample(self, seeds: torch.Tensor, fanouts: tuple[int, ...], generator: torch.Generator | None = None):
        """``(n_id, edge_index)`` of the sampled computation graph of ``seeds`` (distinct
        ``global_nid``; may be empty). Runs every hop's collectives even when this rank's
        frontier is empty."""
        seeds = seeds.to(torch.int64)
        n_id = [seeds]
        count = len(seeds)
        frontier, frontier_start = seeds, 0
        src_parts, dst_parts = [], []
        for fanout in fanouts:
            dst_pos, src = self._hop(frontier, fanout, generator)
            known = torch.cat(n_id)
            new = torch.unique(src[~torch.isin(src, known)])
            n_id.append(new)
            src_parts.append(src)
            dst_parts.append(dst_pos + frontier_start)
            frontier, frontier_start = new, count
            count += len(new)
        nodes = torch.cat(n_id)
        src = torch.cat(src_parts) if src_parts else torch.empty(0, dtype=torch.int64)
        dst = torch.cat(dst_parts) if dst_parts else torch.empty(0, dtype=torch.int64)
        sorted_nodes, perm = torch.sort(nodes)
        src_pos = perm[torch.searchsorted(sorted_nodes, src)]
        return nodes, torch.stack([src_pos, dst])
