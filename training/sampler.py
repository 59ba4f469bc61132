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
"""

from __future__ import annotations

import numba
import numpy as np
import torch

__all__ = ["NeighborSampler", "sample_in_edges"]


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
    (:mod:`training.fds`), which serves other ranks' frontiers.

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


class NeighborSampler:
    """Samples in-neighbourhoods over ``edge_index`` (messages flow ``edge_index[0] → [1]``).

    Parameters
    ----------
    edge_index
        ``[2, m]`` int64 node ids in ``range(num_nodes)``.
    num_nodes
        The number of nodes.
    """

    def __init__(self, edge_index: torch.Tensor, num_nodes: int):
        src = _int64_array(edge_index[0])
        dst = _int64_array(edge_index[1])
        order = np.argsort(dst, kind="stable")
        self.src_by_dst = np.ascontiguousarray(src[order])
        self.ptr = np.zeros(num_nodes + 1, dtype=np.int64)
        np.cumsum(np.bincount(dst, minlength=num_nodes), out=self.ptr[1:])
        self.num_nodes = int(num_nodes)
        # Position of a node in the current sample, -1 when absent; reset after each call.
        self._pos = np.full(num_nodes, -1, dtype=np.int64)

    def sample(self, seeds: torch.Tensor, fanouts: tuple[int, ...],
               generator: torch.Generator | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """The sampled computation graph of ``seeds``, one hop per fanout.

        Parameters
        ----------
        seeds
            Distinct node ids.
        fanouts
            The most in-edges kept per expanded node, hop by hop (each >= 1). Hop ``h``
            expands only the nodes that hop ``h - 1`` added to the sample.
        generator
            The source of randomness; the same generator state gives the same sample.

        Returns
        -------
        (n_id, edge_index)
            ``n_id``: the sampled nodes, ``n_id[:len(seeds)] == seeds``, then each hop's
            new nodes in order of first appearance. ``edge_index``: the sampled edges
            relabelled into positions of ``n_id`` (``[2, e]`` int64).
        """
        seeds_np = _int64_array(seeds)
        pos = self._pos
        n_id = [seeds_np]
        pos[seeds_np] = np.arange(len(seeds_np))
        count, frontier_start, frontier = len(seeds_np), 0, seeds_np
        src_parts, dst_parts = [], []
        try:
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
        if not src_parts:
            return nodes, torch.empty((2, 0), dtype=torch.int64)
        return nodes, torch.from_numpy(np.stack([np.concatenate(src_parts), np.concatenate(dst_parts)]))
