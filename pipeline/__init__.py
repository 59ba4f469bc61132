"""Partitioning algorithms and their stages (docs/design.md#data-flow).

``pipeline.partition(input, k, algo=...)`` runs a whole partitioning and returns an
:class:`Assignment`; the stage functions are exported for reuse (incremental ingest,
benchmarks). ``pipeline.increment.ingest(out, new_edges, nodes)`` adds new shards to a committed
output as its next generation, and ``pipeline.increment.rebalance(out)`` moves whole communities
off partitions past the cap (docs/design.md#incremental-ingest).
``pipeline.diagnose_output(out)`` says why the local models trained on an output's
partitions differ (docs/design.md#diagnostics).
"""

from pipeline.assign import MODES, AssignState, KernelSettings, assign_batch, edge_cap, replica_sets, stream_assign
from pipeline.stages.attr_cluster import AttrClusters, AttrModel, attribute_clusters
from pipeline.stages.attr_column import column_clusters
from pipeline.config import ALGORITHMS, SCORINGS, PartitionConfig
from pipeline.stages.degrees import Degrees, compute_degrees
from pipeline.diagnose import Diagnostics, diagnose_output
from pipeline.increment.ingest import ingest
from pipeline.stages.mapping import CommunityMapping, map_communities
from pipeline.stages.masters import choose_masters, count_edges_per_replica, replica_offsets
from pipeline.stages.metrics import partition_metrics
from pipeline.partition import Assignment, partition
from pipeline.increment.rebalance import rebalance
from pipeline.inputs.shuffle import shuffle_edges
from pipeline.stream import EdgeBatch, iter_edge_batches
from pipeline.stages.struct_cluster import Communities, structural_clusters
from pipeline.inputs.synth import SynthConfig, generate
from pipeline.verify import Problem, VerifyReport, verify_output
from pipeline.partition_run import partition_to_store
from pipeline.store.write import write_partitions

__all__ = [
    "Diagnostics",
    "diagnose_output",
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
    "KernelSettings",
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
    "stream_assign",
    "structural_clusters",
]
