"""The memory and disk plan over 5,328 configurations, as one JSON line (compare by md5).

``python plan_configurations.py | md5sum``: three input sizes (Cora, a 50M-edge
synthetic graph in shards, a 40G-edge graph) × every algorithm × k = 4, 65, 256 ×
halo 0/1 × 0 or 3 workers × local or remote × five option sets × planned or given RF;
every stage's driver, worker and written bytes, the staged and committed disk, and
the printed table. It reads nothing and runs no partitioning.
"""
import itertools
import json

from pipeline.plan import InputSizes, plan_run
from pipeline.config import PartitionConfig
out = []
sizes = [InputSizes(num_nodes=2708, num_edges=10556, feat_dim=1433),
         InputSizes(num_nodes=5_000_000, num_edges=50_000_000, feat_dim=32, edge_shards=8, node_shards=4,
                    max_edge_shard_rows=7_000_000, max_node_shard_rows=1_300_000, undirected=True),
         InputSizes(num_nodes=3_000_000_000, num_edges=40_000_000_000, feat_dim=300, edge_shards=400, node_shards=100)]
algos = ["asep", "2ps-l", "2ps-hdrf", "hdrf", "dbh", "greedy", "hash", "metis"]
for sz, algo, k, halo, workers, remote, extra in itertools.product(
        sizes, algos, [4, 65, 256], [0, 1], [0, 3], [False, True],
        [{}, {"attr_column": "y"}, {"memory_budget": 1 << 30}, {"concurrent_fallback": False}, {"two_phase_fallback": False}]):
    try:
        cfg = PartitionConfig(num_parts=k, algo=algo, **extra)
    except Exception as exc:
        out.append([algo, k, str(extra), "config error", type(exc).__name__]); continue
    for rf in (None, 1.7):
        try:
            p = plan_run(sz, cfg, halo=halo, workers=workers, remote=remote, replication_factor=rf, threads=4,
                         driver_base=123456789)
        except Exception as exc:
            out.append([algo, k, str(extra), "error", type(exc).__name__, str(exc)[:80]]); continue
        out.append([sz.num_nodes, algo, k, halo, workers, remote, str(extra), rf,
                    [(s.name, s.driver, s.workers, s.written) for s in p.stages], p.staging_bytes, p.committed_bytes,
                    p.replication_factor, p.table()])
print(json.dumps(out))
