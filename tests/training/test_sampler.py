"""The neighbour sampler of asepr.training.graph.sampler: invariants, determinism and uniformity."""

from __future__ import annotations

import itertools
from collections import Counter

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch_geometric.data import Data
from torch_geometric.loader import LinkLoader, NeighborLoader
from torch_geometric.sampler import NegativeSampling, NodeSamplerInput

from asepr.training.graph.sampler import NeighborSampler, sample_in_edges


def _csr(edge_index: torch.Tensor, n: int) -> tuple[torch.Tensor, torch.Tensor]:
    order = torch.argsort(edge_index[1], stable=True)
    ptr = torch.zeros(n + 1, dtype=torch.int64)
    ptr[1:] = torch.cumsum(torch.bincount(edge_index[1], minlength=n), 0)
    return ptr, edge_index[0][order]


def _hops(n_id: torch.Tensor, sub: torch.Tensor, num_seeds: int) -> list[int]:
    """The hop that brought each position into the sample (0 for the seeds), by BFS over the
    sampled edges from the seeds towards the sources."""
    hop = [-1] * len(n_id)
    for p in range(num_seeds):
        hop[p] = 0
    by_dst: dict[int, list[int]] = {}
    for s, d in zip(sub[0].tolist(), sub[1].tolist()):
        by_dst.setdefault(d, []).append(s)
    frontier, h = list(range(num_seeds)), 0
    while frontier:
        h += 1
        nxt = []
        for d in frontier:
            for s in by_dst.get(d, []):
                if hop[s] < 0:
                    hop[s] = h
                    nxt.append(s)
        frontier = nxt
    return hop


@settings(deadline=None, max_examples=60)
@given(st.integers(1, 40), st.integers(0, 300), st.lists(st.integers(1, 5), min_size=1, max_size=3),
       st.integers(1, 8), st.integers(0, 2**31))
def test_sample_is_a_fanout_bounded_subgraph_of_real_edges(n, m, fanouts, num_seeds, seed):
    rng = np.random.default_rng(seed)
    ei = torch.from_numpy(rng.integers(0, n, (2, m)))  # repeats and self-loops included
    seeds = torch.from_numpy(rng.choice(n, min(n, num_seeds), replace=False))
    n_id, sub = NeighborSampler(ei, n).sample(seeds, tuple(fanouts), torch.Generator().manual_seed(seed))
    k = len(seeds)
    # Seeds first, every node once, and nothing but the seeds and the sampled sources.
    assert torch.equal(n_id[:k], seeds) and len(torch.unique(n_id)) == len(n_id)
    assert sub.dtype == n_id.dtype == torch.int64 and sub.shape[0] == 2
    assert set(n_id.tolist()) == set(seeds.tolist()) | set(n_id[sub[0]].tolist())
    in_edges = [Counter() for _ in range(n)]
    for s, d in zip(ei[0].tolist(), ei[1].tolist()):
        in_edges[d][s] += 1
    got = [Counter() for _ in range(len(n_id))]
    for s, d in zip(n_id[sub[0]].tolist(), sub[1].tolist()):
        got[d][s] += 1
    hop = _hops(n_id, sub, k)
    assert all(h >= 0 for h in hop) and hop == sorted(hop)  # hop by hop, seeds first
    for p, node in enumerate(n_id.tolist()):
        real = in_edges[node]
        # Without replacement: each in-edge at most once (a repeated edge at most as often as it exists).
        assert all(real[s] >= c for s, c in got[p].items())
        drawn = sum(got[p].values())
        if hop[p] < len(fanouts):
            # Expanded once, in its hop: min(in-degree, fanout) in-edges, all of them if few.
            indeg = sum(real.values())
            assert drawn == min(indeg, fanouts[hop[p]])
            if indeg <= fanouts[hop[p]]:
                assert got[p] == real
        else:
            assert drawn == 0


def test_empty_and_isolated_seeds():
    ei = torch.tensor([[1, 2], [2, 1]])
    sampler = NeighborSampler(ei, 4)
    n_id, sub = sampler.sample(torch.tensor([], dtype=torch.int64), (3, 3), torch.Generator().manual_seed(0))
    assert n_id.shape == (0,) and sub.shape == (2, 0)
    n_id, sub = sampler.sample(torch.tensor([0, 3]), (3, 3), torch.Generator().manual_seed(0))
    assert torch.equal(n_id, torch.tensor([0, 3])) and sub.shape == (2, 0)
    n_id, sub = sampler.sample(torch.tensor([1]), (3, 3), torch.Generator().manual_seed(0))
    assert torch.equal(n_id, torch.tensor([1, 2])) and torch.equal(sub, torch.tensor([[1, 0], [0, 1]]))


def _power_law_graph(n: int = 500, m: int = 20_000, seed: int = 0) -> torch.Tensor:
    rng = np.random.default_rng(seed)
    dst = (rng.pareto(1.5, m) * 10).astype(np.int64) % n  # a few hubs with hundreds of in-edges
    return torch.from_numpy(np.stack([rng.integers(0, n, m), dst]))


