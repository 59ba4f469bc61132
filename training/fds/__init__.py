"""The fully-decentralized baseline (FDS, DistDGL-style) of docs/design.md#training-baselines.

Vertices are partitioned (METIS or a seeded hash, :mod:`~asepr.training.fds.partition`) and
each rank holds only its own vertices' rows and in-edges (:mod:`~asepr.training.fds.graph`).
Every training step samples its mini-batch's computation graph over the whole graph
and fetches the feature rows it lacks from their owners
(:mod:`~asepr.training.fds.remote`); gradients are all_reduced every step
(:mod:`~asepr.training.fds.trainer`). Evaluation is exact full-neighbourhood inference
(:mod:`~asepr.training.fds.inference`). ``asepr train INPUT --strategy fds --nproc K``
launches it.
"""

from asepr.training.fds.graph import FdsGraph, load_fds_graph
from asepr.training.fds.inference import LayerwiseInference
from asepr.training.fds.partition import (
    METIS_MAX_EDGES,
    PARTITIONERS,
    PartitionBook,
    cut_edges,
    hash_owner,
    metis_owner,
)
from asepr.training.fds.remote import DistNeighborSampler, FeatureFetcher
from asepr.training.fds.trainer import CATEGORIES, FDS_DEFAULT_BATCH, fds_config, run_fds, train_fds

__all__ = [
    "CATEGORIES",
    "FDS_DEFAULT_BATCH",
    "METIS_MAX_EDGES",
    "PARTITIONERS",
    "DistNeighborSampler",
    "FdsGraph",
    "FeatureFetcher",
    "LayerwiseInference",
    "PartitionBook",
    "cut_edges",
    "fds_config",
    "hash_owner",
    "load_fds_graph",
    "metis_owner",
    "run_fds",
    "train_fds",
]
