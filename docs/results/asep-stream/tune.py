"""The restream's tuning sweep: ASEP's own stream (no fallback) on the tuning graphs.

Variants: ``p0`` (the single stream), ``pN`` (N restreams, priors of one half at each
endpoint's master) and ``p1c`` (one restream, priors weighted by the first stream's
community volumes). Prints one line per (graph, order, k) beside 2PS-HDRF and HDRF and
appends every row to ``tune.jsonl`` in the working directory.

    ASEPR_DATASETS=/work/shared/datasets python docs/results/asep-stream/tune.py \\
        --cache CACHE --datasets amazon-computers coauthor-physics --variants p0 p1 p1c p2 p3 p4
"""

from __future__ import annotations

import argparse
import functools
import json
import time
from dataclasses import replace
from pathlib import Path
from unittest import mock

import asepr.pipeline.partition as partition_module
from asepr.pipeline import PartitionConfig, attribute_clusters, compute_degrees, partition
from asepr.pipeline.assign.restream import restream_assign
from asepr.storage.inputs.directory import open_input, read_meta
from asepr.workflows.bench.partition import ordered_inputs


def _run(source, config, attr, degrees, prior_volume):
    patched = functools.partial(restream_assign, prior_volume=prior_volume)
    with mock.patch.object(partition_module, "restream_assign", patched):
        t0 = time.perf_counter()
        with partition(source, config=config, attr=attr, degrees=degrees, validate=False) as a:
            return a.metrics, time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--datasets", nargs="+", default=["amazon-computers", "coauthor-physics"])
    ap.add_argument("-k", nargs="+", type=int, default=[4, 8, 16, 32])
    ap.add_argument("--orders", nargs="+", default=["shuffled", "natural"])
    ap.add_argument("--variants", nargs="+", default=["p0", "p1", "p1c", "p2", "p3", "p4"])
    ap.add_argument("--cache", default="inputs")
    args = ap.parse_args()
    cache = Path(args.cache)
    cache.mkdir(parents=True, exist_ok=True)
    with open("tune.jsonl", "a") as out:
        for name in args.datasets:
            paths = ordered_inputs(name, tuple(args.orders), cache, 0)
            num_nodes = int(read_meta(paths["natural"])["num_nodes"])
            for order in args.orders:
                source = open_input(paths[order])
                degrees = compute_degrees(source.edge_shards, num_nodes)
                for k in args.k:
                    base = PartitionConfig(num_parts=k, seed=0)
                    attr = attribute_clusters(
                        source.node_shards, num_nodes, base.attr_clusters, seed=0,
                        max_passes=base.kmeans_max_passes, tol=base.kmeans_tol, sample_size=base.kmeans_sample,
                        projection_dim=base.projection_dim, projection_threshold=base.projection_threshold)
                    line = [f"{name:16s} {order:8s} k={k:<2d}"]
                    for algo in ("2ps-hdrf", "hdrf"):
                        metrics, _ = _run(source, replace(base, algo=algo), attr, degrees, "equal")
                        line.append(f"{algo} {metrics['replication_factor']:.3f}")
                    for variant in args.variants:
                        config = replace(base, two_phase_fallback=False, restream_passes=int(variant[1:2]))
                        prior = "community" if variant.endswith("c") else "equal"
                        metrics, seconds = _run(source, config, attr, degrees, prior)
                        row = {"dataset": name, "order": order, "k": k, "variant": variant,
                               "rf": metrics["replication_factor"], "edge_balance": metrics["edge_balance"],
                               "seconds": seconds}
                        out.write(json.dumps(row) + "\n")
                        line.append(f"{variant} {row['rf']:.3f} (bal {row['edge_balance']:.3f})")
                    print(" | ".join(line), flush=True)


if __name__ == "__main__":
    main()
