"""Turn an assignment into committed partition stores: the ``asepr partition`` write.

:func:`partition_to_store` is the whole ``asepr partition`` run (validate, partition,
write); :func:`write_partitions` writes the stores of an :class:`~pipeline.Assignment`
you already have. Both hold the output's lock (:class:`storage.lock.OutputLock`) and
commit through the protocol of :mod:`pipeline.store.commit` (staging, journal,
recovery, resumption). This module adds what is particular to a partition run::

    OUT/.asepr-staging/work/    edge-parts-*.npy, master.npy, assignment.json (saved last)

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

import contextlib
import dataclasses
import hashlib
import logging
import os
import shutil
import tempfile
import time
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from pipeline.assign import edge_parts_path
from pipeline.config import PartitionConfig
from pipeline.store.finalize import finalize_edges, finalize_nodes, finalize_nodes_from_table, sweep_groups
from pipeline.store.commit import (
    Staging,
    commit,
    disk_errors,
    file_sha256,
    finished_entries,
    local_output,
    prepare_output_dir,
    read_json_object,
    recover_journal,
    remove_if_empty,
    node_map_from_ids,
    write_node_map,
)
from pipeline.store.route import edge_spill_paths, gather_node_shard, node_spill_paths, route_edge_shard
from pipeline.store.tasks import Progress, bar_for, run_tasks, task_slots, timed, worker_peak_rss
from storage.decoded import DECODED_PREFIX, decoded_shards, remove_decoded
from storage.node_table import NodeTable
from storage.errors import StoreError, format_problem
from storage.fs import Shard, fingerprint, resolve, url_of
from storage.lock import OutputLock
from storage.atomic import dumps_json, save_npy_atomic, write_json_atomic
from storage.manifest import MANIFEST_FORMAT, MANIFEST_VERSION, NODE_MAP_NAME, part_name, read_manifest
from storage.partition_store import STORE_VERSION
from storage.resources import peak_rss_bytes, stage
from storage.schema import check_node_schema, feature_matrix
from storage.state import STATE_NAME, state_entry, state_identity
from storage.input import open_input, open_parquet
from storage.validate import validate_input

__all__ = ["Progress", "partition_to_store", "write_partitions"]

log = logging.getLogger(__name__)


# --- the assignment, saved for resumption ----------------------------------------------


@dataclass
class _SavedAssignment:
    num_nodes: int
    num_edges: int
    num_parts: int
    config: dict[str, Any]
    undirected: bool
    metrics: dict[str, Any]
    timings: dict[str, float]
    edge_shards: list[Shard]
    node_shards: list[Shard]
    workdir: Path
    digest: str

    def parts_path(self, i: int) -> str:
        return str(edge_parts_path(self.workdir, i))

    @property
    def master_path(self) -> str:
        return str(self.workdir / "master.npy")


def _assignment_digest(master: np.ndarray, parts_files: list[Path]) -> str:
    h = hashlib.sha256(np.ascontiguousarray(master, dtype=np.int32).tobytes())
    for f in parts_files:
        file_sha256(f, h)
    return h.hexdigest()


def _parts_files(workdir: str | Path, count: int) -> list[Path]:
    return [edge_parts_path(workdir, i) for i in range(count)]


def _save_assignment(assignment, work: Path, run_key: str, halo: int) -> _SavedAssignment:
    """Persist what the write stages and a resumption need (assignment.json goes last)."""
    count = len(assignment.edge_shards)
    src_files = _parts_files(assignment.workdir, count)
    dst_files = _parts_files(work, count)
    for src, dst in zip(src_files, dst_files):
        if src.resolve() == dst.resolve():
            continue
        dst.unlink(missing_ok=True)
        try:
            os.link(src, dst)
        except OSError:
            shutil.copyfile(src, dst)
    master = np.ascontiguousarray(assignment.master, dtype=np.int32)
    save_npy_atomic(work / "master.npy", master)
    digest = _assignment_digest(master, dst_files)
    config = assignment.config
    saved = _SavedAssignment(
        num_nodes=int(assignment.num_nodes),
        num_edges=int(assignment.num_edges),
        num_parts=int(config.num_parts),
        config=config.to_dict(),
        undirected=bool(config.undirected),
        metrics=dict(assignment.metrics),
        timings=dict(assignment.timings),
        edge_shards=list(assignment.edge_shards),
        node_shards=list(assignment.node_shards),
        workdir=work,
        digest=digest,
    )
    record = {
        "run_key": run_key, "halo": halo, "digest": digest,
        **{f.name: getattr(saved, f.name) for f in dataclasses.fields(saved)
           if f.name not in ("edge_shards", "node_shards", "workdir")},
        "edge_shards": [s.url for s in saved.edge_shards],
        "node_shards": [s.url for s in saved.node_shards],
    }
    write_json_atomic(work / "assignment.json", record)
    return saved


def _load_assignment(work: Path, run_key: str, edge_shards: list[Shard], node_shards: list[Shard]) -> _SavedAssignment | None:
    record = read_json_object(work / "assignment.json")
    if not record or record.get("run_key") != run_key:
        return None
    if record["edge_shards"] != [s.url for s in edge_shards] or record["node_shards"] != [s.url for s in node_shards]:
        return None
    files = _parts_files(work, len(edge_shards))
    if not (work / "master.npy").exists() or not all(f.exists() for f in files):
        return None
    return _SavedAssignment(
        num_nodes=record["num_nodes"], num_edges=record["num_edges"], num_parts=record["num_parts"],
        config=record["config"], undirected=record["undirected"], metrics=record["metrics"],
        timings=record["timings"], edge_shards=edge_shards, node_shards=node_shards,
        workdir=work, digest=record["digest"],
    )


def _stage_state(staging: Staging, assignment, generation: int, input_info: dict[str, Any],
                 close: bool = False) -> None:
    """Write the partitioner state (``state.zarr``) of this run into the staging
    directory; with ``close``, close ``assignment`` afterwards (even on an error)."""
    from pipeline.store.continuation import write_assignment_state

    try:
        with stage("state", log):
            write_assignment_state(assignment, staging.state_path, generation, input_info)
    finally:
        if close:
            assignment.close()


def _staged_state_ok(staging: Staging, generation: int) -> bool:
    ident = state_identity(staging.state_path)
    return ident is not None and ident[0] == generation


# --- input identity ------------------------------------------------------------------


def _input_url(input_url, storage_options=None) -> str:
    """The input's URL as ``asepr verify`` can find it again from any directory."""
    return url_of(*resolve(input_url, storage_options))


