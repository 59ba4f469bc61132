"""Commit an incremental generation: rebuild only the changed partitions, then swap.

``asepr ingest`` and ``asepr rebalance`` change a committed output of generation g
into generation g+1. Both first decide, from the loaded state (O(N)), where every new
or moved edge goes; they save that decision (the :class:`Plan`) with the new
``state.zarr`` in the staging directory; then :func:`write_increment` rebuilds the
partitions that change and commits them, the node map and the state *together*,
through the same protocol as ``asepr partition`` (:mod:`asepr.pipeline.store.commit`)::

    OUT/.asepr-staging/
      run.json                    run key and generation (resumption)
      state.zarr/                 the state of generation g+1
      work/plan.json              the plan (saved last: it marks the decision as done)
      work/edge-parts-*.npy       partition of every new edge row, per new edge shard
      work/master.npy             int32 [N']   masters of generation g+1
      work/source.npy             int32 [N]    generation g's masters (whose store has each row)
      work/community.npy ...      (rebalance) community, move_from, move_to per community
      route/ fetch/ gather/ global_nid/   spill files (:mod:`asepr.pipeline.store.route`, :mod:`asepr.pipeline.increment.rebuild`)
      .part-*.zarr.partial/ part-*.zarr/ node_map.parquet    as for a partition run
      commit.json  old/           the journal and the replaced stores, while swapping

Stages (Dask, one task per shard or partition): route the new edges (per new edge
shard) and extract moved edges (per source partition) → rebuild edges (per changed
partition) → gather rows of nodes new to a partition (per new node shard, and per old
store that serves existing nodes) → rebuild nodes (per changed partition) → node map
→ commit. Partitions that do not change keep their store and their manifest entry,
including the generation it was written in.

The manifest of g+1 keeps generation g's fields and updates the counts, metrics,
partitions, node map and ``"state"`` entry; an ingest appends its shards to
``"increments"`` and a rebalance its moves to ``"rebalances"``. A rerun after a crash
completes an interrupted commit (journal), or reuses the saved plan, the spills and
every rebuilt store whose checksums verify.
"""

from __future__ import annotations

import dataclasses
import hashlib
import logging
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow.parquet as pq

from asepr.pipeline.assign import edge_parts_path
from asepr.pipeline.increment.rebuild import (
    extract_moves,
    fetch_rows,
    fetch_spill_paths,
    moves_spill_paths,
    rebuild_edges,
    rebuild_nodes,
)
from asepr.pipeline.store.commit import (
    Staging,
    commit,
    file_sha256,
    finished_entries,
    read_json_object,
    write_node_map,
)
from asepr.pipeline.store.generations import RemoteStaging
from asepr.pipeline.store.route import (
    edge_spill_paths,
    gather_node_shard,
    node_spill_paths,
    route_edge_shard,
)
from asepr.pipeline.store.tasks import Progress, run_tasks, timed, worker_peak_rss
from asepr.storage.commit.atomic import dumps_json, write_json_atomic
from asepr.storage.commit.confine import confined_join
from asepr.storage.errors import StoreError, format_problem
from asepr.storage.inputs.npy import load_npy
from asepr.storage.locations.fs import Shard, fingerprint, join, resolve, url_of
from asepr.storage.locations.location import remove_tree
from asepr.storage.partitions.manifest import (
    MANIFEST_NAME,
    NODE_MAP_NAME,
    OLD_DIR,
    STAGING_NAME,
    part_name,
)
from asepr.storage.partitions.output_stores import committed_store_urls
from asepr.storage.partitions.state import STATE_NAME, state_entry, state_identity
from asepr.storage.resources import peak_rss_bytes

__all__ = ["Plan", "load_plan", "save_plan", "write_increment"]

log = logging.getLogger(__name__)

PLAN_NAME = "plan.json"


