"""Seconds of ASEP's partition() (defaults: fallback on a thread) per cell, best of 3; attribute ids cached in $ATTR_CACHE, inputs in $CACHE (NOFB=1: no fallback)."""
import json, sys, time, os
from pathlib import Path
import numpy as np
from dataclasses import replace
from asepr.pipeline import PartitionConfig, attribute_clusters, compute_degrees, partition
from asepr.pipeline.stages.attr_cluster import AttrClusters
from asepr.storage.inputs.directory import open_input, read_meta
from asepr.workflows.bench.partition import ordered_inputs
label, out = sys.argv[1], sys.argv[2]
datasets = sys.argv[3:]
cache = Path(os.environ.get("CACHE", "inputs")); acache = Path(os.environ.get("ATTR_CACHE", "attr")); acache.mkdir(parents=True, exist_ok=True)
rows = []
for name in datasets:
    paths = ordered_inputs(name, ("shuffled", "natural"), cache, 0)
    n = int(read_meta(paths["natural"])["num_nodes"])
    for order in ("shuffled", "natural"):
        src = open_input(paths[order]); deg = compute_degrees(src.edge_shards, n)
        for k in (4, 8, 16, 32):
            f = acache / f"{name}-{order}-{k}.npy"
            if not f.exists():
                cfg = PartitionConfig(num_parts=k)
                a = attribute_clusters(src.node_shards, n, cfg.attr_clusters, seed=0, max_passes=cfg.kmeans_max_passes,
                                       tol=cfg.kmeans_tol, sample_size=cfg.kmeans_sample,
                                       projection_dim=cfg.projection_dim, projection_threshold=cfg.projection_threshold)
                np.save(f, a.attr_cluster_id)
            ids = np.load(f)
            attr = AttrClusters(ids, None, int(ids.max()) + 1, 0, 0.0, True, "kmeans")
            best = 1e9
            for rep in range(3):
                t0 = time.perf_counter()
                with partition(src, config=PartitionConfig(num_parts=k, two_phase_fallback=os.environ.get("NOFB") is None), attr=attr, degrees=deg, validate=False) as r:
                    m = r.metrics
                best = min(best, time.perf_counter() - t0)
            rows.append(dict(label=label, dataset=name, order=order, k=k, seconds=best, rf=m["replication_factor"],
                             own=m.get("two_phase_fallback", {}).get("asep_rf", m["replication_factor"]), kept=m.get("two_phase_fallback", {}).get("chosen", "asep"),
                             bal=m["edge_balance"]))
            if label == "after":
                with partition(src, config=PartitionConfig(num_parts=k, restream_passes=2, two_phase_fallback=False),
                               attr=attr, degrees=deg, validate=False) as r:
                    rows[-1]["own_p2"] = r.metrics["replication_factor"]
                    rows[-1]["bal_p2"] = r.metrics["edge_balance"]
            print(rows[-1], flush=True)
with open(out, "a") as fh:
    for r in rows: fh.write(json.dumps(r) + "\n")
