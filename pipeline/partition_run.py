"""The whole ``asepr partition`` run: validate, partition, write, commit.

:func:`partition_to_store` calls, in order, the validator (which also writes the
decoded copy of the input that the streaming passes read), :func:`asepr.pipeline.partition`
and the store writer (:func:`asepr.pipeline.store.write.write_generation`), inside the
output's lock; a rerun with the same input, config and halo resumes what a killed run
left (:mod:`asepr.pipeline.store.run_record`).
"""

from __future__ import annotations

import dataclasses
import logging
import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from asepr.pipeline.config import PartitionConfig
from asepr.pipeline.planning.needs import EDGE_ROW, MIB, Need, RunShape
from asepr.pipeline.partition import partition
from asepr.pipeline.store.commit import Staging
from asepr.pipeline.store.generations import begin_remote_run, remote_output
from asepr.pipeline.store.output_dir import decoded_copy, writable_output
from asepr.pipeline.store.run_record import (
    SavedAssignment,
    check_halo,
    input_info_from_report,
    load_assignment,
    run_key_of,
    save_assignment,
    stage_state,
    staged_state_ok,
)
from asepr.pipeline.store.tasks import Progress, bar_for
from asepr.pipeline.store.write import begin_run, write_generation
from asepr.storage.inputs.decoded import decoded_row, decoded_shards
from asepr.storage.inputs.decoded_copy import validate_and_copy
from asepr.storage.inputs.directory import InputDir, open_input
from asepr.storage.inputs.node_table import NodeTable, node_table_bytes
from asepr.storage.integrity.report import ValidationReport
from asepr.storage.locations.direct_io import WRITE_BUFFER
from asepr.storage.locations.fs import Shard
from asepr.storage.locations.location import is_local_url
from asepr.storage.resources import stage

__all__ = ["partition_to_store", "validate_needs"]

log = logging.getLogger(__name__)

#: Features per node batch of the validator's node pass (asepr.storage.integrity.checks).
NODE_BATCH_BYTES = 16 * MIB


def partition_to_store(
    input_url: str | Path,
    out: str | Path,
    config: PartitionConfig,
    *,
    halo: int = 0,
    client=None,
    overwrite: bool = False,
    progress: Progress | None = None,
    storage_options: dict | None = None,
    scratch: str | Path | None = None,
) -> dict[str, Any]:
    """Validate, partition and write: the whole ``asepr partition`` run.

    Bad input fails in validation, before anything is written. The output gets a new
    generation only when everything succeeded; a failed or killed run leaves the
    previous one intact, and the same command resumes it.

    Parameters
    ----------
    input_url
        The input directory (``edges/``, ``nodes/``, optional ``meta.json``).
    out
        The output: a local directory, or an fsspec URL of an object-store prefix
        (committed by :mod:`asepr.pipeline.store.generations`, under a lease).
    config
        How to partition (:class:`~asepr.pipeline.config.PartitionConfig`).
    halo
        1 to copy the 1-hop in-neighbourhood of every master into its partition.
    client
        A ``distributed.Client``; None runs the Dask stages on local threads.
    overwrite
        Allow replacing a committed output (by the next generation).
    progress
        ``progress(stage, total)`` → a context manager with ``update(n)``, per stage.
    storage_options
        fsspec options of the input and the output (credentials, endpoint).
    scratch
        A remote output's local directory for spill files and the decoded input; None:
        a new temporary directory, removed after the run. Unused for a local output
        (its staging directory is inside it).

    Returns
    -------
    dict
        The committed manifest.

    Raises
    ------
    InputError, SchemaError
        The input is invalid (nothing was written).
    StoreError
        The output is unusable, locked by another writer, or a disk error occurred.
    """
    halo = check_halo(halo)
    if not is_local_url(out, storage_options):
        with remote_output(out, storage_options, scratch) as staging, decoded_copy(staging.out) as decoded_dir:
            run = _validate(input_url, config, halo, decoded_dir, storage_options)
            generation, _ = begin_remote_run(staging, run.run_key, overwrite)
            return _write_run(staging, generation, run, client=client, progress=progress)
    with writable_output(out, storage_options) as out_path, decoded_copy(out_path) as decoded_dir:
        run = _validate(input_url, config, halo, decoded_dir, storage_options)
        staging, generation, committed = begin_run(out_path, run.run_key, overwrite)
        if committed is not None:
            return committed
        return _write_run(staging, generation, run, client=client, progress=progress)


