"""Partitioning algorithms and their stages (docs/design.md#data-flow).

``asepr.pipeline.partition(input, k, algo=...)`` runs a whole partitioning and returns an
:class:`Assignment`; the stage functions are exported for reuse (incremental ingest,
benchmarks). ``asepr.pipeline.increment.ingest(out, new_edges, nodes)`` adds new shards to a committed
output as its next generation, and ``asepr.pipeline.increment.rebalance(out)`` moves whole communities
off partitions past the cap (docs/design.md#incremental-ingest).
``asepr.pipeline.diagnose_output(out)`` says why the local models trained on an output's
partitions differ (docs/design.md#diagnostics).
"""

from asepr.pipeline.assign import MODES, AssignState, KernelSettings, assign_batch, edge_cap, replica_sets, stream_assign
from asepr.pipeline.stages.attr_cluster import AttrClusters, AttrModel, attribute_clusters
from asepr.pipeline.stages.attr_column import column_clusters
from asepr.pipeline.config import ALGORITHMS, SCORINGS, PartitionConfig
from asepr.pipeline.stages.degrees import Degrees, compute_degrees
from asepr.pipeline.diagnose import Diagnostics, diagnose_output
from asepr.pipeline.increment.ingest import ingest
from asepr.pipeline.stages.mapping import CommunityMapping, map_communities
from asepr.pipeline.stages.masters import choose_masters, count_edges_per_replica, replica_offsets
from asepr.pipeline.stages.metrics import partition_metrics
from asepr.pipeline.partition import Assignment, partition
from asepr.pipeline.increment.rebalance import rebalance
from asepr.pipeline.inputs.shuffle import shuffle_edges
from asepr.pipeline.stream import EdgeBatch, iter_edge_batches
from asepr.pipeline.stages.struct_cluster import Communities, structural_clusters
from asepr.pipeline.inputs.synth import SynthConfig, generate
from asepr.pipeline.verify import Problem, VerifyReport, verify_output
from asepr.pipeline.partition_run import partition_to_store
from asepr.pipeline.store.write import write_partitions

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
