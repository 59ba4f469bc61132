"""The masters of an assignment on disk: one pass over the stream and its edge partitions.

The masters stage and the restreaming pass (:mod:`asepr.pipeline.assign.restream`) both
need every vertex's master (:mod:`asepr.pipeline.stages.masters`) of an assignment whose
edge partitions are the ``int16`` files of a directory
(:func:`~asepr.pipeline.assign.loop.edge_parts_path`). :func:`stream_masters` counts the
edges of every replica over ranges of the stream on threads, each range into its own
counters, sums them, and chooses.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from asepr.pipeline.assign.loop import iter_assigned
from asepr.pipeline.config import PartitionConfig
from asepr.pipeline.stages.masters import choose_masters, count_edges_per_replica, replica_offsets, replica_rows
from asepr.pipeline.stream import map_shard_ranges
from asepr.storage.locations.fs import Shard

__all__ = ["stream_masters"]


def stream_masters(edge_shards: list[Shard], workdir: Path, replicas: np.ndarray, run: PartitionConfig,
                   num_edges: int) -> tuple[np.ndarray, np.ndarray]:
    """The masters of the assignment in ``workdir`` and the rows they were counted with.

    Counts the edges of every replica (``int32`` while no count can reach 2**31; the
    replica bits and counter offsets packed in rows, :func:`replica_rows`), then
    chooses (ties relative to ``run``'s shares). Returns the masters and the rows with
    each master in place of its offset
    (:func:`~asepr.pipeline.stages.metrics.locality_batch`).
    """
    offsets = replica_offsets(replicas)
    rows = replica_rows(replicas, offsets)
    dtype = np.int32 if num_edges < 2**31 else np.int64

    def count(shards: range) -> np.ndarray:
        counts = np.zeros(offsets[-1], dtype=dtype)
        for src, dst, part in iter_assigned(edge_shards[shards.start:shards.stop], workdir, run.batch_rows,
                                            first_shard=shards.start):
            count_edges_per_replica(src, dst, part, rows, rows[:, -1], counts)
        return counts

    counts, *others = map_shard_ranges(edge_shards, count) or [np.zeros(offsets[-1], dtype=dtype)]
    for more in others:
        counts += more
    master = choose_masters(replicas, offsets, counts, run.num_parts, run.shares)
    rows[:, -1] = master  # the rows of the locality pass: replica words, then the master
    return master, rows
