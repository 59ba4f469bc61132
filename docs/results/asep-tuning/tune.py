"""Tune ASEP variants against the faithful 2ps-hdrf on the streams of `asepr bench partition`.

Usage (from the repository root, after `asepr bench partition --out docs/results/partition-quality`,
whose cached inputs and 2ps-hdrf rows it reads):

    python docs/results/asep-tuning/tune.py "$(cat docs/results/asep-tuning/sweep.json)"

A variant is a dict of PartitionConfig fields; `"_published": true` swaps ASEP's
structural clustering for the published 2PS-L one (exploration only).
"""
import itertools
import json
import sys
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT))
from asepr.pipeline.config import PartitionConfig
from asepr.pipeline.partition import partition
from asepr.pipeline.stages.attr_cluster import attribute_clusters
from asepr.pipeline.stages.degrees import compute_degrees
from asepr.storage.inputs.directory import open_input, read_meta
from asepr.workflows.bench.partition import ordered_inputs

CACHE = ROOT / "docs/results/partition-quality/inputs"
base_rows = pd.read_parquet(ROOT / "docs/results/partition-quality/partition.parquet")

def baseline(ds, order, k, algo="2ps-hdrf"):
    r = base_rows[(base_rows.dataset == ds) & (base_rows.order == order) & (base_rows.k == k) & (base_rows.algo == algo)]
    return float(r.rf.iloc[0])

def run(datasets, ks, orders, variants, out):
    rows = []
    for ds in datasets:
        paths = ordered_inputs(ds, ("shuffled", "natural"), CACHE, 0)
        n = int(read_meta(paths["natural"])["num_nodes"])
        for order in orders:
            src = open_input(paths[order])
            deg = compute_degrees(src.edge_shards, n)
            for k in ks:
                cfg0 = PartitionConfig(num_parts=k, seed=0)
                attr = attribute_clusters(src.node_shards, n, cfg0.attr_clusters, seed=0,
                    max_passes=cfg0.kmeans_max_passes, tol=cfg0.kmeans_tol, sample_size=cfg0.kmeans_sample,
                    projection_dim=cfg0.projection_dim, projection_threshold=cfg0.projection_threshold)
                for name, kw in variants.items():
                    kw = dict(kw)
                    pp = sys.modules["asepr.pipeline.partition"]
                    from asepr.pipeline.stages import struct_cluster as sc
                    if kw.pop("_published", False):
                        pp.structural_clusters = lambda es, d, a, kk, al, passes=1, batch_rows=1<<20: sc.published_clusters(es, d, kk, batch_rows=batch_rows, attr_cluster_id=a, alpha=al)
                    else:
                        pp.structural_clusters = sc.structural_clusters
                    cfg = replace(cfg0, **kw)
                    with partition(src, config=cfg, attr=attr, degrees=deg, validate=False) as a:
                        rf = a.metrics["replication_factor"]; bal = a.metrics["edge_balance"]
                    b = baseline(ds, order, k)
                    rows.append(dict(dataset=ds, order=order, k=k, variant=name, rf=rf, bal=bal, ref=b, ratio=rf / b))
                    print(f"{ds:18s} {order:8s} k={k:<3d} {name:24s} RF {rf:.3f} bal {bal:.3f} 2ps-hdrf {b:.3f} ratio {rf/b:.3f}", flush=True)
    df = pd.DataFrame(rows); df.to_csv(out, index=False)
    print(df.groupby("variant").ratio.agg(["mean", "max", lambda x: (x <= 1.0).sum(), "count"]).to_string())
    return df

if __name__ == "__main__":
    spec = json.loads(sys.argv[1])
    run(spec["datasets"], spec["ks"], spec["orders"], spec["variants"], spec["out"])
