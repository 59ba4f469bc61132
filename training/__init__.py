"""Local GNN training on one's own partition, and reconciliation (docs/design.md#training).

Rank r opens only its own partition store (:mod:`training.data`), trains a PyG model
locally (:mod:`training.models`, :mod:`training.local`), and meets the other ranks
once per round to reconcile the local models (:mod:`training.reconcile`) in the round
loop of :mod:`training.distributed`. :mod:`training.centralized` is the one-process
accuracy ceiling, and :mod:`training.fds` the fully-decentralized (DistDGL-style)
baseline. ``python -m training.main`` is the per-rank entry point.
"""

import importlib

#: Each public name and the module that defines it. They are imported on first use
#: (PEP 562), so that argument parsing (``training.config``, ``training.main``'s flags)
#: does not pull in torch and PyG: every ``asepr`` command builds the train parser.
_EXPORTS = {
    "GNN": "training.models",
    "ByteCounter": "training.comm",
    "Comm": "training.comm",
    "LocalGraph": "training.data",
    "RunDir": "training.checkpoint",
    "TrainConfig": "training.config",
    "TrainerError": "training.distributed",
    "build_model": "training.models",
    "init_process_group": "training.distributed",
    "load_input_graph": "training.centralized",
    "load_local_graph": "training.data",
    "rank_partitions": "training.data",
    "run_centralized": "training.centralized",
    "run_fds": "training.fds",
    "run_trainer": "training.distributed",
    "train_rounds": "training.distributed",
}


def __getattr__(name: str):
    if name in _EXPORTS:
        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'training' has no attribute {name!r}")


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