@dataclass
class Plan:
    """An incremental run's decision, saved before any store is written.

    Attributes
    ----------
    kind
        ``"ingest"`` or ``"rebalance"``.
    generation
        The generation being written (g+1).
    num_nodes, num_old_nodes
        N' (after) and N (before); new nodes are ``N .. N'-1``.
    num_edges
        |E| after.
    edge_shards, node_shards
        Ingest: the new shards (URLs), in stream order.
    sources
        Rebalance: the partitions whose communities move away.
    metrics
        The quality metrics of generation g+1.
    record
        What the manifest appends for this run (``increments`` or ``rebalances`` entry).
    state_checksum
        The checksum of the staged ``state.zarr``.
    edge_sha256, node_sha256
        Ingest: the content digests of the new shards, in stream order (the shards
        themselves are the ones the rerun is given, found by these digests).
    """

    kind: str
    generation: int
    num_nodes: int
    num_old_nodes: int
    num_edges: int
    edge_shards: list[str] = field(default_factory=list)
    node_shards: list[str] = field(default_factory=list)
    sources: list[int] = field(default_factory=list)
    metrics: dict[str, Any] = field(default_factory=dict)
    record: dict[str, Any] = field(default_factory=dict)
    timings: dict[str, float] = field(default_factory=dict)
    state_checksum: str = ""
    run_key: str = ""
    edge_sha256: list[str] = field(default_factory=list)
    node_sha256: list[str] = field(default_factory=list)


def _work_digests(staging: Staging) -> dict[str, str]:
    """sha256 of every file of ``work/`` (the arrays the plan was decided with)."""
    return {path.name: file_sha256(path).hexdigest()
            for path in sorted(staging.work.iterdir()) if path.is_file() and path.name != PLAN_NAME}


def _record_digest(record: dict[str, Any]) -> str:
    return hashlib.sha256(dumps_json({k: v for k, v in record.items() if k != "digest"})).hexdigest()


def save_plan(staging: Staging, plan: Plan) -> None:
    """Save the plan last: its presence says the state and the work files are complete.

    It records the sha256 of every work file and its own digest, so that a rerun uses
    nothing of ``work/`` that changed since (:func:`load_plan`).
    """
    record = dataclasses.asdict(plan)
    record["files"] = _work_digests(staging)
    record["digest"] = _record_digest(record)
    write_json_atomic(staging.work / PLAN_NAME, record)


def _plan_problem(staging: Staging, record: dict[str, Any], edge_sha256: list[str],
                  node_sha256: list[str]) -> str | None:
    """Why the saved plan cannot be trusted, or None."""
    if record.get("digest") != _record_digest(record):
        return f"{PLAN_NAME} does not match its digest (it was changed after it was saved)"
    if record.get("edge_sha256") != list(edge_sha256) or record.get("node_sha256") != list(node_sha256):
        return f"{PLAN_NAME} names other shards than the ones given (by their sha256)"
    files = record.get("files")
    if not isinstance(files, dict) or not {"master.npy", "source.npy"} <= set(files):
        return f"{PLAN_NAME} lists no digests of its work files"
    if files != _work_digests(staging):
        return "the work files are not the ones the plan was saved with (their sha256 differ)"
    return None


def load_plan(staging: Staging, run_key: str, generation: int, *, command: str,
              edge_sha256: list[str] = (), node_sha256: list[str] = ()) -> Plan | None:
    """The saved plan of this run (same key and generation) if it, its state and its work
    files are the ones saved.

    A saved plan of this run that fails a digest (``plan.json`` itself, a work file, the
    staged state, or shards other than ``edge_sha256``/``node_sha256``) is discarded with
    everything staged after it, with a warning: the run starts clean.
    """
    record = read_json_object(staging.work / PLAN_NAME)
    if not record or record.get("run_key") != run_key or record.get("generation") != generation:
        return None
    problem = _plan_problem(staging, record, list(edge_sha256), list(node_sha256))
    ident = state_identity(staging.state_path)
    if problem is None and (ident is None or ident != (generation, record.get("state_checksum"))):
        problem = "the staged state is not the one the plan was saved with"
    if problem is not None:
        log.warning("discarding the saved %s plan in %s: %s; starting the %s over", command,
                    staging.work / PLAN_NAME, problem, command)
        staging.restart(run_key, generation, command)
        return None
    known = {f.name for f in dataclasses.fields(Plan)}
    return Plan(**{k: v for k, v in record.items() if k in known})


def _segment_parts(spills: list[tuple[Path, Path]]) -> set[int]:
    parts: set[int] = set()
    for _, idx_path in spills:
        index = load_npy(idx_path)
        if len(index):
            parts.update(int(p) for p in np.unique(index[:, 0]))
    return parts


