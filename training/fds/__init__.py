"""The fully-decentralized baseline (FDS, DistDGL-style) of docs/design.md#training-baselines.

Vertices are partitioned (METIS or a seeded hash, :mod:`~training.fds.partition`) and
each rank holds only its own vertices' rows and in-edges (:mod:`~training.fds.graph`).
Every training step samples its mini-batch's computation graph over the whole graph
and fetches the feature rows it lacks from their owners
(:mod:`~training.fds.remote`); gradients are all_reduced every step
(:mod:`~training.fds.trainer`). Evaluation is exact full-neighbourhood inference
(:mod:`~training.fds.inference`). ``asepr train INPUT --strategy fds --nproc K``
launches it.
"""

from training.fds.graph import FdsGraph, load_fds_graph
from training.fds.inference import LayerwiseInference
from training.fds.partition import (
    METIS_MAX_EDGES,
    PARTITIONERS,
    PartitionBook,
    cut_edges,
    hash_owner,
    metis_owner,
)
from training.fds.remote import DistNeighborSampler, FeatureFetcher
from training.fds.trainer import CATEGORIES, FDS_DEFAULT_BATCH, fds_config, run_fds, train_fds

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
