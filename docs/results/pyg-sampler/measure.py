"""Sampling speed of the neighbour sampler: direct calls against PyG's BaseSampler interface.

Side by side in one process, on one graph, with the same seeds and generator seeds:

* ``direct``: :meth:`asepr.training.graph.sampler.NeighborSampler.sample_hops`, the numba hops and
  relabelling that the trainers called before the sampler was a BaseSampler, plus the
  ``torch.stack`` of the old ``sample()``;
* ``sample_from_nodes``: the BaseSampler call the trainers make now (a ``NodeSamplerInput``
  in, a ``SamplerOutput`` out);
* ``NodeLoader``: PyG's ``NodeLoader`` over a ``Data`` without node attributes, driving the
  sampler through ``sample_from_nodes`` (batching and collation included; no features to
  gather, so the difference is the loader's own overhead).

The three run in rotating order, ``--rounds`` times over the same batches; the figure is
the median over rounds of the time per batch.

    python docs/results/pyg-sampler/measure.py --nodes 200000 --edges 4000000 \\
        --batch 1024 --fanouts 10 10 --batches 100 --rounds 7
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import numpy as np
import torch
from torch_geometric.data import Data
from torch_geometric.loader import NodeLoader
from torch_geometric.sampler import NodeSamplerInput

from asepr.training.graph.sampler import NeighborSampler


def power_law_graph(n: int, m: int, seed: int) -> torch.Tensor:
    """``m`` edges whose endpoints follow a Zipf-like degree distribution over ``n`` nodes."""
    rng = np.random.default_rng(seed)
    weights = 1.0 / np.arange(1, n + 1) ** 0.8
    weights /= weights.sum()
    src = rng.choice(n, m, p=weights)
    dst = rng.choice(n, m, p=weights)
    perm = rng.permutation(n)
    return torch.from_numpy(np.stack([perm[src], perm[dst]]))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, default=200_000)
    ap.add_argument("--edges", type=int, default=4_000_000)
    ap.add_argument("--batch", type=int, default=1024)
    ap.add_argument("--fanouts", type=int, nargs="+", default=[10, 10])
    ap.add_argument("--batches", type=int, default=100)
    ap.add_argument("--rounds", type=int, default=7)
    args = ap.parse_args()
    torch.set_num_threads(1)
    fanouts = tuple(args.fanouts)
    edge_index = power_law_graph(args.nodes, args.edges, 0)
    sampler = NeighborSampler(edge_index, args.nodes, fanouts)
    order = torch.randperm(args.nodes, generator=torch.Generator().manual_seed(1))
    seeds = list(torch.split(order[: args.batch * args.batches], args.batch))
    data = Data(edge_index=edge_index, num_nodes=args.nodes)

    def direct(gen):
        for s in seeds:
            node, row, col, _, _ = sampler.sample_hops(s, fanouts, gen)
            torch.stack([row, col])

    def interface(gen):
        for s in seeds:
            out = sampler.sample_from_nodes(NodeSamplerInput(None, s), generator=gen)
            torch.stack([out.row, out.col])

    def loader(gen):
        sampler.generator = gen
        for _ in NodeLoader(data, sampler, input_nodes=torch.cat(seeds), batch_size=args.batch):
            pass
        sampler.generator = None

    ways = {"direct": direct, "sample_from_nodes": interface, "NodeLoader": loader}
    for fn in ways.values():  # compile and warm the page cache
        fn(torch.Generator().manual_seed(0))
    times: dict[str, list[float]] = {k: [] for k in ways}
    names = list(ways)
    for r in range(args.rounds):
        for name in names[r % 3:] + names[: r % 3]:
            gen = torch.Generator().manual_seed(100 + r)
            t0 = time.perf_counter()
            ways[name](gen)
            times[name].append((time.perf_counter() - t0) / args.batches * 1e3)
    # Same draws: the direct and interface paths give the same sample for the same generator.
    a = sampler.sample_hops(seeds[0], fanouts, torch.Generator().manual_seed(5))
    b = sampler.sample_from_nodes(NodeSamplerInput(None, seeds[0]), generator=torch.Generator().manual_seed(5))
    assert torch.equal(a[0], b.node) and torch.equal(a[1], b.row) and torch.equal(a[2], b.col)
    base = statistics.median(times["direct"])
    result = {
        "graph": {"nodes": args.nodes, "edges": args.edges}, "batch": args.batch, "fanouts": list(fanouts),
        "batches": args.batches, "rounds": args.rounds,
        "ms_per_batch_median": {k: round(statistics.median(v), 3) for k, v in times.items()},
        "ms_per_batch_all": {k: [round(x, 3) for x in v] for k, v in times.items()},
        "ratio_to_direct": {k: round(statistics.median(v) / base, 3) for k, v in times.items()},
    }
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