def _old_node_map(out: Path | str, manifest: dict[str, Any],
                  storage_options: dict | None = None) -> tuple[np.ndarray, np.ndarray]:
    """``(part_id, part_local_nid)`` of generation g's node map (where the manifest names it
    or, mid-swap, in old/)."""
    want = manifest.get("node_map", {}).get("sha256")
    fs, base = resolve(out, storage_options)
    named = confined_join(fs, base, manifest.get("node_map", {}).get("path", NODE_MAP_NAME),
                          what=f"manifest {url_of(fs, join(base, MANIFEST_NAME))} (node_map path)")
    for path in (named, join(base, STAGING_NAME, OLD_DIR, NODE_MAP_NAME)):
        if not fs.exists(path):
            continue
        if want is not None and fingerprint(Shard(fs=fs, path=path, url=path, size=0)) != want:
            continue
        with fs.open(path, "rb") as fh:
            table = pq.read_table(fh, columns=["part_id", "part_local_nid"])
        return (table.column("part_id").to_numpy().astype(np.int64),
                table.column("part_local_nid").to_numpy().astype(np.int64))
    raise StoreError(
        format_problem(f"output {out}", f"a {NODE_MAP_NAME} with the manifest's sha256", "none",
                       "run `asepr verify`; repartition with `asepr partition ... --overwrite`.")
    )


@dataclass
class _Layout:
    """What every stage of an incremental write needs: paths and run-wide settings."""

    staging: Staging
    plan: Plan
    num_parts: int
    halo: int
    undirected: bool
    feat_dim: int
    old_urls: dict[int, str]
    moves: dict[str, str]
    out: Path | str = ""

    @property
    def master_path(self) -> str:
        return str(self.staging.work / "master.npy")

    @property
    def source_path(self) -> str:
        return str(self.staging.work / "source.npy")

    def added_path(self, p: int) -> str:
        """The sorted ids of the nodes partition ``p`` gains (``.npy``)."""
        return str(self.staging.global_nid_dir / f"added-{p:05d}.npy")


def _route(layout: _Layout, edge_shards: list[Shard], batch_rows: int, client, progress: Progress | None,
           timings: dict[str, float]) -> list[tuple[Path, Path]]:
    """Route the new edges and (rebalance) spill the moved ones; return every edge spill."""
    staging, plan, k = layout.staging, layout.plan, layout.num_parts
    route_spills = [edge_spill_paths(staging.route, i) for i in range(len(edge_shards))]
    move_spills = [moves_spill_paths(staging.route, p) for p in plan.sources]
    with timed("route", timings, client) as info:
        calls = [
            ((shard, i, str(edge_parts_path(staging.work, i)), str(staging.route)),
             {"num_parts": k, "halo": layout.halo, "undirected": layout.undirected,
              "master_path": layout.master_path, "batch_rows": batch_rows})
            for i, shard in enumerate(edge_shards) if not route_spills[i][1].exists()
        ]
        run_tasks("route", route_edge_shard, calls, client, progress)
        if plan.kind == "rebalance":
            calls = [((p,), {"old_store": layout.old_urls[p], "route_dir": str(staging.route), "num_parts": k,
                             "storage_options": staging.storage_options, **layout.moves})
                     for p, spill in zip(plan.sources, move_spills) if not spill[1].exists()]
            run_tasks("extract moves", extract_moves, calls, client, progress)
        info.update(shards=len(edge_shards), sources=len(plan.sources))
    return route_spills + move_spills


def _changed_partitions(layout: _Layout, spills: list[tuple[Path, Path]]) -> list[int]:
    """The partitions that gain or lose edges or nodes, or whose masters change."""
    plan = layout.plan
    master = load_npy(layout.master_path, mmap_mode="r")
    source = load_npy(layout.source_path, mmap_mode="r")
    n_old = plan.num_old_nodes
    changed = _segment_parts(spills) | set(plan.sources)
    changed |= {int(p) for p in np.unique(np.asarray(master[n_old:]))}
    moved_master = np.flatnonzero(np.asarray(master[:n_old]) != np.asarray(source[:n_old]))
    changed |= {int(p) for p in np.unique(np.asarray(master[moved_master]))}
    changed |= {int(p) for p in np.unique(np.asarray(source[moved_master]))}
    return sorted(changed)


