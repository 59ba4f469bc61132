"""A uniform neighbour sampler for mini-batch training, compiled with numba.

PyG's ``NeighborLoader`` needs pyg-lib or torch-sparse, which do not install here, so
mini-batch mode samples over a CSR by destination with two small numba kernels:

* one hop (:func:`sample_in_edges`): every frontier node keeps at most ``fanout`` of its
  in-edges, chosen uniformly **without** replacement (Floyd's algorithm over the node's
  CSR segment; a node with at most ``fanout`` in-edges keeps all of them);
* relabelling: the sources new to the sample get the next positions, in order of first
  appearance, and become the next hop's frontier.

The result is the union subgraph of all hops, relabelled so that the seed nodes come
first, the same contract as PyG's ``NeighborLoader`` (``n_id[:batch_size]`` are the
seeds). The draws are a function of the ``torch.Generator`` alone: each hop takes one
seed from it for a splitmix64 stream private to the kernel (numba's global random state
is left alone).

:class:`NeighborSampler` is a ``torch_geometric.sampler.BaseSampler``: PyG's
``NodeLoader``, ``LinkLoader`` and ``NeighborLoader(..., neighbor_sampler=...)`` drive it
over a ``Data``-like edge list or over a ``GraphStore``'s ``csc`` layout
(:mod:`asepr.training.graph.pyg_store` holds a partition's), and the trainers
(:mod:`asepr.training.tasks`) call the same ``sample_from_nodes``.
"""

from __future__ import annotations

from collections.abc import Sequence

import numba
import numpy as np
import torch
from torch_geometric.data.graph_store import EdgeLayout
from torch_geometric.sampler import (
    BaseSampler,
    EdgeSamplerInput,
    NegativeSampling,
    NodeSamplerInput,
    SamplerOutput,
)
from torch_geometric.sampler.neighbor_sampler import edge_sample

__all__ = ["NeighborSampler", "csc_by_destination", "sample_in_edges"]


@numba.njit(cache=True, inline="always")
def _splitmix64(state):
    state[0] += np.uint64(0x9E3779B97F4A7C15)
    z = state[0]
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return z ^ (z >> np.uint64(31))


@numba.njit(cache=True, inline="always")
def _below(state, bound):
    # Lemire's multiply-shift on 32 random bits: uniform in range(bound) up to bound / 2**32.
    return np.int64(((_splitmix64(state) >> np.uint64(32)) * np.uint64(bound)) >> np.uint64(32))


@numba.njit(cache=True)
def _sample_hop(ptr, src_by_dst, frontier, fanout, seed):
    state = np.full(1, seed, dtype=np.uint64)
    n = frontier.shape[0]
    total = 0
    for i in range(n):
        node = frontier[i]
        total += min(ptr[node + 1] - ptr[node], fanout)
    seg = np.empty(total, dtype=np.int64)
    src = np.empty(total, dtype=np.int64)
    pick = np.empty(fanout, dtype=np.int64)
    k = 0
    for i in range(n):
        node = frontier[i]
        start = ptr[node]
        deg = ptr[node + 1] - start
        if deg <= fanout:
            for j in range(deg):
                seg[k] = i
                src[k] = src_by_dst[start + j]
                k += 1
            continue
        # Floyd's algorithm: a uniform fanout-subset of range(deg) in fanout draws.
        for c in range(fanout):
            j = deg - fanout + c
            t = _below(state, j + 1)
            for q in range(c):
                if pick[q] == t:
                    t = j
                    break
            pick[c] = t
        for c in range(fanout):
            seg[k] = i
            src[k] = src_by_dst[start + pick[c]]
            k += 1
    return seg, src


@numba.njit(cache=True)
def _relabel(src, pos, count):
    new = np.empty(src.shape[0], dtype=np.int64)
    src_pos = np.empty(src.shape[0], dtype=np.int64)
    m = 0
    for i in range(src.shape[0]):
        node = src[i]
        p = pos[node]
        if p < 0:
            p = count + m
            pos[node] = p
            new[m] = node
            m += 1
        src_pos[i] = p
    return new[:m].copy(), src_pos


def _hop_seed(generator: torch.Generator | None) -> np.uint64:
    """A seed for the kernel's splitmix64 stream, drawn from ``generator``."""
    return np.uint64(int(torch.randint(0, 2**63 - 1, (1,), generator=generator, dtype=torch.int64)))


def _int64_array(t: torch.Tensor) -> np.ndarray:
    return np.ascontiguousarray(t.to(torch.int64).numpy())