def _write_run(staging: Staging, generation: int, run: _ValidatedRun, *, client,
               progress: Progress | None) -> dict[str, Any]:
    """Partition (or resume the saved assignment) and write and commit the generation."""
    saved = _resumable_assignment(staging, generation, run)
    # A new assignment's state is written on a thread beside the route and the edge
    # stores (one core's work while theirs leave room); the commit waits for it. A
    # run killed before it is finished finds no staged state and partitions again.
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="asepr-state") as state_pool:
        state_pending = None
        if saved is None:
            saved, state_pending = _assign(staging, generation, run, state_pool, client=client,
                                           progress=progress)
        else:
            log.warning("resuming: reusing the saved assignment of generation %d", generation)
        saved.timings = {**saved.timings, "validate": run.validate_seconds}
        return write_generation(
            staging, saved, input_info=run.input_info, run_key=run.run_key, generation=generation,
            halo=run.halo, client=client, progress=progress, timings=dict(saved.timings), node_table=run.table,
            decoded_edges=run.decoded_edges, state_pending=state_pending,
        )


@dataclass
class _ValidatedRun:
    """A validated input, its decoded copy and the run's identity."""

    source: InputDir
    config: PartitionConfig
    report: ValidationReport
    input_info: dict[str, Any]
    table: NodeTable
    decoded_edges: list[Shard]
    run_key: str
    halo: int
    validate_seconds: float


def _validate(input_url, config: PartitionConfig, halo: int, decoded_dir: Path,
              storage_options: dict | None) -> _ValidatedRun:
    """Validate the input (nothing is written on bad input) and decode it into ``decoded_dir``."""
    start = time.perf_counter()
    with stage("validate", log):
        source = open_input(input_url, storage_options)
        config = config.resolved(source).effective()
        report = validate_and_copy(source, decoded_dir, undirected=config.undirected, check_duplicates=False)
    seconds = time.perf_counter() - start
    input_info = input_info_from_report(input_url, report, storage_options)
    table = NodeTable(decoded_dir, report.num_nodes, report.feat_dim)
    decoded_edges = decoded_shards(source.edge_shards, [info.rows for info in report.edge_shards], decoded_dir,
                                   report.num_nodes)
    return _ValidatedRun(source=source, config=config, report=report, input_info=input_info, table=table,
                         decoded_edges=decoded_edges, run_key=run_key_of(config.to_dict(), halo, input_info),
                         halo=halo, validate_seconds=seconds)


def _resumable_assignment(staging: Staging, generation: int, run: _ValidatedRun) -> SavedAssignment | None:
    """The assignment an interrupted run of the same key saved, with its state staged; else None."""
    saved = load_assignment(staging.work, run.run_key, run.source.edge_shards, run.source.node_shards)
    if saved is not None and not staged_state_ok(staging, generation):
        return None
    return saved


def _assign(staging: Staging, generation: int, run: _ValidatedRun, state_pool: ThreadPoolExecutor, *,
            client, progress: Progress | None) -> tuple[SavedAssignment, Future]:
    """Partition, save the assignment for resumption, and start writing its state on ``state_pool``."""
    staging.reset_work()
    # The streaming passes read the validator's decoded copy; everything after
    # them (and what is saved) names the input's own shards.
    decoded = dataclasses.replace(run.source, edge_shards=run.decoded_edges, node_table=run.table)
    with bar_for(progress, "assign", 1) as bar:
        assignment = partition(decoded, config=run.config, client=client, workdir=staging.work, report=run.report)
        bar.update(1)
    assignment.edge_shards = run.source.edge_shards
    state_pending = state_pool.submit(stage_state, staging, assignment, generation, run.input_info, close=True)
    saved = save_assignment(assignment, staging.work, run.run_key, run.halo)
    # The state's thread holds (and then closes) the assignment.
    return saved, state_pending


def validate_needs(run: PartitionConfig, s: RunShape) -> Need:
    """Memory and disk of :func:`_validate`, the validator's two passes at once: node pass
    ``seen`` bool[N] + reading a node shard, or one node batch (16 MiB of features, their
    ``isfinite`` mask, ids, labels); edge pass ``degree`` int64[N] + the batch and its
    range masks. It also writes the decoded edge copy (:mod:`asepr.storage.inputs.decoded`, 8 B per
    edge, 16 past 2**31 nodes), removed once the route has read it, and the decoded node
    table (:mod:`asepr.storage.inputs.node_table`, ``4d + 9`` B per node), kept until the run ends."""
    node_rows = min(s.n_s, max(1024, min(run.batch_rows, NODE_BATCH_BYTES // (4 * max(1, s.d)))))
    node_pass = s.n + max(s.node_read, 2 * node_rows * (5 * s.d + 17))
    edge_pass = 8 * s.n + 2 * EDGE_ROW * s.b + 4 * s.b
    # The two passes run side by side; the copies' writers buffer a block each
    # (asepr.storage.locations.direct_io): src and dst, x, y and split.
    return Need(driver=node_pass + edge_pass + 5 * WRITE_BUFFER,
                written=decoded_row(s.n) * s.e + node_table_bytes(s.n, s.d))