def _rebuild_edge_stage(layout: _Layout, todo: list[int], spills: list[tuple[Path, Path]], client,
                        progress: Progress | None, timings: dict[str, float]) -> list[dict]:
    staging = layout.staging
    with timed("rebuild edges", timings, client) as info:
        for p in todo:
            remove_tree(staging.partial_store(p), staging.storage_options)
        calls = [
            ((p,), {"old_store": layout.old_urls.get(p), "edge_spills": spills, "master_path": layout.master_path,
                    "store_path": str(staging.partial_store(p)),
                    "global_nid_path": str(staging.global_nid_path(p)), "added_path": layout.added_path(p),
                    "halo": layout.halo, "storage_options": staging.storage_options, **layout.moves})
            for p in todo
        ]
        edge_infos = run_tasks("rebuild edges", rebuild_edges, calls, client, progress)
        info.update(partitions=len(todo), added_nodes=sum(e["added"] for e in edge_infos))
    return edge_infos


def _gather_stage(layout: _Layout, todo: list[int], node_shards: list[Shard], client, progress: Progress | None,
                  timings: dict[str, float]) -> list[tuple[Path, Path]]:
    """Spill the rows of the nodes each partition gains: new nodes from the new node shards,
    existing nodes from the old store of their previous master. Returns the row spills."""
    staging, n_old, feat_dim = layout.staging, layout.plan.num_old_nodes, layout.feat_dim
    source = load_npy(layout.source_path, mmap_mode="r")
    with timed("gather nodes", timings, client) as info:
        added = {p: layout.added_path(p) for p in todo}
        calls = [((shard, j, added, str(staging.gather)), {"feat_dim": feat_dim})
                 for j, shard in enumerate(node_shards)]
        rows = run_tasks("gather nodes", gather_node_shard, calls, client, progress)
        needed = set()
        for p in todo:
            a = load_npy(added[p])
            a = a[a < n_old]
            needed |= {int(q) for q in np.unique(np.asarray(source[a]))}
        calls = [((q,), {"old_store": layout.old_urls[q], "added_paths": added, "source_path": layout.source_path,
                         "num_old_nodes": n_old, "fetch_dir": str(staging.fetch), "feat_dim": feat_dim,
                         "storage_options": staging.storage_options})
                 for q in sorted(needed)]
        fetched = run_tasks("fetch rows", fetch_rows, calls, client, progress)
        info.update(new_node_rows=sum(rows), fetched_rows=sum(fetched), stores=len(needed))
    return ([node_spill_paths(staging.gather, j) for j in range(len(node_shards))]
            + [fetch_spill_paths(staging.fetch, q) for q in sorted(needed)])


def _rebuild_node_stage(layout: _Layout, todo: list[int], edge_infos: list[dict],
                        gather_spills: list[tuple[Path, Path]], attrs: dict[str, Any], client,
                        progress: Progress | None, timings: dict[str, float]) -> list[dict]:
    staging = layout.staging
    with timed("rebuild nodes", timings, client) as info:
        calls = [
            ((p, e), {"old_store": layout.old_urls.get(p), "gather_spills": gather_spills,
                      "store_path": str(staging.partial_store(p)), "final_path": str(staging.store(p)),
                      "global_nid_path": str(staging.global_nid_path(p)), "added_path": layout.added_path(p),
                      "feat_dim": layout.feat_dim, "attrs": attrs, "storage_options": staging.storage_options})
            for p, e in zip(todo, edge_infos)
        ]
        entries = run_tasks("rebuild nodes", rebuild_nodes, calls, client, progress)
        info.update(partitions=len(todo))
    return entries


def _node_map(layout: _Layout, old_manifest: dict[str, Any], changed: list[int]) -> str:
    """Generation g's node map with the masters of the changed partitions claimed anew."""
    part_of, local = _old_node_map(layout.out, old_manifest, layout.staging.storage_options)
    n_new = layout.plan.num_nodes
    grown_part = np.full(n_new, -1, dtype=np.int64)
    grown_local = np.full(n_new, -1, dtype=np.int64)
    grown_part[: len(part_of)] = part_of
    grown_local[: len(local)] = local
    stale = np.isin(grown_part, np.asarray(changed, dtype=np.int64))
    grown_part[stale] = -1
    return write_node_map(layout.staging, changed, grown_part, grown_local,
                          fix="rerun the same command to start clean.")


