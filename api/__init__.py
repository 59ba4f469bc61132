"""asepr: attribute-driven streaming edge partitioning and local GNN training with reconciliation.

The installed package is one namespace. Its rooms are the repository's top-level folders,
mapped into it by ``pyproject.toml`` (``[tool.setuptools.package-dir]``):

- :mod:`asepr.storage`: the files asepr reads and writes (inputs, partition stores, commits);
- :mod:`asepr.pipeline`: partitioning, verification and incremental ingest;
- :mod:`asepr.training`: local training, reconciliation and the baselines;
- :mod:`asepr.workflows`: the ``asepr`` command line and the benchmarks.

The names a user reaches for are exported here and imported on first use (PEP 562),
so that ``import asepr`` is cheap and a partition-only install (no ``train`` extra)
never imports torch: ``asepr.partition`` loads the partitioner alone, while
``asepr.load_local_graph`` loads torch and PyG when it is first touched.

    import asepr
    with asepr.partition("cora-in", 4) as a:
        print(a.metrics["replication_factor"])
    store = asepr.open_partition("cora-parts", 0)
"""

from __future__ import annotations

import importlib
from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("asepr")
except PackageNotFoundError:  # imported from a tree that was never installed
    __version__ = "0+unknown"

#: Each public name and the module that defines it.
_EXPORTS = {
    # storage: inputs and partition stores
    "AseprError": "asepr.storage.errors",
    "InputError": "asepr.storage.errors",
    "StoreError": "asepr.storage.errors",
    "open_input": "asepr.storage.inputs.directory",
    "validate_input": "asepr.storage.integrity.validate",
    "open_partition": "asepr.storage.partitions.output_stores",
    "read_manifest": "asepr.storage.partitions.manifest",
    # pipeline: partitioning, verification, ingest
    "PartitionConfig": "asepr.pipeline.config",
    "partition": "asepr.pipeline.partition",
    "partition_to_store": "asepr.pipeline.partition_run",
    "verify_output": "asepr.pipeline.verify",
    "ingest": "asepr.pipeline.increment.ingest",
    "rebalance": "asepr.pipeline.increment.rebalance",
    "diagnose_output": "asepr.pipeline.diagnose",
    "SynthConfig": "asepr.pipeline.inputs.synth",
    "generate": "asepr.pipeline.inputs.synth",
    # training (the `train` extra: torch and PyG)
    "TrainConfig": "asepr.training.config",
    "LocalGraph": "asepr.training.graph.data",
    "load_local_graph": "asepr.training.graph.data",
    "open_pyg_stores": "asepr.training.graph.pyg_store",
    "PartitionFeatureStore": "asepr.training.graph.pyg_store",
    "PartitionGraphStore": "asepr.training.graph.pyg_store",
    "NeighborSampler": "asepr.training.graph.sampler",
    "build_model": "asepr.training.models",
    "run_trainer": "asepr.training.loop.distributed",
    "run_centralized": "asepr.training.centralized",
    "run_fds": "asepr.training.fds",
}


def __getattr__(name: str):
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'asepr' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # later lookups skip this hook
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *_EXPORTS])


__all__ = sorted(_EXPORTS)
