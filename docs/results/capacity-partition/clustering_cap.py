"""The structural clustering's volume cap with capacities 2,1,1,1: 2|E|/k (what asepr
does) against the smallest share's volume, 2|E|/5 (each clustering called as for k = 5,
its k only setting the cap). Prints CSV: graph, cap, stream, RF, edge and master shares.

Usage: python clustering_cap.py WORK   (WORK: run.sh's inputs)
"""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

import numpy as np

from asepr.pipeline.config import PartitionConfig
from asepr.pipeline.partition import partition

run_module = importlib.import_module("asepr.pipeline.partition")  # the module (the package exports the function)

WORK = Path(sys.argv[1])
ORIGINAL = (run_module.structural_clusters, run_module.published_clusters)


def smallest_share_cap(enabled: bool) -> None:
    """Make both clusterings cap communities at 2|E|/5 (enabled) or restore them."""
    structural, published = ORIGINAL
    if not enabled:
        run_module.structural_clusters, run_module.published_clusters = structural, published
        return
    run_module.structural_clusters = lambda shards, degree, attr, k, alpha, **kw: structural(
        shards, degree, attr, 5, alpha, **kw)
    run_module.published_clusters = lambda shards, degree, k, **kw: published(shards, degree, 5, **kw)


print("graph,cap,stream,rf,edge_shares,master_shares")
for graph in ("amazon-computers", "synth-5m"):
    for cap, enabled in (("2E/k", False), ("2E x min share", True)):
        smallest_share_cap(enabled)
        for stream, fallback in (("asep", False), ("asep with fallback", True)):
            config = PartitionConfig(num_parts=4, capacities=(2, 1, 1, 1), two_phase_fallback=fallback)
            with partition(WORK / graph, config=config) as result:
                loads, masters = np.array(result.metrics["loads"]), np.array(result.metrics["masters"])
                print(f"{graph},{cap},{stream},{result.metrics['replication_factor']:.4f},"
                      f"{' '.join(f'{x:.3f}' for x in loads / loads.sum())},"
                      f"{' '.join(f'{x:.3f}' for x in masters / masters.sum())}", flush=True)
smallest_share_cap(False)