def sample_in_edges(ptr: torch.Tensor, src_by_dst: torch.Tensor, frontier: torch.Tensor, fanout: int,
                    generator: torch.Generator | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """One hop: at most ``fanout`` in-edges of every ``frontier`` row of a CSR by destination.

    Also the remote half of the fully-decentralized baseline's sampler
    (:mod:`asepr.training.fds`), which serves other ranks' frontiers.

    Parameters
    ----------
    ptr, src_by_dst
        The CSR by destination: the in-edges of row ``v`` are
        ``src_by_dst[ptr[v]:ptr[v + 1]]`` (int64).
    frontier
        The rows to expand (int64; repeats are expanded independently).
    fanout
        The most in-edges kept per row (>= 1), chosen uniformly without replacement; a
        row with at most ``fanout`` in-edges keeps all of them.
    generator
        The source of randomness (torch's default generator when ``None``).

    Returns
    -------
    (seg, src)
        ``src[i]`` is a sampled in-neighbour of ``frontier[seg[i]]``; ``seg`` is
        non-decreasing. Both int64.
    """
    seg, src = _sample_hop(_int64_array(ptr), _int64_array(src_by_dst), _int64_array(frontier), int(fanout),
                           _hop_seed(generator))
    return torch.from_numpy(seg), torch.from_numpy(src)


def csc_by_destination(edge_index: torch.Tensor, num_nodes: int) -> tuple[np.ndarray, np.ndarray]:
    """The CSR by destination (PyG's ``csc`` layout) of ``edge_index``: ``(ptr, src_by_dst)``.

    The in-edges of ``v`` are ``src_by_dst[ptr[v]:ptr[v + 1]]`` in the order they have in
    ``edge_index`` (a stable sort), which fixes the sampler's draws for a given edge list.
    """
    src = _int64_array(edge_index[0])
    dst = _int64_array(edge_index[1])
    order = np.argsort(dst, kind="stable")
    ptr = np.zeros(int(num_nodes) + 1, dtype=np.int64)
    np.cumsum(np.bincount(dst, minlength=int(num_nodes)), out=ptr[1:])
    return ptr, np.ascontiguousarray(src[order])


class NeighborSampler(BaseSampler):
    """Samples in-neighbourhoods over ``edge_index`` (messages flow ``edge_index[0] → [1]``).

    Parameters
    ----------
    edge_index
        ``[2, m]`` int64 node ids in ``range(num_nodes)``.
    num_nodes
        The number of nodes.
    num_neighbors
        The fanouts :meth:`sample_from_nodes` uses (hop by hop, each >= 1).
    generator
        The source of randomness of :meth:`sample_from_nodes` when a call passes none
        (torch's default generator when ``None``).
    """

    def __init__(self, edge_index: torch.Tensor, num_nodes: int, num_neighbors: Sequence[int] = (),
                 generator: torch.Generator | None = None):
        ptr, src_by_dst = csc_by_destination(edge_index, num_nodes)
        self._init_csc(ptr, src_by_dst, num_neighbors, generator)

    @classmethod
    def from_csc(cls, ptr, src_by_dst, num_neighbors: Sequence[int] = (),
                 generator: torch.Generator | None = None) -> NeighborSampler:
        """A sampler over a CSR by destination (PyG's ``csc``: ``colptr`` and ``row``)."""
        self = cls.__new__(cls)
        self._init_csc(np.ascontiguousarray(np.asarray(ptr), dtype=np.int64),
                       np.ascontiguousarray(np.asarray(src_by_dst), dtype=np.int64), num_neighbors, generator)
        return self

    @classmethod
    def from_graph_store(cls, graph_store, num_neighbors: Sequence[int], generator: torch.Generator | None = None,
                         edge_type=None) -> NeighborSampler:
        """A sampler over a PyG ``GraphStore``'s ``csc`` layout of ``edge_type`` (homogeneous:
        None), or over its edges converted to ``csc`` (``GraphStore.csc``) where it lists none."""
        for attr in graph_store.get_all_edge_attrs():
            if attr.edge_type == edge_type and attr.layout == EdgeLayout.CSC:
                row, colptr = graph_store.get_edge_index(attr)
                break
        else:
            rows, colptrs, _ = graph_store.csc([edge_type])
            row, colptr = rows[edge_type], colptrs[edge_type]
        return cls.from_csc(colptr, row, num_neighbors, generator)

    def _init_csc(self, ptr: np.ndarray, src_by_dst: np.ndarray, num_neighbors: Sequence[int],
                  generator: torch.Generator | None) -> None:
        if any(int(f) < 1 for f in num_neighbors):
            raise ValueError(f"num_neighbors must be fanouts >= 1 per hop, got {list(num_neighbors)}")
        self.ptr, self.src_by_dst = ptr, src_by_dst
        self.num_nodes = int(len(ptr) - 1)
        self.num_neighbors = tuple(int(f) for f in num_neighbors)
        self.generator = generator
        # Position of a node in the current sample, -1 when absent; reset after each call.
        self._pos = np.full(self.num_nodes, -1, dtype=np.int64)

    # -- torch_geometric.sampler.BaseSampler ---------------------------------------------
    def sample_from_nodes(self, index: NodeSamplerInput, *, generator: torch.Generator | None = None,
                          num_neighbors: Sequence[int] | None = None, **kwargs) -> SamplerOutput:
        """The sampled computation graph of ``index.node`` (distinct node ids).

        ``generator`` and ``num_neighbors`` override the sampler's own for this call.
        ``node`` holds the seeds first, then each hop's new nodes in order of first
        appearance; ``row``/``col`` are the sampled edges as positions of ``node``
        (messages flow ``row → col``); ``metadata`` is ``(input_id, time)`` as PyG's
        loaders expect. Edge ids are not tracked (``edge`` is None).
        """
        fanouts = self.num_neighbors if num_neighbors is None else tuple(num_neighbors)
        gen = self.generator if generator is None else generator
        node, row, col, nodes_per_hop, edges_per_hop = self.sample_hops(index.node, fanouts, gen)
        return SamplerOutput(node=node, row=row, col=col, edge=None, num_sampled_nodes=nodes_per_hop,
                             num_sampled_edges=edges_per_hop, metadata=(index.input_id, index.time))

    def sample_from_edges(self, index: EdgeSamplerInput,
                          neg_sampling: NegativeSampling | None = None) -> SamplerOutput:
        """The computation graph of the endpoints of ``index``'s edges (and of negatives).

        PyG's own edge-sampling contract (``torch_geometric.sampler.neighbor_sampler.edge_sample``,
        non-disjoint): the endpoints are deduplicated, sampled as seeds, and ``metadata``
        holds the label index (binary) or the triplet indices. Negatives are drawn by
        ``neg_sampling`` (torch's default generator, as in PyG); neighbours by this sampler.
        """
        def sample_fn(seed: torch.Tensor, seed_time: torch.Tensor | None) -> SamplerOutput:
            return self.sample_from_nodes(NodeSamplerInput(None, seed, seed_time))

        return edge_sample(index, sample_fn, self.num_nodes, False, None, neg_sampling)

    def sample(self, seeds: torch.Tensor, fanouts: tuple[int, ...],
               generator: torch.Generator | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """``(n_id, edge_index)`` of :meth:`sample_from_nodes` for ``seeds`` (same draws)."""
        out = self.sample_from_nodes(NodeSamplerInput(None, seeds), generator=generator, num_neighbors=fanouts)
        return out.node, torch.stack([out.row, out.col])

    def sample_hops(self, seeds: torch.Tensor, fanouts: tuple[int, ...], generator: torch.Generator | None):
        """The sampling itself, hop by hop: ``(node, row, col, nodes per hop, edges per hop)``.

        Hop ``h`` expands only the nodes that hop ``h - 1`` added to the sample, each
        keeping at most ``fanouts[h]`` in-edges; the same generator state gives the same
        sample. :meth:`sample_from_nodes` wraps it in PyG's ``SamplerOutput``.
        """
        seeds_np = _int64_array(seeds)
        pos = self._pos
        n_id = [seeds_np]
        if len(seeds_np) and (seeds_np.min() < 0 or seeds_np.max() >= self.num_nodes):
            raise IndexError(f"seed node ids must lie in [0, {self.num_nodes}), got "
                             f"[{int(seeds_np.min())}, {int(seeds_np.max())}]")
        order = np.arange(len(seeds_np))
        pos[seeds_np] = order
        count, frontier_start, frontier = len(seeds_np), 0, seeds_np
        src_parts, dst_parts = [], []
        try:
            if not np.array_equal(pos[seeds_np], order):  # a repeated seed kept its last position only
                raise ValueError("seed node ids must be distinct (deduplicate them, e.g. with torch.unique)")
            for fanout in fanouts:
                if not len(frontier):
                    break
                seg, src = _sample_hop(self.ptr, self.src_by_dst, frontier, int(fanout), _hop_seed(generator))
                new, src_pos = _relabel(src, pos, count)
                src_parts.append(src_pos)
                dst_parts.append(seg + frontier_start)
                n_id.append(new)
                frontier_start, count, frontier = count, count + len(new), new
        finally:
            for part in n_id:
                pos[part] = -1
        nodes = torch.from_numpy(np.concatenate(n_id))
        nodes_per_hop = [len(part) for part in n_id]
        edges_per_hop = [len(part) for part in src_parts]
        if not src_parts:
            empty = torch.empty(0, dtype=torch.int64)
            return nodes, empty, empty.clone(), nodes_per_hop, edges_per_hop
        return (nodes, torch.from_numpy(np.concatenate(src_parts)), torch.from_numpy(np.concatenate(dst_parts)),
                nodes_per_hop, edges_per_hop)
