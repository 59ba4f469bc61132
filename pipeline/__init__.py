"""Partitioning algorithms and their stages (DESIGN.md section 4).

``pipeline.partition(input, k, algo=...)`` runs a whole partitioning and returns an
:class:`Assignment`; the stage functions are exported for reuse (incremental ingest,
benchmarks). ``pipeline.ingest(out, new_edges, nodes)`` adds new shards to a committed
output as its next generation, and ``pipeline.rebalance(out)`` moves whole communities
off partitions past the cap (DESIGN.md section 6).
"""

from pipeline.assign import MODES, AssignState, assign_batch, replica_sets
from pipeline.attr_cluster import AttrClusters, AttrModel, attribute_clusters
from pipeline.attr_column import column_clusters
from pipeline.config import ALGORITHMS, SCORINGS, PartitionConfig
from pipeline.degrees import Degrees, compute_degrees
from pipeline.ingest import ingest
from pipeline.mapping import CommunityMapping, map_communities
from pipeline.masters import choose_masters, count_edges_per_replica, replica_offsets
from pipeline.metrics import partition_metrics
from pipeline.partition import Assignment, edge_cap, partition
from pipeline.rebalance import rebalance
from pipeline.shuffle import shuffle_edges
from pipeline.stream import EdgeBatch, iter_edge_batches
from pipeline.struct_cluster import Communities, structural_clusters
from pipeline.synth import SynthConfig, generate
from pipeline.verify import Problem, VerifyReport, verify_output
from pipeline.write import partition_to_store, write_partitions

__all__ = [
    "Problem",
    "VerifyReport",
    "partition_to_store",
    "verify_output",
    "write_partitions",
    "ALGORITHMS",
    "Assignment",
    "AssignState",
    "AttrClusters",
    "AttrModel",
    "Communities",
    "CommunityMapping",
    "Degrees",
    "EdgeBatch",
    "MODES",
    "PartitionConfig",
    "SCORINGS",
    "SynthConfig",
    "assign_batch",
    "attribute_clusters",
    "choose_masters",
    "column_clusters",
    "compute_degrees",
    "count_edges_per_replica",
    "edge_cap",
    "generate",
    "ingest",
    "iter_edge_batches",
    "map_communities",
    "partition",
    "partition_metrics",
    "rebalance",
    "replica_offsets",
    "replica_sets",
    "shuffle_edges",
    "structural_clusters",
]