def _input_info_from_report(input_url, report, storage_options=None) -> dict[str, Any]:
    return {
        "url": _input_url(input_url, storage_options),
        "edges": [{"url": s.url, "rows": s.rows, "sha256": s.sha256} for s in report.edge_shards],
        "nodes": [{"url": s.url, "rows": s.rows, "sha256": s.sha256} for s in report.node_shards],
        "feat_dim": int(report.feat_dim),
    }


def _feat_dim(node_shards: list[Shard]) -> int:
    for shard in node_shards:
        pf = open_parquet(shard)
        layout, _, _ = check_node_schema(pf.schema_arrow, shard.url)
        if layout.dim is not None:
            return int(layout.dim)
        for batch in pf.iter_batches(batch_size=1, columns=list(layout.columns)):
            return int(feature_matrix(batch, layout).shape[1])
    return 0


def _input_info_from_shards(input_url, edge_shards, node_shards) -> dict[str, Any]:
    def describe(shards):
        return [{"url": s.url, "rows": open_parquet(s).metadata.num_rows, "sha256": fingerprint(s)} for s in shards]

    return {"url": None if input_url is None else _input_url(input_url), "edges": describe(edge_shards),
            "nodes": describe(node_shards), "feat_dim": _feat_dim(node_shards)}


def _run_key(config: dict[str, Any], halo: int, input_info: dict[str, Any]) -> str:
    # How the fallback is scheduled changes no result, so it does not make a new run.
    identity = {
        "format_version": [MANIFEST_VERSION, STORE_VERSION],
        "config": {k: v for k, v in config.items() if k != "concurrent_fallback"},
        "halo": halo,
        "edges": [s["sha256"] for s in input_info["edges"]],
        "nodes": [s["sha256"] for s in input_info["nodes"]],
    }
    return hashlib.sha256(dumps_json(identity)).hexdigest()


def _check_halo(halo: int) -> int:
    if halo not in (0, 1):
        raise StoreError(f"--halo: expected 0 or 1, found {halo!r}.")
    return int(halo)


# --- begin, write, commit ---------------------------------------------------------------


