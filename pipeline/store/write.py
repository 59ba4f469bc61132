"""Write an assignment's partition stores and commit them as the output's next generation.

:func:`write_generation` writes (or resumes) every store of a generation and commits it;
:func:`write_partitions` does so for an :class:`~asepr.pipeline.Assignment` you already have,
and :func:`asepr.pipeline.partition_run.partition_to_store` (the whole ``asepr partition`` run)
after validating and partitioning. Both hold the output's lock
(:class:`asepr.storage.commit.lock.OutputLock`) and commit through the protocol of
:mod:`asepr.pipeline.store.commit` (staging, journal, recovery, resumption); what a run records
to resume is :mod:`asepr.pipeline.store.run_record`.

Stages (Dask graphs, one task per shard or partition): route edges (one task per edge
shard) → finalize edges (per partition) → gather node rows (per node shard) →
finalize nodes (per partition: rows, attrs, checksum, rename) → node map → commit.

Scratch space inside the staging directory: about 18 bytes per edge (2 for the
assignment, 16 for the routed spill; twice that for halo copies) plus
``RF·N·(17 + 4d)`` bytes of gathered node rows, next to the new stores.

A rerun after a crash, with the same run key (same input bytes, config and halo):

* finds a journal → completes the commit (or, for another run key, rolls it back);
* otherwise reuses the saved assignment, the routed shards and every finished store
  whose checksums verify, and redoes the rest. With another run key, or an assignment
  that differs bit for bit, it discards the staging directory and starts clean, so a
  generation never mixes partitions of two runs.
"""

from __future__ import annotations

import logging
import time
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np

from asepr.pipeline.store.commit import (
    Staging,
    commit,
    finished_entries,
    node_map_from_ids,
    recover_journal,
    write_node_map,
)
from asepr.pipeline.store.finalize import (
    finalize_edges,
    finalize_nodes,
    finalize_nodes_from_table,
    sweep_groups,
)
from asepr.pipeline.store.generations import RemoteStaging, begin_remote_run, remote_output
from asepr.pipeline.store.output_dir import writable_output
from asepr.pipeline.store.route import (
    edge_spill_paths,
    gather_node_shard,
    node_spill_paths,
    route_edge_shard,
)
from asepr.pipeline.store.run_record import (
    SavedAssignment,
    assignment_digest,
    check_halo,
    input_info_from_shards,
    load_assignment,
    parts_files,
    run_key_of,
    save_assignment,
    stage_state,
    staged_state_ok,
)
from asepr.pipeline.store.tasks import Progress, run_tasks, task_slots, timed, worker_peak_rss
from asepr.storage.errors import StoreError, format_problem
from asepr.storage.inputs.decoded import remove_decoded
from asepr.storage.inputs.node_table import NodeTable
from asepr.storage.locations.fs import Shard
from asepr.storage.locations.location import is_local_url, remove_tree
from asepr.storage.partitions.manifest import (
    MANIFEST_FORMAT,
    MANIFEST_VERSION,
    NODE_MAP_NAME,
    part_name,
    read_manifest,
)
from asepr.storage.partitions.state import STATE_NAME, state_entry, state_identity
from asepr.storage.resources import peak_rss_bytes

__all__ = ["Progress", "begin_run", "committed_output_error", "write_generation", "write_partitions"]

log = logging.getLogger(__name__)


# --- begin, write, commit ---------------------------------------------------------------


def committed_output_error(out: Path | str, manifest: dict[str, Any]) -> StoreError:
    """The refusal of a partition run into ``out``, which holds a committed ``manifest``,
    without ``overwrite``. ``asepr partition`` raises it before it plans the run."""
    return StoreError(format_problem(
        f"output {out}", "no committed output (or --overwrite)",
        f"generation {manifest['generation']} with {manifest['num_parts']} partitions",
        "pass --overwrite to write the next generation (the current one stays readable "
        "until the new one is committed), or choose another output directory."))


def begin_run(out: Path, run_key: str, overwrite: bool) -> tuple[Staging, int, dict | None]:
    """Recover an interrupted commit, decide resume vs clean start; return the staging.

    Returns ``(staging, generation, committed)``; ``committed`` is the manifest when an
    interrupted commit of this very run was completed (nothing is left to do).
    """
    staging = Staging(out)
    committed = recover_journal(staging, run_key)
    if committed is not None:
        return staging, int(committed["generation"]), committed
    old = read_manifest(out, missing_ok=True)
    if old is not None and not overwrite:
        raise committed_output_error(out, old)
    generation = int(old["generation"]) + 1 if old else 1
    staging.open_run(run_key, generation, "partition")
    return staging, generation, None


