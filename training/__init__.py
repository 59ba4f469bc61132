"""Local GNN training on one's own partition, and reconciliation (docs/design.md#training).

Rank r opens only its own partition store (:mod:`asepr.training.graph.data`), trains a PyG model
locally (:mod:`asepr.training.models`, :mod:`asepr.training.loop.local`), and meets the other ranks
once per round to reconcile the local models (:mod:`asepr.training.reconcile`) in the round
loop of :mod:`asepr.training.loop.distributed`. :mod:`asepr.training.centralized` is the one-process
accuracy ceiling, and :mod:`asepr.training.fds` the fully-decentralized (DistDGL-style)
baseline. ``asepr-rank`` (:mod:`asepr.training.main`) is the per-rank entry point.
"""

import importlib

#: Each public name and the module that defines it. They are imported on first use
#: (PEP 562), so that argument parsing (``asepr.training.config``, ``asepr.training.main``'s flags)
#: does not pull in torch and PyG: every ``asepr`` command builds the train parser.
_EXPORTS = {
    "GNN": "asepr.training.models",
    "ByteCounter": "asepr.training.group.comm",
    "Comm": "asepr.training.group.comm",
    "LocalGraph": "asepr.training.graph.data",
    "RunDir": "asepr.training.rundir.checkpoint",
    "TrainConfig": "asepr.training.config",
    "TrainerError": "asepr.training.loop.distributed",
    "build_model": "asepr.training.models",
    "init_process_group": "asepr.training.loop.distributed",
    "load_input_graph": "asepr.training.centralized",
    "load_local_graph": "asepr.training.graph.data",
    "rank_partitions": "asepr.training.graph.data",
    "run_centralized": "asepr.training.centralized",
    "run_fds": "asepr.training.fds",
    "run_trainer": "asepr.training.loop.distributed",
    "train_rounds": "asepr.training.loop.distributed",
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