@contextlib.contextmanager
def _writable_output(out: str | Path, storage_options: dict | None) -> Iterator[Path]:
    """The local output directory, created if needed, locked, with disk errors explained.

    A directory this run created is removed again when the run leaves it empty.
    """
    out_path = local_output(out, storage_options)
    created = prepare_output_dir(out_path)
    try:
        with OutputLock(out_path), disk_errors(out_path):
            yield out_path
    finally:
        if created:
            remove_if_empty(out_path)


@contextlib.contextmanager
def _decoded_copy(out: Path) -> Iterator[Path]:
    """A new directory in the (locked) output for the validator's decoded edge copy
    (:mod:`storage.decoded`), removed on the way out, as are those of killed runs."""
    for stale in out.glob(f"{DECODED_PREFIX}*"):
        if stale.is_dir() and not stale.is_symlink():
            shutil.rmtree(stale, ignore_errors=True)
    path = Path(tempfile.mkdtemp(prefix=DECODED_PREFIX, dir=out))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def _begin(out: Path, run_key: str, overwrite: bool) -> tuple[Staging, int, dict | None]:
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
        raise StoreError(
            format_problem(
                f"output {out}",
                "no committed output (or --overwrite)",
                f"generation {old['generation']} with {old['num_parts']} partitions",
                "pass --overwrite to write the next generation (the current one stays readable "
                "until the new one is committed), or choose another output directory.",
            )
        )
    generation = int(old["generation"]) + 1 if old else 1
    staging.open_run(run_key, generation, "partition")
    return staging, generation, None


def _route_and_finalize_edges(staging: Staging, saved: _SavedAssignment, todo: list[int], *, halo: int,
                              client, progress: Progress | None, timings: dict[str, float],
                              decoded_edges: list[Shard] | None = None) -> list[dict]:
    """Route every edge shard not routed yet, then write the CSR of each partition in ``todo``.

    ``decoded_edges``: the edge shards with the validator's decoded copies attached
    (:mod:`storage.decoded`), which the route reads instead of the Parquet files and
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
            shutil.rmtree(staging.partial_store(p), ignore_errors=True)
        calls = [
            ((p,), {"route_spills": route_spills, "master_path": saved.master_path,
                    "store_path": str(staging.partial_store(p)),
                    "global_nid_path": str(staging.global_nid_path(p)), "halo": halo, "narrow": narrow})
            for p in todo
        ]
        edge_infos = run_tasks("finalize edges", finalize_edges, calls, client, progress)
        info.update(partitions=len(todo), edges=sum(e["counts"]["edges"] for e in edge_infos))
    return edge_infos


def _gather_and_finalize_nodes(staging: Staging, saved: _SavedAssignment, todo: list[int], edge_infos: list[dict],
                               *, feat_dim: int, attrs: dict[str, Any], client, progress: Progress | None,
                               timings: dict[str, float], node_table: NodeTable | None = None) -> list[dict]:
    """Gather the node rows of the partitions in ``todo``, then finish their stores.

    With the validator's decoded node table the stores take their rows from it in one
    sequential sweep per group of partitions, a group per thread or worker
    (:func:`~pipeline.store.finalize.finalize_nodes_from_table`): no gather pass, no spill.
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
                  "ways": 1 if client else slots})
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
                      "final_path": str(staging.store(p)), "feat_dim": feat_dim, "attrs": attrs})
            for p, e in zip(todo, edge_infos)
        ]
        entries = run_tasks("finalize nodes", finalize_nodes, calls, client, progress)
        info.update(partitions=len(todo))
    return entries


