"""Local GNN training on one's own partition, and reconciliation (DESIGN.md section 7).

Rank r opens only its own partition store (:mod:`training.data`), trains a PyG model
locally (:mod:`training.models`, :mod:`training.local`), and meets the other ranks
once per round to reconcile the local models (:mod:`training.reconcile`) in the round
loop of :mod:`training.distributed`. :mod:`training.centralized` is the one-process
accuracy ceiling, and :mod:`training.fds` the fully-decentralized (DistDGL-style)
baseline. ``python -m training.main`` is the per-rank entry point.
"""

from training.centralized import load_input_graph, run_centralized
from training.checkpoint import RunDir
from training.comm import ByteCounter, Comm
from training.config import TrainConfig
from training.data import LocalGraph, load_local_graph, rank_partitions
from training.distributed import TrainerError, init_process_group, run_trainer, train_rounds
from training.fds import run_fds
from training.models import GNN, build_model

__all__ = [
    "GNN",
    "ByteCounter",
    "Comm",
    "LocalGraph",
    "RunDir",
    "TrainConfig",
    "TrainerError",
    "build_model",
    "init_process_group",
    "load_input_graph",
    "load_local_graph",
    "rank_partitions",
    "run_centralized",
    "run_fds",
    "run_trainer",
    "train_rounds",
]
