"""How far one machine goes: the largest |V| and |E| whose planned peak fits a memory size.

For every memory size, feature width d and edge ratio |E|/|V|, a bisection on |V| finds
the largest graph whose ``asepr.pipeline.planning.plan.plan_run`` peak RSS (driver plus local Dask
workers) fits, and prints the disk that run would need (staged until the commit, and
committed). Only the plan's public API is used; nothing is read or run.

Usage (from the repository root)::

    python docs/results/parallel-streams/one_machine.py > docs/results/parallel-streams/one-machine.md
"""

from __future__ import annotations

import argparse

from asepr.pipeline.config import PartitionConfig
from asepr.pipeline.planning.plan import InputSizes, RunPlan, human_bytes, plan_run

GIB = 1 << 30
#: Rows per edge and per node shard, as ``asepr synth`` writes them (1M).
SHARD_ROWS = 1 << 20


def plan_for(num_nodes: int, ratio: float, dim: int, k: int, workers: int, rf: float | None,
             algo: str = "asep") -> RunPlan:
    """The plan of a graph of ``num_nodes`` nodes and ``ratio * num_nodes`` edges."""
    num_edges = int(ratio * num_nodes)
    sizes = InputSizes(
        num_nodes=num_nodes, num_edges=num_edges, feat_dim=dim,
        edge_shards=-(-num_edges // SHARD_ROWS), node_shards=-(-num_nodes // SHARD_ROWS),
        max_edge_shard_rows=min(num_edges, SHARD_ROWS), max_node_shard_rows=min(num_nodes, SHARD_ROWS),
        undirected=True,
    )
    return plan_run(sizes, PartitionConfig(num_parts=k, algo=algo), workers=workers, replication_factor=rf)


def largest_fit(memory: int, ratio: float, dim: int, k: int, workers: int, rf: float | None) -> int:
    """The largest |V| (to 0.1 %) whose planned peak is at most ``memory`` bytes (0: none)."""
    lo, hi = 0, 1 << 20
    while plan_for(hi, ratio, dim, k, workers, rf).peak_bytes <= memory:
        lo, hi = hi, hi * 2
    while hi - lo > max(1, lo // 1000):
        mid = (lo + hi) // 2
        if plan_for(max(mid, 1), ratio, dim, k, workers, rf).peak_bytes <= memory:
            lo = mid
        else:
            hi = mid
    return lo


def _rows(args) -> list[str]:
    rows = []
    for memory_gib, workers in zip(args.memory_gib, args.workers):
        for rf in args.rf:
            rf_value = None if rf == "bound" else float(rf)
            for dim in args.dim:
                for ratio in args.ratio:
                    n = largest_fit(memory_gib * GIB, ratio, dim, args.k, workers, rf_value)
                    plan = plan_for(n, ratio, dim, args.k, workers, rf_value)
                    assignment = next(s for s in plan.stages if s.name == "assignment")
                    rows.append(
                        f"| {memory_gib} GiB | {workers} | {plan.replication_factor:.2f} "
                        f"{'(bound)' if rf_value is None else '(given)'} | {dim} | {ratio:g} | "
                        f"{n / 1e6:,.1f} M | {ratio * n / 1e9:,.2f} G | {human_bytes(plan.peak_bytes)} "
                        f"({plan.peak.name}) | {human_bytes(assignment.driver)} | "
                        f"{human_bytes(plan.disk_bytes)} | {human_bytes(plan.committed_bytes)} |"
                    )
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--memory-gib", nargs="+", type=int, default=[24, 256])
    parser.add_argument("--workers", nargs="+", type=int, default=[2, 4],
                        help="local Dask workers per memory size (asepr's default: min(4, cores))")
    parser.add_argument("--dim", nargs="+", type=int, default=[32, 128])
    parser.add_argument("--ratio", nargs="+", type=float, default=[10, 20])
    parser.add_argument("-k", type=int, default=32)
    parser.add_argument("--rf", nargs="+", default=["bound", "4"],
                        help="'bound' (the plan's default: hashing's RF) or a given RF")
    args = parser.parse_args()
    print(f"asep, k = {args.k}, edge and node shards of {SHARD_ROWS:,} rows, no halo, undirected input.\n")
    print("| memory | workers | RF planned | d | E/V | largest V | E | planned peak (stage) "
          "| assignment stage (driver) | disk (staged) | disk (committed) |")
    print("|---|---:|---|---:|---:|---:|---:|---|---:|---:|---:|")
    print("\n".join(_rows(args)))


if __name__ == "__main__":
    main()