def _partition_manifest(saved: _SavedAssignment, *, input_info: dict[str, Any], run_key: str, generation: int,
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


def _write_generation(
    staging: Staging,
    saved: _SavedAssignment,
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
    out = staging.out
    k = saved.num_parts
    feat_dim = int(input_info["feat_dim"])
    attrs = {"num_parts": k, "generation": generation, "undirected": saved.undirected, "halo": halo}
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


# --- public entry points ------------------------------------------------------------------


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
        The output directory (local).
    config
        How to partition (:class:`~pipeline.config.PartitionConfig`).
    halo
        1 to copy the 1-hop in-neighbourhood of every master into its partition.
    client
        A ``distributed.Client``; None runs the Dask stages on local threads.
    overwrite
        Allow replacing a committed output (by the next generation).
    progress
        ``progress(stage, total)`` → a context manager with ``update(n)``, per stage.

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
    from pipeline.partition import partition

    halo = _check_halo(halo)
    with _writable_output(out, storage_options) as out_path, _decoded_copy(out_path) as decoded_dir:
        timings: dict[str, float] = {}
        start = time.perf_counter()
        with stage("validate", log):
            source = open_input(input_url, storage_options)
            config = config.resolved(source).effective()
            report = validate_input(source, undirected=config.undirected, check_duplicates=False,
                                    decoded_dir=str(decoded_dir))
        timings["validate"] = time.perf_counter() - start
        input_info = _input_info_from_report(input_url, report, storage_options)
        table = NodeTable(decoded_dir, report.num_nodes, report.feat_dim)
        decoded_edges = decoded_shards(source.edge_shards, [info.rows for info in report.edge_shards], decoded_dir,
                                       report.num_nodes)
        run_key = _run_key(config.to_dict(), halo, input_info)
        staging, generation, committed = _begin(out_path, run_key, overwrite)
        if committed is not None:
            return committed
        saved = _load_assignment(staging.work, run_key, source.edge_shards, source.node_shards)
        if saved is not None and not _staged_state_ok(staging, generation):
            saved = None
        # A new assignment's state is written on a thread beside the route and the edge
        # stores (one core's work while theirs leave room); the commit waits for it. A
        # run killed before it is finished finds no staged state and partitions again.
        with ThreadPoolExecutor(max_workers=1, thread_name_prefix="asepr-state") as state_pool:
            state_pending = None
            if saved is None:
                staging.reset_work()
                # The streaming passes read the validator's decoded copy; everything after
                # them (and what is saved) names the input's own shards.
                decoded = dataclasses.replace(source, edge_shards=decoded_edges, node_table=table)
                with bar_for(progress, "assign", 1) as bar:
                    assignment = partition(decoded, config=config, client=client, workdir=staging.work,
                                           report=report)
                    bar.update(1)
                assignment.edge_shards = source.edge_shards
                state_pending = state_pool.submit(_stage_state, staging, assignment, generation, input_info,
                                                  close=True)
                saved = _save_assignment(assignment, staging.work, run_key, halo)
                del assignment  # the state's thread holds (and then closes) it
            else:
                log.warning("resuming: reusing the saved assignment of generation %d", generation)
            saved.timings = {**saved.timings, "validate": timings["validate"]}
            return _write_generation(
                staging, saved, input_info=input_info, run_key=run_key, generation=generation,
                halo=halo, client=client, progress=progress, timings=dict(saved.timings), node_table=table,
                decoded_edges=decoded_edges, state_pending=state_pending,
            )


def write_partitions(
    assignment,
    out: str | Path,
    *,
    halo: int = 0,
    client=None,
    overwrite: bool = False,
    progress: Progress | None = None,
    input_url: str | Path | None = None,
) -> dict[str, Any]:
    """Write the stores of an existing :class:`~pipeline.Assignment` and commit them.

    Like :func:`partition_to_store` without the partitioning; a rerun resumes only
    when the assignment is bit-identical to the interrupted run's.

    Returns
    -------
    dict
        The committed manifest.
    """
    halo = _check_halo(halo)
    with _writable_output(out, None) as out_path:
        input_info = _input_info_from_shards(input_url, assignment.edge_shards, assignment.node_shards)
        run_key = _run_key(assignment.config.to_dict(), halo, input_info)
        staging, generation, committed = _begin(out_path, run_key, overwrite)
        if committed is not None:
            return committed
        parts = _parts_files(assignment.workdir, len(assignment.edge_shards))
        digest = _assignment_digest(assignment.master, parts)
        saved = _load_assignment(staging.work, run_key, assignment.edge_shards, assignment.node_shards)
        if saved is not None and saved.digest != digest:
            log.warning("discarding an interrupted run in %s (another assignment); starting clean", out_path)
            staging.restart(run_key, generation, "partition")
            saved = None
        if saved is not None and not _staged_state_ok(staging, generation):
            saved = None
        if saved is None:
            staging.reset_work()
            _stage_state(staging, assignment, generation, input_info)
            saved = _save_assignment(assignment, staging.work, run_key, halo)
        return _write_generation(
            staging, saved, input_info=input_info, run_key=run_key, generation=generation,
            halo=halo, client=client, progress=progress, timings=dict(saved.timings),
        )