def _increment_manifest(plan: Plan, old_manifest: dict[str, Any], *, entries: dict[int, dict],
                        changed: list[int], resumed: list[int], node_map_sha: str, timings: dict[str, float],
                        client) -> dict[str, Any]:
    """Generation g's manifest, updated for g+1 (unchanged partitions keep their entries)."""
    old_entries = {int(e["part_id"]): e for e in old_manifest["partitions"]}
    generation = plan.generation
    manifest = dict(old_manifest)
    manifest.setdefault("input_generation", int(old_manifest["generation"]))
    manifest.update(
        generation=generation,
        created=time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        num_nodes=int(plan.num_nodes),
        num_edges=int(plan.num_edges),
        metrics=plan.metrics,
        timings={key: round(v, 4) for key, v in timings.items()},
        run={
            "kind": plan.kind,
            "changed_partitions": changed,
            "resumed_partitions": resumed,
            "peak_rss_bytes": {"driver": peak_rss_bytes(), "workers": worker_peak_rss(client)},
        },
        node_map={"path": NODE_MAP_NAME, "sha256": node_map_sha},
        partitions=[
            {"part_id": p, "path": part_name(p), "generation": generation, **entries[p]}
            if p in entries else old_entries[p]
            for p in range(int(old_manifest["num_parts"]))
        ],
        run_key=plan.run_key,
        state=state_entry(generation, plan.state_checksum),
    )
    if plan.kind == "ingest":
        manifest["increments"] = [*old_manifest.get("increments", []), plan.record]
    else:
        manifest["rebalances"] = [*old_manifest.get("rebalances", []), plan.record]
    return manifest


def write_increment(
    staging: Staging,
    plan: Plan,
    *,
    old_manifest: dict[str, Any],
    client,
    progress: Progress | None,
    timings: dict[str, float],
    edge_shards: list[Shard] = (),
    node_shards: list[Shard] = (),
) -> dict[str, Any]:
    """Rebuild the partitions the plan changes and commit generation ``plan.generation``.

    ``edge_shards`` and ``node_shards`` are an ingest's new shards as given to this run
    (the plan holds their digests, never paths to read).

    Returns
    -------
    dict
        The committed manifest.
    """
    remote = isinstance(staging, RemoteStaging)
    out = staging.target.url if remote else staging.out
    k = int(old_manifest["num_parts"])
    for d in (staging.route, staging.gather, staging.global_nid_dir, staging.fetch):
        d.mkdir(parents=True, exist_ok=True)
    work = staging.work
    moves = {}
    if plan.kind == "rebalance":
        moves = {"community_path": str(work / "community.npy"), "move_from_path": str(work / "move_from.npy"),
                 "move_to_path": str(work / "move_to.npy")}
    layout = _Layout(
        staging=staging, plan=plan, num_parts=k, halo=int(old_manifest.get("halo", 0)),
        undirected=bool(old_manifest.get("undirected", False)), feat_dim=int(old_manifest.get("feat_dim", 0)),
        old_urls=committed_store_urls(out, old_manifest, storage_options=staging.storage_options),
        moves=moves, out=out,
    )
    batch_rows = int(old_manifest.get("config", {}).get("batch_rows", 1 << 20))
    spills = _route(layout, list(edge_shards), batch_rows, client, progress, timings)
    changed = _changed_partitions(layout, spills)
    attrs = {"num_parts": k, "generation": plan.generation, "undirected": layout.undirected, "halo": layout.halo}
    entries = finished_entries(staging, changed, attrs)
    resumed = sorted(entries)
    todo = [p for p in changed if p not in entries]
    if resumed:
        log.warning("resuming: %d of %d changed partitions already rebuilt (checksums verified)",
                    len(resumed), len(changed))
    if todo:
        edge_infos = _rebuild_edge_stage(layout, todo, spills, client, progress, timings)
        gather_spills = _gather_stage(layout, todo, list(node_shards), client, progress, timings)
        for entry in _rebuild_node_stage(layout, todo, edge_infos, gather_spills, attrs, client, progress,
                                         timings):
            entries[entry["part_id"]] = entry

    with timed("node map", timings, client):
        node_map_sha = _node_map(layout, old_manifest, changed)

    with timed("commit", timings, client):
        manifest = _increment_manifest(plan, old_manifest, entries=entries, changed=changed, resumed=resumed,
                                       node_map_sha=node_map_sha, timings=timings, client=client)
        if remote:
            manifest = staging.publish(manifest, plan.generation)
        else:
            commit(staging, run_key=plan.run_key, generation=plan.generation,
                   items=[part_name(p) for p in changed] + [NODE_MAP_NAME, STATE_NAME], retire=[], manifest=manifest)
    log.info("committed generation %d of %s (%s): %d of %d partitions rebuilt", plan.generation, out, plan.kind,
             len(changed), k)
    return manifest
