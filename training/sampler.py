"""A small pure-torch uniform neighbour sampler for mini-batch training.

PyG's ``NeighborLoader`` needs pyg-lib or torch-sparse, which do not install here, so
mini-batch mode samples with plain tensor ops: for each hop, every frontier node keeps
at most ``fanout`` of its in-edges, chosen uniformly **without** replacement (a random
key per in-edge, sorted within the node's segment). The result is the union subgraph of
all hops, relabelled so that the seed nodes come first, the same contract as PyG's
``NeighborLoader`` (``n_id[:batch_size]`` are the seeds).
"""

from __future__ import annotations

import torch

__all__ = ["NeighborSampler", "sample_in_edges"]


def sample_in_edges(ptr: torch.Tensor, src_by_dst: torch.Tensor, frontier: torch.Tensor, fanout: int,
                    generator: torch.Generator | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """One hop: for every ``frontier`` row of a CSR by destination (``ptr``, ``src_by_dst``),
    at most ``fanout`` of its in-edges, uniformly without replacement.

    Returns ``(seg, src)``: ``src[i]`` is a sampled in-neighbour of ``frontier[seg[i]]``
    (``seg`` is non-decreasing). Also the remote half of the fully-decentralized
    baseline's sampler (:mod:`training.fds`), which serves other ranks' frontiers.
    """
    start = ptr[frontier]
    deg = ptr[frontier + 1] - start
    total = int(deg.sum())
    if total == 0:
        empty = torch.empty(0, dtype=torch.int64)
        return empty, src_by_dst[empty]
    seg = torch.repeat_interleave(torch.arange(len(frontier)), deg)
    seg_start = torch.cumsum(deg, 0) - deg
    edge = start[seg] + (torch.arange(total) - seg_start[seg])
    key = seg.to(torch.float64) + torch.rand(total, generator=generator, dtype=torch.float64)
    order = torch.argsort(key)
    seg_sorted = seg[order]
    keep = (torch.arange(total) - seg_start[seg_sorted]) < fanout
    return seg_sorted[keep], src_by_dst[edge[order[keep]]]


class NeighborSampler:
    """Samples in-neighbourhoods over ``edge_index`` (messages flow ``edge_index[0] → [1]``)."""

    def __init__(self, edge_index: torch.Tensor, num_nodes: int):
        dst = edge_index[1]
        order = torch.argsort(dst, stable=True)
        self.src_by_dst = edge_index[0][order].contiguous()
        counts = torch.bincount(dst, minlength=num_nodes)
        self.ptr = torch.zeros(num_nodes + 1, dtype=torch.int64)
        self.ptr[1:] = torch.cumsum(counts, 0)
        self.num_nodes = int(num_nodes)
        # Position of a node in the current sample, -1 when absent; reset after each call.
        self._pos = torch.full((num_nodes,), -1, dtype=torch.int64)

    def sample(self, seeds: torch.Tensor, fanouts: tuple[int, ...], generator: torch.Generator | None = None):
        """Return ``(n_id, edge_index)``: sampled nodes (seeds first) and relabelled edges.

        ``seeds`` must be distinct node ids.
        """
        seeds = seeds.to(torch.int64)
        n_id = [seeds]
        pos = self._pos
        pos[seeds] = torch.arange(len(seeds))
        count = len(seeds)
        frontier = seeds
        src_parts, dst_parts = [], []
        try:
            for fanout in fanouts:
                if not len(frontier):
                    break
                seg, src = sample_in_edges(self.ptr, self.src_by_dst, frontier, fanout, generator)
                if not len(seg):
                    break
                dst = frontier[seg]
                new = torch.unique(src[pos[src] < 0])
                pos[new] = torch.arange(count, count + len(new))
                count += len(new)
                n_id.append(new)
                src_parts.append(pos[src])
                dst_parts.append(pos[dst])
                frontier = new
            nodes = torch.cat(n_id)
        finally:
            pos[torch.cat(n_id)] = -1
        if src_parts:
            edge_index = torch.stack([torch.cat(src_parts), torch.cat(dst_parts)])
        else:
            edge_index = torch.empty((2, 0), dtype=torch.int64)
        return nodes, edge_index