def _route_and_finalize_edges(staging: Staging, saved: SavedAssignment, todo: list[int], *, halo: int,
                              client, progress: Progress | None, timings: dict[str, float],
                              decoded_edges: list[Shard] | None = None) -> list[dict]:
    """Route every edge shard not routed yet, then write the CSR of each partition in ``todo``.

    ``decoded_edges``: the edge shards with the validator's decoded copies attached
    (:mod:`asepr.storage.inputs.decoded`), which the route reads instead of the Parquet files and
    then deletes.
    """
    k = saved.num_parts
    num_edge_shards = len(saved.edge_shards)
    narrow = saved.num_nodes <= 2**31  # every id fits an int32 record
    route_spills = [edge_spill_paths(staging.route, i, narrow) for i in range(num_edge_shards)]
    with timed("route", timings, client) as info:
        shards = decoded_edges if decoded_edges is not None else saved.edge_shards
        calls = [
            ((shard, i, saved.parts_path(i), str(staging.route)),
             {"num_parts": k, "halo": halo, "undirected": saved.undirected,
              "master_path": saved.master_path, "batch_rows": int(saved.config.get("batch_rows", 1 << 20)),
              "narrow": narrow})
            for i, shard in enumerate(shards)
            if not route_spills[i][1].exists()
        ]
        run_tasks("route", route_edge_shard, calls, client, progress)
        info.update(shards=len(calls), skipped=num_edge_shards - len(calls))
    if decoded_edges is not None:
        remove_decoded(decoded_edges)
    with timed("finalize edges", timings, client) as info:
        for p in todo:
            remove_tree(staging.partial_store(p), staging.storage_options)
        calls = [
            ((p,), {"route_spills": route_spills, "master_path": saved.master_path,
                    "store_path": str(staging.partial_store(p)),
                    "global_nid_path": str(staging.global_nid_path(p)), "halo": halo, "narrow": narrow,
                    "storage_options": staging.storage_options})
            for p in todo
        ]
        edge_infos = run_tasks("finalize edges", finalize_edges, calls, client, progress)
        info.update(partitions=len(todo), edges=sum(e["counts"]["edges"] for e in edge_infos))
    return edge_infos


def _gather_and_finalize_nodes(staging: Staging, saved: SavedAssignment, todo: list[int], edge_infos: list[dict],
                               *, feat_dim: int, attrs: dict[str, Any], client, progress: Progress | None,
                               timings: dict[str, float], node_table: NodeTable | None = None) -> list[dict]:
    """Gather the node rows of the partitions in ``todo``, then finish their stores.

    With the validator's decoded node table the stores take their rows from it in one
    sequential sweep per group of partitions, a group per thread or worker
    (:func:`~asepr.pipeline.store.finalize.finalize_nodes_from_table`): no gather pass, no spill.
    """
    if node_table is not None:
        with timed("finalize nodes", timings, client) as info:
            infos = dict(zip(todo, edge_infos))
            # Local threads share one sweep (one read of the table); workers sweep a group each.
            slots = task_slots(client)
            groups = sweep_groups({p: infos[p]["counts"]["nodes"] for p in todo}, slots) if client else [todo]
            calls = [
                ((group, [infos[p] for p in group]),
                 {"table": node_table, "global_nid_paths": [str(staging.global_nid_path(p)) for p in group],
                  "store_paths": [str(staging.partial_store(p)) for p in group],
                  "final_paths": [str(staging.store(p)) for p in group], "attrs": attrs,
                  "ways": 1 if client else slots, "storage_options": staging.storage_options})
                for group in groups if group
            ]
            entries = [e for group in run_tasks("finalize nodes", finalize_nodes_from_table, calls, client, progress)
                       for e in group]
            info.update(partitions=len(todo), sweeps=len(calls))
        return entries
    with timed("gather nodes", timings, client) as info:
        global_nid_paths = {p: str(staging.global_nid_path(p)) for p in todo}
        calls = [((shard, j, global_nid_paths, str(staging.gather)), {"feat_dim": feat_dim})
                 for j, shard in enumerate(saved.node_shards)]
        rows = run_tasks("gather nodes", gather_node_shard, calls, client, progress)
        info.update(shards=len(calls), rows=sum(rows))
    with timed("finalize nodes", timings, client) as info:
        gather_spills = [node_spill_paths(staging.gather, j) for j in range(len(saved.node_shards))]
        calls = [
            ((p, e), {"gather_spills": gather_spills, "store_path": str(staging.partial_store(p)),
                      "final_path": str(staging.store(p)), "feat_dim": feat_dim, "attrs": attrs,
                      "storage_options": staging.storage_options})
            for p, e in zip(todo, edge_infos)
        ]
        entries = run_tasks("finalize nodes", finalize_nodes, calls, client, progress)
        info.update(partitions=len(todo))
    return entries