def test_same_generator_seed_same_sample_and_the_scratch_is_reset():
    ei = _power_law_graph()
    sampler = NeighborSampler(ei, 500)
    seeds = torch.arange(0, 500, 7)
    first = sampler.sample(seeds, (5, 3), torch.Generator().manual_seed(42))
    again = NeighborSampler(ei, 500).sample(seeds, (5, 3), torch.Generator().manual_seed(42))
    repeat = sampler.sample(seeds, (5, 3), torch.Generator().manual_seed(42))
    for a, b in ((first, again), (first, repeat)):
        assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])
    other = sampler.sample(seeds, (5, 3), torch.Generator().manual_seed(43))
    assert not (len(other[0]) == len(first[0]) and torch.equal(other[0], first[0])
                and torch.equal(other[1], first[1]))
    # Consecutive draws from one generator differ: each hop consumes the generator.
    gen = torch.Generator().manual_seed(42)
    a, b = sampler.sample(seeds, (5, 3), gen), sampler.sample(seeds, (5, 3), gen)
    assert not (len(a[1][0]) == len(b[1][0]) and torch.equal(a[1], b[1]) and torch.equal(a[0], b[0]))


def test_sample_in_edges_contract():
    ei = _power_law_graph()
    ptr, src_by_dst = _csr(ei, 500)
    frontier = torch.tensor([3, 0, 3, 499, 17])  # repeats are expanded independently
    seg, src = sample_in_edges(ptr, src_by_dst, frontier, 4, torch.Generator().manual_seed(5))
    deg = ptr[frontier + 1] - ptr[frontier]
    assert torch.equal(torch.bincount(seg, minlength=len(frontier)), deg.clamp(max=4))
    assert bool((seg[1:] >= seg[:-1]).all())
    real = set(map(tuple, ei.t().tolist()))
    assert all((s, d) in real for s, d in zip(src.tolist(), frontier[seg].tolist()))
    seg2, src2 = sample_in_edges(ptr, src_by_dst, frontier, 4, torch.Generator().manual_seed(5))
    assert torch.equal(seg, seg2) and torch.equal(src, src2)
    empty = sample_in_edges(ptr, src_by_dst, torch.tensor([], dtype=torch.int64), 4)
    assert empty[0].shape == empty[1].shape == (0,) and empty[0].dtype == torch.int64


def test_each_in_edge_is_drawn_with_probability_fanout_over_degree():
    deg, fanout, draws = 40, 10, 20_000
    # Node 0's in-edges come from nodes 1..deg; expand it `draws` times in one call.
    ptr = torch.tensor([0, deg] + [deg] * deg)
    src_by_dst = torch.arange(1, deg + 1)
    seg, src = sample_in_edges(ptr, src_by_dst, torch.zeros(draws, dtype=torch.int64), fanout,
                               torch.Generator().manual_seed(2024))
    assert len(src) == draws * fanout
    # Without replacement in every draw.
    per_draw = src.view(draws, fanout)
    assert bool((per_draw.sort(dim=1).values.diff(dim=1) > 0).all())
    # Each edge: Binomial(draws, 1/4), sd ≈ 61; a 6-sd band (seeded, so the test is fixed).
    freq = torch.bincount(src, minlength=deg + 1)[1:].to(torch.float64) / draws
    assert float((freq - fanout / deg).abs().max()) < 6 * (0.25 * 0.75 / draws) ** 0.5


def test_every_subset_is_equally_likely():
    deg, fanout, draws = 5, 2, 30_000
    ptr = torch.tensor([0, deg])
    seg, src = sample_in_edges(ptr, torch.arange(deg), torch.zeros(draws, dtype=torch.int64), fanout,
                               torch.Generator().manual_seed(7))
    pairs = Counter(tuple(sorted(p)) for p in src.view(draws, fanout).tolist())
    assert set(pairs) == set(itertools.combinations(range(deg), fanout))
    # 10 subsets, each Binomial(draws, 0.1): sd ≈ 52 draws; a 6-sd band.
    expected, sd = draws / 10, (draws * 0.1 * 0.9) ** 0.5
    assert max(abs(c - expected) for c in pairs.values()) < 6 * sd


# -- the sampler through PyG's BaseSampler interface and loaders --------------------------

