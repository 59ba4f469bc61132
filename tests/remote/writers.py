"""Writer processes of the object-store race tests (light to import in a spawned child)."""

from __future__ import annotations

import threading

BARRIER_TIMEOUT_S = 300


def racing_partitioner(input_dir: str, out: str, options: dict, rounds: int, start, done, results) -> None:
    """Each round: wait for the start, partition ``input_dir`` into ``out`` (overwrite),
    report ``(round, generation or None, error message)``, wait for the others."""
    from asepr.pipeline.config import PartitionConfig
    from asepr.pipeline.partition_run import partition_to_store
    from asepr.storage.errors import StoreError

    config = PartitionConfig(num_parts=2, algo="hash", seed=0)
    for r in range(rounds):
        try:
            start.wait(BARRIER_TIMEOUT_S)
        except threading.BrokenBarrierError:
            return
        try:
            manifest = partition_to_store(input_dir, out, config, overwrite=True, storage_options=options)
            results.put((r, manifest["generation"], ""))
        except StoreError as exc:
            results.put((r, None, str(exc)))
        try:
            done.wait(BARRIER_TIMEOUT_S)
        except threading.BrokenBarrierError:
            return