def _partition_manifest(saved: SavedAssignment, *, input_info: dict[str, Any], run_key: str, generation: int,
                        halo: int, entries: dict[int, dict], resumed: list[int], node_map_sha: str,
                        state: tuple[int, str] | None, timings: dict[str, float], client) -> dict[str, Any]:
    """The manifest of a partition run's generation."""
    k = saved.num_parts
    manifest = {
        "format": MANIFEST_FORMAT,
        "format_version": MANIFEST_VERSION,
        "generation": generation,
        "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "num_parts": k,
        "num_nodes": saved.num_nodes,
        "num_edges": saved.num_edges,
        "feat_dim": int(input_info["feat_dim"]),
        "undirected": saved.undirected,
        "halo": halo,
        "algorithm": saved.config.get("algo"),
        "config": saved.config,
        "input": {key: v for key, v in input_info.items() if key != "feat_dim"},
        "input_generation": generation,
        "metrics": saved.metrics,
        "timings": {key: round(v, 4) for key, v in timings.items()},
        "run": {
            "resumed_partitions": resumed,
            "peak_rss_bytes": {"driver": peak_rss_bytes(), "workers": worker_peak_rss(client)},
        },
        "node_map": {"path": NODE_MAP_NAME, "sha256": node_map_sha},
        "partitions": [
            {"part_id": p, "path": part_name(p), "generation": generation, **entries[p]} for p in range(k)
        ],
        "run_key": run_key,
    }
    if state is not None:
        manifest["state"] = state_entry(generation, state[1])
    return manifest


def write_generation(
    staging: Staging,
    saved: SavedAssignment,
    *,
    input_info: dict[str, Any],
    run_key: str,
    generation: int,
    halo: int,
    client,
    progress: Progress | None,
    timings: dict[str, float],
    node_table: NodeTable | None = None,
    decoded_edges: list[Shard] | None = None,
    state_pending: Future | None = None,
) -> dict[str, Any]:
    """Write (or resume) every store of the generation, the node map, and commit them;
    the node rows come from ``node_table`` when there is one, else from the node shards,
    and the route reads ``decoded_edges`` when given (:func:`_route_and_finalize_edges`).
    ``state_pending`` is the state being written on a thread: the commit waits for it
    (and raises its error)."""
    remote = isinstance(staging, RemoteStaging)
    out = staging.target.url if remote else staging.out
    k = saved.num_parts
    feat_dim = int(input_info["feat_dim"])
    attrs = {"num_parts": k, "generation": generation, "undirected": saved.undirected, "halo": halo}
    if remote:
        staging.bind_assignment(saved.digest)
    entries = finished_entries(staging, range(k), attrs)
    resumed = sorted(entries)
    todo = [p for p in range(k) if p not in entries]
    if resumed:
        log.warning("resuming: %d of %d partitions already finished (checksums verified)", len(resumed), k)
    fix = "rerun with --overwrite to start clean."
    node_map = None
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="asepr-node-map") as pool:
        if todo:
            edge_infos = _route_and_finalize_edges(staging, saved, todo, halo=halo, client=client,
                                                   progress=progress, timings=timings, decoded_edges=decoded_edges)
            if not resumed and node_table is not None:
                # Every store is new: the node map needs only their ids, written by now, so
                # it is built on a thread beside the node rows' sweep.
                node_map = pool.submit(node_map_from_ids, staging, saved.master_path,
                                       [str(staging.global_nid_path(p)) for p in range(k)], fix=fix)
            for entry in _gather_and_finalize_nodes(staging, saved, todo, edge_infos, feat_dim=feat_dim,
                                                    attrs=attrs, client=client, progress=progress, timings=timings,
                                                    node_table=node_table):
                entries[entry["part_id"]] = entry
        with timed("node map", timings, client):
            if node_map is not None:
                node_map_sha = node_map.result()
            else:
                node_map_sha = write_node_map(staging, range(k), np.full(saved.num_nodes, -1, dtype=np.int64),
                                              np.full(saved.num_nodes, -1, dtype=np.int64), fix=fix)

    if state_pending is not None:
        state_pending.result()
    if remote:
        with timed("commit", timings, client):
            state = state_identity(staging.state_path)
            manifest = _partition_manifest(
                saved, input_info=input_info, run_key=run_key, generation=generation, halo=halo, entries=entries,
                resumed=resumed, node_map_sha=node_map_sha, state=state if state and state[0] == generation else None,
                timings=timings, client=client)
            manifest = staging.publish(manifest, generation)
        log.info("committed generation %d of %s: %d partitions", generation, out, k)
        return manifest
    with timed("commit", timings, client):
        old = read_manifest(out, missing_ok=True)
        old_names = {e["path"] for e in old["partitions"]} if old else set()
        if old and old.get("state"):
            old_names.add(STATE_NAME)
        names = [part_name(p) for p in range(k)]
        state = state_identity(staging.state_path)
        if state is not None and state[0] == generation:
            names.append(STATE_NAME)
        else:
            state = None
        manifest = _partition_manifest(saved, input_info=input_info, run_key=run_key, generation=generation,
                                       halo=halo, entries=entries, resumed=resumed, node_map_sha=node_map_sha,
                                       state=state, timings=timings, client=client)
        commit(staging, run_key=run_key, generation=generation, items=names + [NODE_MAP_NAME],
               retire=sorted(old_names - set(names)), manifest=manifest)
    log.info("committed generation %d of %s: %d partitions", generation, out, k)
    return manifest