def test_sample_from_nodes_is_sample_with_per_hop_counts():
    ei = _power_law_graph(300, 4_000, seed=5)
    sampler = NeighborSampler(ei, 300, num_neighbors=(4, 3))
    seeds = torch.tensor([7, 0, 150, 42])
    out = sampler.sample_from_nodes(NodeSamplerInput(torch.arange(4), seeds), generator=torch.Generator().manual_seed(9))
    n_id, sub = sampler.sample(seeds, (4, 3), torch.Generator().manual_seed(9))
    assert torch.equal(out.node, n_id) and torch.equal(torch.stack([out.row, out.col]), sub)
    assert sum(out.num_sampled_nodes) == len(out.node) and out.num_sampled_nodes[0] == 4
    assert sum(out.num_sampled_edges) == len(out.row) and len(out.num_sampled_edges) == 2
    assert torch.equal(out.metadata[0], torch.arange(4))
    # The sampler's own generator serves calls that pass none.
    own = NeighborSampler(ei, 300, num_neighbors=(4, 3), generator=torch.Generator().manual_seed(9))
    assert torch.equal(own.sample_from_nodes(NodeSamplerInput(None, seeds)).node, n_id)


def test_repeated_or_out_of_range_seeds_are_refused_and_leave_the_sampler_clean():
    ei = _power_law_graph(50, 400, seed=1)
    sampler = NeighborSampler(ei, 50, num_neighbors=(3,))
    with pytest.raises(ValueError, match="distinct"):
        sampler.sample_from_nodes(NodeSamplerInput(None, torch.tensor([3, 4, 3])))
    with pytest.raises(IndexError, match=r"\[0, 50\)"):
        sampler.sample_from_nodes(NodeSamplerInput(None, torch.tensor([3, 50])))
    assert (sampler._pos == -1).all()
    with pytest.raises(ValueError, match="fanouts >= 1"):
        NeighborSampler(ei, 50, num_neighbors=(3, 0))


def test_from_csc_and_from_edge_index_draw_alike():
    ei = _power_law_graph(200, 2_000, seed=2)
    ptr, row = _csr(ei, 200)
    a = NeighborSampler(ei, 200, (5, 5))
    b = NeighborSampler.from_csc(ptr, row, (5, 5))
    seeds = torch.arange(0, 200, 7)
    oa = a.sample_from_nodes(NodeSamplerInput(None, seeds), generator=torch.Generator().manual_seed(1))
    ob = b.sample_from_nodes(NodeSamplerInput(None, seeds), generator=torch.Generator().manual_seed(1))
    assert torch.equal(oa.node, ob.node) and torch.equal(oa.row, ob.row) and torch.equal(oa.col, ob.col)


def test_node_loader_over_data_batches_are_the_sampler_draws():
    n = 120
    ei = _power_law_graph(n, 1_500, seed=3)
    data = Data(x=torch.randn(n, 4), y=torch.arange(n), edge_index=ei, num_nodes=n)
    gen = torch.Generator().manual_seed(4)
    sampler = NeighborSampler(ei, n, (3, 2), generator=gen)
    loader = NeighborLoader(data, num_neighbors=[3, 2], batch_size=16, input_nodes=torch.arange(0, n, 2),
                            neighbor_sampler=sampler)
    ref = NeighborSampler(ei, n, (3, 2))
    ref_gen = torch.Generator().manual_seed(4)
    batches = list(loader)
    assert len(batches) == 4
    for i, batch in enumerate(batches):
        seeds = torch.arange(0, n, 2)[16 * i: 16 * (i + 1)]
        n_id, sub = ref.sample(seeds, (3, 2), ref_gen)
        assert torch.equal(batch.n_id, n_id) and torch.equal(batch.edge_index, sub)
        assert batch.batch_size == len(seeds) and torch.equal(batch.y[: batch.batch_size], seeds)
        assert torch.equal(batch.x, data.x[n_id])


@pytest.mark.parametrize("mode", ["binary", "triplet"])
def test_link_loader_samples_the_endpoints_and_the_negatives(mode):
    n = 100
    ei = _power_law_graph(n, 1_000, seed=6)
    data = Data(x=torch.randn(n, 4), edge_index=ei, num_nodes=n)
    sampler = NeighborSampler(ei, n, (3,), generator=torch.Generator().manual_seed(2))
    loader = LinkLoader(data, sampler, edge_label_index=ei[:, :64], batch_size=32,
                        neg_sampling=NegativeSampling(mode, amount=1))
    batches = list(loader)
    assert len(batches) == 2
    for i, batch in enumerate(batches):
        pos = ei[:, 32 * i: 32 * (i + 1)]
        if mode == "binary":
            assert torch.equal(batch.n_id[batch.edge_label_index[:, :32]], pos)
            assert batch.edge_label.tolist() == [1.0] * 32 + [0.0] * 32
        else:
            assert torch.equal(batch.n_id[batch.src_index], pos[0])
            assert torch.equal(batch.n_id[batch.dst_pos_index], pos[1])
            assert batch.dst_neg_index.shape == (32,)
        # Every sampled edge is a real edge (positions of n_id), the endpoints are seeds.
        real = set(zip(ei[0].tolist(), ei[1].tolist()))
        assert all((s, d) in real for s, d in zip(batch.n_id[batch.edge_index[0]].tolist(),
                                                  batch.n_id[batch.edge_index[1]].tolist()))