# --- writing an existing assignment -------------------------------------------------------


def write_partitions(
    assignment,
    out: str | Path,
    *,
    halo: int = 0,
    client=None,
    overwrite: bool = False,
    progress: Progress | None = None,
    input_url: str | Path | None = None,
    storage_options: dict | None = None,
    scratch: str | Path | None = None,
) -> dict[str, Any]:
    """Write the stores of an existing :class:`~asepr.pipeline.Assignment` and commit them.

    Like :func:`partition_to_store` without the partitioning; a rerun resumes only
    when the assignment is bit-identical to the interrupted run's. ``out`` may be an
    object-store URL (``storage_options``, and ``scratch`` for the spill files, as for
    :func:`~asepr.pipeline.partition_run.partition_to_store`).

    Returns
    -------
    dict
        The committed manifest.
    """
    halo = check_halo(halo)
    if not is_local_url(out, storage_options):
        with remote_output(out, storage_options, scratch) as staging:
            input_info = input_info_from_shards(input_url, assignment.edge_shards, assignment.node_shards)
            run_key = run_key_of(assignment.config.to_dict(), halo, input_info)
            generation, _ = begin_remote_run(staging, run_key, overwrite)
            return _write_assignment(staging, generation, assignment, run_key, input_info, halo=halo,
                                     client=client, progress=progress)
    with writable_output(out, storage_options) as out_path:
        input_info = input_info_from_shards(input_url, assignment.edge_shards, assignment.node_shards)
        run_key = run_key_of(assignment.config.to_dict(), halo, input_info)
        staging, generation, committed = begin_run(out_path, run_key, overwrite)
        if committed is not None:
            return committed
        return _write_assignment(staging, generation, assignment, run_key, input_info, halo=halo, client=client,
                                 progress=progress)


def _write_assignment(staging: Staging, generation: int, assignment, run_key: str, input_info: dict[str, Any], *,
                      halo: int, client, progress: Progress | None) -> dict[str, Any]:
    """Save the assignment (or reuse the identical one staged) and write its generation."""
    parts = parts_files(assignment.workdir, len(assignment.edge_shards))
    digest = assignment_digest(assignment.master, parts)
    saved = load_assignment(staging.work, run_key, assignment.edge_shards, assignment.node_shards)
    if saved is not None and saved.digest != digest:
        log.warning("discarding an interrupted run in %s (another assignment); starting clean", staging.out)
        staging.restart(run_key, generation, "partition")
        saved = None
    if saved is not None and not staged_state_ok(staging, generation):
        saved = None
    if saved is None:
        staging.reset_work()
        stage_state(staging, assignment, generation, input_info)
        saved = save_assignment(assignment, staging.work, run_key, halo)
    return write_generation(
        staging, saved, input_info=input_info, run_key=run_key, generation=generation,
        halo=halo, client=client, progress=progress, timings=dict(saved.timings),
    )
