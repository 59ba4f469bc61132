"""Incremental ingest: add new edge and node shards to a committed output (docs/design.md#incremental-ingest).

:func:`ingest` continues the stream where ``asepr partition`` (or the previous ingest)
stopped, from the persisted state (:mod:`asepr.storage.partitions.state`), in roughly the time it takes
to assign the new edges:

1. **Exactly once**: every given shard is fingerprinted (sha256); a shard whose
   fingerprint the state lists is skipped with a message. Nothing new: nothing happens.
2. **Validate** the new shards as the partition path does
   (:func:`asepr.storage.integrity.validate_increment.validate_increment`): new nodes carry the ids
   ``N .. N+n-1`` (contiguous from the next free id ``N``); an edge may name an
   existing node or a new one, and any other id fails before anything is written.
3. **Degrees** of the new edges (Dask) grow the exact degrees: every new edge is
   scored with the degrees of the whole grown graph, as in a single stream.
4. **New nodes' attribute clusters**: the nearest centroid of their features
   (the saved k-means model). A node without features (an all-zero vector), and every
   new node of a run whose clusters came from a categorical column, takes the
   majority cluster of its neighbours over the new edges (ties: the lower cluster;
   no clustered neighbour: the most populous cluster).
5. **Communities**: community volumes grow by the new degrees, each new node starts
   as a singleton, and one pass of the structural clustering rule over the new edges
   (:class:`asepr.pipeline.stages.struct_cluster.ClusterState`, same caps) lets new nodes join
   communities. Every new community is placed on its attribute cluster's home when
   that partition stays under the volume cap, else on the partition of least community
   volume (:func:`asepr.pipeline.stages.mapping.place_new_communities`).
6. **Assignment**: the same kernel, mode, weights and partition shares as the
   original run, on the saved replica bitsets and loads, with the caps of the grown
   edge count (with shares, each partition's ``ceil((1+eps) share_p |E|)``: the
   proportions hold as the graph grows).
7. **Masters**: existing nodes keep theirs (a trainer's masters do not move); a new
   node gets the replica holding most of its edges (ties: fewer masters).
8. **Write**: only the partitions that gain edges or nodes are rebuilt, and they are
   committed with the node map and the new state as generation g+1
   (:mod:`asepr.pipeline.increment.generation`). A killed ingest leaves generation g intact and a
   rerun completes it.

New edges may also come as a text edge list in the original ids of an imported input:
they are mapped through its ``id_map.parquet`` first, and the ids it lacks become new
nodes appended to it (:mod:`asepr.pipeline.increment.text_edges`).

Memory: the state, O(N) (as the assignment stage of a full run), plus a batch of
edges; never all edges. The 1-hop locality of the new generation counts the old edges'
incidences as they were measured at their commit (replicas only grow, so this is a
lower bound) plus the new edges' exactly.
"""

from __future__ import annotations

import hashlib
import logging
import time
from pathlib import Path
from typing import Any

import numpy as np

from asepr.pipeline.assign import EdgePartSink, iter_assigned, stream_assign
from asepr.pipeline.increment.generation import Plan, load_plan, save_plan, write_increment
from asepr.pipeline.increment.text_edges import TextIngest, commit_id_map, refuse_node_shards, text_ingest
from asepr.pipeline.stages.attr_cluster import AttrModel
from asepr.pipeline.stages.degrees import compute_degrees
from asepr.pipeline.stages.mapping import place_new_communities
from asepr.pipeline.stages.masters import choose_new_masters, count_new_edges_per_replica, replica_offsets
from asepr.pipeline.stages.metrics import drift_metrics, locality_batch, partition_metrics, share_metrics
from asepr.pipeline.stages.struct_cluster import ClusterState
from asepr.pipeline.store.commit import Staging, disk_errors, local_output, recover_journal
from asepr.pipeline.store.continuation import Continuation
from asepr.pipeline.store.generations import RemoteStaging, begin_remote_run, remote_output
from asepr.pipeline.store.tasks import Progress, bar_for
from asepr.pipeline.stream import iter_edge_batches
from asepr.storage.commit.atomic import dumps_json
from asepr.storage.commit.lock import OutputLock
from asepr.storage.errors import InputError, StoreError, format_problem
from asepr.storage.importers.edge_increment import text_edge_files
from asepr.storage.inputs.directory import open_parquet
from asepr.storage.inputs.npy import save_npy
from asepr.storage.inputs.schema import check_node_schema, feature_matrix
from asepr.storage.integrity.validate_increment import validate_increment
from asepr.storage.locations.fs import Shard, discover_shards, fingerprint
from asepr.storage.locations.location import is_local_url
from asepr.storage.partitions.manifest import read_manifest
from asepr.storage.partitions.state import read_state, read_state_attrs
from asepr.storage.resources import StageClock, peak_rss_bytes, stage

__all__ = ["ingest"]

log = logging.getLogger(__name__)

#: Neighbour votes collected before they are compacted (per featureless node and cluster).
_VOTE_FLUSH = 1 << 22


# --- which shards are new ------------------------------------------------------------------


def _fingerprinted(shards: list[Shard]) -> list[tuple[Shard, str]]:
    return [(s, fingerprint(s)) for s in shards]


def _split_new(shards: list[tuple[Shard, str]], known: dict[str, dict]) -> tuple[list, list]:
    new, skipped = [], []
    for shard, sha in shards:
        (skipped if sha in known else new).append((shard, sha))
    return new, skipped


def _known_shards(state_attrs: dict[str, Any]) -> dict[str, dict]:
    return {s["sha256"]: s for s in state_attrs.get("shards", [])}


def _run_key(manifest: dict[str, Any], new_edges: list, new_nodes: list) -> str:
    identity = {
        "kind": "ingest",
        "base_generation": manifest["generation"],
        "base_state": (manifest.get("state") or {}).get("checksum"),
        "edges": [sha for _, sha in new_edges],
        "nodes": [sha for _, sha in new_nodes],
    }
    return hashlib.sha256(dumps_json(identity)).hexdigest()


def _report_skips(skipped: list, known: dict[str, dict]) -> None:
    for shard, sha in skipped:
        was = known[sha]
        log.warning("skipping %s shard %s: already ingested in generation %s (as %s, sha256 %s…)",
                    was.get("kind", "input"), shard.url, was.get("generation"), was.get("url"), sha[:12])


# --- the assignment of the increment ----------------------------------------------------------


def _attr_model(cont: Continuation) -> AttrModel | None:
    if cont.centroids is None or not len(cont.centroids):
        return None
    feat_dim = cont.projection.shape[0] if cont.projection is not None else cont.centroids.shape[1]
    return AttrModel(centroids=cont.centroids, projection=cont.projection, feat_dim=int(feat_dim))


def _new_node_rows(cont: Continuation, node_shards: list[Shard], batch_rows: int) -> np.ndarray:
    """Labels and (nearest-centroid) clusters of the new nodes; returns the featureless ids."""
    model = _attr_model(cont)
    featureless = []
    for shard in node_shards:
        pf = open_parquet(shard)
        layout, present, _ = check_node_schema(pf.schema_arrow, shard.url)
        columns = ["id", *layout.columns, *(c for c in present if c == "label")]
        rows = max(1024, min(batch_rows, (16 << 20) // max(1, 4 * (layout.dim or 256))))
        for batch in pf.iter_batches(batch_size=rows, columns=columns):
            ids = batch.column("id").to_numpy()
            if "label" in present:
                cont.label[ids] = batch.column("label").to_numpy()
            feat = feature_matrix(batch, layout)
            has = np.any(feat != 0, axis=1)
            if model is not None and has.any():
                cont.attr[ids[has]] = model.predict(feat[has])
                featureless.append(ids[~has])
            else:
                featureless.append(ids)
    return np.concatenate(featureless) if featureless else np.zeros(0, np.int64)


def _neighbour_majority(cont: Continuation, edge_shards: list[Shard], nodes: np.ndarray,
                        batch_rows: int) -> None:
    """Give each node of ``nodes`` its neighbours' majority cluster over the new edges."""
    is_open = np.zeros(cont.num_nodes, dtype=bool)
    is_open[nodes] = True
    width = int(max(cont.attr.max(initial=0) + 1, len(cont.attr_home), 1))
    keys = np.zeros(0, np.int64)
    counts = np.zeros(0, np.int64)
    pending: list[np.ndarray] = []
    size = 0

    def flush():
        nonlocal keys, counts, pending, size
        batch = np.concatenate(pending)
        merged, inverse = np.unique(np.concatenate([keys, batch]), return_inverse=True)
        weights = np.concatenate([counts, np.ones(len(batch), np.int64)])
        keys, counts = merged, np.bincount(inverse, weights=weights).astype(np.int64)
        pending, size = [], 0

    for batch in iter_edge_batches(edge_shards, batch_rows):
        for a, b in ((batch.src, batch.dst), (batch.dst, batch.src)):
            mask = is_open[a] & ~is_open[b]
            if mask.any():
                voter = cont.attr[b[mask]]
                ok = voter >= 0
                pending.append(a[mask][ok] * width + voter[ok])
                size += int(ok.sum())
        if size > _VOTE_FLUSH:
            flush()
    if pending:
        flush()
    fallback = int(np.bincount(cont.attr[cont.attr >= 0], minlength=1).argmax()) if (cont.attr >= 0).any() else 0
    cont.attr[nodes] = fallback
    if len(keys):
        node, cluster = keys // width, keys % width
        order = np.lexsort((cluster, -counts, node))
        node, cluster = node[order], cluster[order]
        first = np.ones(len(node), dtype=bool)
        first[1:] = node[1:] != node[:-1]
        cont.attr[node[first]] = cluster[first].astype(np.int32)
    log.info("ingest: %d new node(s) without features took their neighbours' majority cluster", len(nodes))


def _grow_degrees(cont: Continuation, edge_shards: list[Shard], num_new_nodes: int, client,
                  batch_rows: int) -> tuple[np.ndarray, np.ndarray]:
    """Step 3: grow ``cont`` by the new nodes and edges; returns ``(seen_degree, new_degree)``.

    ``seen_degree`` is the degree before the increment (the kernel's partial degrees),
    ``new_degree`` the increment's own.
    """
    first = cont.num_nodes
    seen_degree = np.zeros(first + num_new_nodes, dtype=np.int64)
    seen_degree[:first] = cont.degree
    cont.grow(first + num_new_nodes)
    degrees = compute_degrees(edge_shards, cont.num_nodes, client=client, batch_rows=batch_rows)
    cont.degree += degrees.degree
    cont.num_edges += degrees.num_edges
    cont.kernel = cont.kernel.with_edges(cont.num_edges, cont.num_parts)
    return seen_degree, degrees.degree


def _grow_communities(cont: Continuation, edge_shards: list[Shard], new_degree: np.ndarray,
                      batch_rows: int) -> int:
    """Step 5: volumes grow, new nodes may join communities, new communities are placed."""
    config, k = cont.config, cont.num_parts
    with stage("structural clustering", log) as info:
        grown = np.bincount(cont.community, weights=new_degree, minlength=cont.num_nodes)
        cont.volume += np.rint(grown[: cont.num_nodes]).astype(np.int64)
        del grown
        attr = cont.attr if config.uses_attributes else np.zeros(cont.num_nodes, np.int32)
        cap = float(cont.degree.sum()) / k
        cross_cap = (1.0 - cont.kernel.alpha) * cap
        clusters = ClusterState(cont.degree, attr, cont.community, cont.volume)
        moves = 0
        for batch in iter_edge_batches(edge_shards, batch_rows):
            moves += clusters.cluster(batch.src, batch.dst, cap, cross_cap)
        cont.community[:] = clusters.community
        cont.volume[:] = clusters.volume
        del clusters
        keep = config.uses_attributes and cont.kernel.keep_attr_together
        new_communities = place_new_communities(
            cont.community_part, cont.volume, cont.attr, cont.attr_home if keep else None, k,
            epsilon=config.epsilon, shares=cont.kernel.shares,
        )
        info.update(moves=moves, new_communities=new_communities)
    return new_communities


def _assign_new_edges(cont: Continuation, edge_shards: list[Shard], seen_degree: np.ndarray, workdir: Path,
                      batch_rows: int, clock: StageClock) -> tuple[int, int]:
    """Step 6: stream the new edges through the kernel; returns ``(new edges, off-community edges)``."""
    state = cont.assign_state(seen_degree)
    vertex_part = cont.vertex_part()
    off_community = 0

    def count_off_community(batch, parts) -> None:
        nonlocal off_community
        off_community += int(np.count_nonzero((parts != vertex_part[batch.src]) & (parts != vertex_part[batch.dst])))

    shard_rows = [open_parquet(s).metadata.num_rows for s in edge_shards]
    sink = EdgePartSink(workdir, shard_rows)
    seconds = stream_assign(state, lambda: iter_edge_batches(edge_shards, batch_rows), cont.kernel, sink,
                            observe=count_off_community if vertex_part is not None else None)
    clock.add("assignment kernel", seconds)
    cont.replicas = state.replicas
    cont.loads = state.loads.copy()
    return int(sum(shard_rows)), off_community


def _new_masters(cont: Continuation, edge_shards: list[Shard], first: int, workdir: Path, batch_rows: int) -> None:
    """Step 7: existing nodes keep their masters; nodes ``first ..`` get one."""
    offsets = replica_offsets(cont.replicas[first:])
    counts = np.zeros(offsets[-1], dtype=np.int64)
    for src, dst, part in iter_assigned(edge_shards, workdir, batch_rows):
        count_new_edges_per_replica(src, dst, part, cont.replicas, offsets, counts, first)
    per_part = np.bincount(cont.master[:first], minlength=cont.num_parts)
    cont.master[first:] = choose_new_masters(cont.replicas, offsets, counts, cont.num_parts, first, per_part,
                                             cont.kernel.shares)


def _grown_metrics(cont: Continuation, edge_shards: list[Shard], batch_rows: int) -> tuple[dict, tuple[int, int]]:
    """The metrics of the grown graph and its 1-hop locality counts (old ones as committed)."""
    local, total = (int(x) for x in cont.attrs.get("locality", (0, 0)))
    for batch in iter_edge_batches(edge_shards, batch_rows):
        a, b = locality_batch(batch.src, batch.dst, cont.replicas, cont.master)
        local += a
        total += b
    metrics = partition_metrics(cont.replicas, cont.loads, cont.master, cont.attr, cont.label, (local, total))
    metrics["cap"] = cont.kernel.cap
    metrics["drift"] = drift_metrics(cont.loads, cont.kernel.epsilon, cont.community_part, cont.volume,
                                     shares=cont.kernel.shares)
    if cont.kernel.shares is not None:
        metrics["capacity"] = share_metrics(cont.loads, metrics["masters"], cont.kernel.shares)
    return metrics, (local, total)


def _assign_increment(
    cont: Continuation,
    edge_shards: list[Shard],
    node_shards: list[Shard],
    num_new_nodes: int,
    workdir: Path,
    client,
    timings: dict[str, float],
) -> dict[str, Any]:
    """Steps 3-7 of the module docstring, on ``cont`` in place; writes the edge-parts files."""
    batch_rows = int(cont.config.batch_rows)
    first = cont.num_nodes
    clock = StageClock(timings)
    seen_degree, new_degree = _grow_degrees(cont, edge_shards, num_new_nodes, client, batch_rows)
    clock.tick("degrees")
    featureless = _new_node_rows(cont, node_shards, batch_rows)
    if len(featureless):
        _neighbour_majority(cont, edge_shards, featureless, batch_rows)
    clock.tick("attribute clusters")
    new_communities = 0
    if cont.has_communities:
        new_communities = _grow_communities(cont, edge_shards, new_degree, batch_rows)
        clock.tick("structural clustering")
    del new_degree
    new_edges, off_community = _assign_new_edges(cont, edge_shards, seen_degree, workdir, batch_rows, clock)
    del seen_degree
    clock.tick("assignment")
    if num_new_nodes:
        _new_masters(cont, edge_shards, first, workdir, batch_rows)
    clock.tick("masters")
    metrics, locality = _grown_metrics(cont, edge_shards, batch_rows)
    clock.tick("metrics")
    return {
        "metrics": metrics,
        "locality": locality,
        "new_edges": new_edges,
        "new_nodes": int(num_new_nodes),
        "featureless_nodes": len(featureless),
        "new_communities": int(new_communities),
        "off_community_edges": int(off_community),
    }


# --- the entry point ------------------------------------------------------------------------


def _discover(url, what: str, storage_options) -> list[Shard]:
    return discover_shards(url, what=what, storage_options=storage_options)


def ingest(
    out: str | Path,
    new_edges: str | Path,
    nodes: str | Path | None = None,
    *,
    client=None,
    progress: Progress | None = None,
    storage_options: dict | None = None,
) -> dict[str, Any]:
    """Add new edge (and node) shards to the committed output ``out`` as a new generation.

    Parameters
    ----------
    out
        The output of ``asepr partition``: a local directory, or an object-store URL
        (Parquet shards only: a text edge list is ingested into a local output).
    new_edges
        New edge shards: a directory, glob or file of Parquet (columns ``src``, ``dst`` in
        node ids), or a text edge list as ``asepr import edgelist`` reads it, in the
        input's original ids (:mod:`asepr.pipeline.increment.text_edges`).
    nodes
        New node shards (ids ``N .. N+n-1``, from the output's next free id ``N``); not
        with a text edge list, whose new ids ingest numbers itself.
    client
        A ``distributed.Client`` for the Dask stages; None runs them on local threads.
    progress
        ``progress(stage, total)`` → a context manager with ``update(n)``, per stage.

    Returns
    -------
    dict
        The committed manifest of the new generation; the current manifest when every
        given shard was ingested before (each is skipped with a logged message).

    Raises
    ------
    InputError, SchemaError
        A new shard is invalid (nothing is written).
    StoreError
        The output has no state, is locked by another writer, or a disk error occurred
        (generation g stays intact; rerun the same command).
    """
    text_files = text_edge_files(new_edges, storage_options)
    if not is_local_url(out, storage_options) and text_files is None:
        edge_shards = _discover(new_edges, "new edge shards", storage_options)
        node_shards = _discover(nodes, "new node shards", storage_options) if nodes is not None else []
        read_manifest(out, storage_options=storage_options)  # a clear error before taking the lease
        with remote_output(out, storage_options) as staging:
            return _ingest_locked(out, edge_shards, node_shards, None, client, progress, staging=staging)
    out_path = local_output(out, storage_options)
    if text_files is not None:
        refuse_node_shards(nodes)
    edge_shards = _discover(new_edges, "new edge shards", storage_options) if text_files is None else []
    node_shards = _discover(nodes, "new node shards", storage_options) if nodes is not None else []
    read_manifest(out_path)  # a clear error before taking the lock of something that is no output
    with OutputLock(out_path), disk_errors(out_path):
        if text_files is None:
            return _ingest_locked(out_path, edge_shards, node_shards, None, client, progress)
        with text_ingest(out_path, text_files, nodes, read_manifest(out_path), storage_options) as text:
            return _ingest_locked(out_path, text.edge_shards, text.node_shards, text, client, progress)


def _ingest_locked(out_path: Path | str, edge_shards: list[Shard], node_shards: list[Shard],
                   text: TextIngest | None, client, progress, *, staging: RemoteStaging | None = None) -> dict[str, Any]:
    """:func:`ingest` once the output is locked (``text``: the shards came from a text edge list)."""
    start = time.perf_counter()
    with stage("fingerprints", log):
        edges_fp = _fingerprinted(edge_shards)
        nodes_fp = _fingerprinted(node_shards)
    remote = staging is not None
    options = staging.storage_options if remote else None
    manifest = read_manifest(out_path, storage_options=options)
    known = _known_shards(read_state_attrs(out_path, manifest, storage_options=options))
    if not remote:
        staging = Staging(out_path)
        run_key = _run_key(manifest, _split_new(edges_fp, known)[0], _split_new(nodes_fp, known)[0])
        committed = recover_journal(staging, run_key)
        if committed is not None:
            return committed
        manifest = read_manifest(out_path)
        known = _known_shards(read_state_attrs(out_path, manifest))
    new_e, skipped_e = _split_new(edges_fp, known)
    new_n, skipped_n = _split_new(nodes_fp, known)
    _report_skips(skipped_e + skipped_n, known)
    if not new_e and not new_n:
        log.warning("nothing new to ingest into %s: it stays at generation %d", out_path, manifest["generation"])
        return manifest
    run_key = _run_key(manifest, new_e, new_n)
    if manifest.get("algorithm") == "metis":
        raise StoreError(format_problem(
            f"output {out_path}", "an output of a streaming algorithm (asep, 2ps-l, 2ps-hdrf, hdrf, dbh, greedy, "
            "hash)", 'algorithm "metis" (an in-memory offline reference)',
            "repartition the grown input with `asepr partition ... --overwrite`.",
        ))
    report = validate_increment(
        [s for s, _ in new_e], [s for s, _ in new_n], num_nodes=int(manifest["num_nodes"]),
        feat_dim=int(manifest.get("feat_dim", 0)), undirected=bool(manifest.get("undirected", False)),
    )
    timings = {"validate": time.perf_counter() - start}
    generation = int(manifest["generation"]) + 1
    if remote:
        begin_remote_run(staging, run_key, True, "ingest")
    else:
        staging.open_run(run_key, generation, "ingest")
    plan = load_plan(staging, run_key, generation, command="ingest", edge_sha256=[sha for _, sha in new_e],
                     node_sha256=[sha for _, sha in new_n])
    if plan is None:
        staging.reset_work()
        plan = _plan_ingest(out_path, manifest, staging, run_key, generation, new_e, new_n, report,
                            skipped_e + skipped_n, client, progress, timings, text)
    else:
        log.warning("resuming: reusing the saved ingest plan of generation %d", generation)
        _given_urls(plan, new_e, new_n)
        timings.update(plan.timings)
    commit_id_map(text)
    return write_increment(staging, plan, old_manifest=manifest, client=client, progress=progress,
                           timings=timings, edge_shards=[s for s, _ in new_e], node_shards=[s for s, _ in new_n])


def _given_urls(plan: Plan, new_e: list, new_n: list) -> None:
    """Name the shards where this run was given them (they may have moved since the plan
    was saved; the plan found them by their sha256)."""
    plan.edge_shards = [s.url for s, _ in new_e]
    plan.node_shards = [s.url for s, _ in new_n]
    for kind, given in (("edges", new_e), ("nodes", new_n)):
        for entry, (shard, _) in zip(plan.record.get(kind, []), given):
            entry["url"] = shard.url


def _plan_ingest(out_path, manifest, staging, run_key, generation, new_e, new_n, report, skipped,
                 client, progress, timings, text: TextIngest | None) -> Plan:
    with bar_for(progress, "assign", 1) as bar:
        t0 = time.perf_counter()
        state = read_state(out_path, manifest, storage_options=staging.storage_options)
        cont = Continuation.from_state(state)
        del state
        timings["load state"] = time.perf_counter() - t0
        if cont.num_nodes != int(manifest["num_nodes"]):
            raise StoreError(format_problem(f"output {out_path}", f"{manifest['num_nodes']} nodes in the state",
                                            str(cont.num_nodes), "rerun `asepr partition ... --overwrite`."))
        edge_shards = [s for s, _ in new_e]
        node_shards = [s for s, _ in new_n]
        save_npy(staging.work / "source.npy", cont.master.astype(np.int32))
        info = _assign_increment(cont, edge_shards, node_shards, report.num_nodes, staging.work, client, timings)
        save_npy(staging.work / "master.npy", cont.master.astype(np.int32))
        bar.update(1)
    if cont.attr.min(initial=0) < 0:
        raise InputError(format_problem("new nodes", "an attribute cluster for every new node",
                                        f"{int((cont.attr < 0).sum())} without one", None))
    t0 = time.perf_counter()
    describe = {
        "edges": [{"url": s.url, "rows": i.rows, "sha256": sha} for (s, sha), i in zip(new_e, report.edge_shards)],
        "nodes": [{"url": s.url, "rows": i.rows, "sha256": sha} for (s, sha), i in zip(new_n, report.node_shards)],
    }
    shards = list(cont.attrs.get("shards", [])) + [
        {"generation": generation, "kind": kind, **entry} for kind in ("edges", "nodes") for entry in describe[kind]
    ]
    checksum = cont.write(staging.state_path, generation, shards=shards, locality=info["locality"])
    timings["write state"] = time.perf_counter() - t0
    metrics = dict(info["metrics"])
    # Carried over from the partitioning run: the lift, and which stream ASEP kept (the
    # continuation goes on with that stream's kernel, communities and mapping).
    for key in ("attribute_lift", "two_phase_fallback"):
        if key in manifest.get("metrics", {}):
            metrics[key] = manifest["metrics"][key]
    metrics["peak_rss_bytes"] = peak_rss_bytes()
    record = {
        "generation": generation, **describe,
        "new_edges": info["new_edges"], "new_nodes": info["new_nodes"],
        "featureless_nodes": info["featureless_nodes"], "new_communities": info["new_communities"],
        "off_community_edges": info["off_community_edges"],
        "skipped": [s.url for s, _ in skipped],
    }
    if text is not None:
        record["edge_list"] = text.source()
    metrics["ingest"] = {k: v for k, v in record.items() if k not in ("edges", "nodes", "skipped", "generation", "edge_list")}
    plan = Plan(
        kind="ingest", generation=generation, num_nodes=cont.num_nodes, num_old_nodes=int(manifest["num_nodes"]),
        num_edges=int(cont.num_edges), edge_shards=[s.url for s, _ in new_e], node_shards=[s.url for s, _ in new_n],
        metrics=metrics, record=record, timings=dict(timings), state_checksum=checksum, run_key=run_key,
        edge_sha256=[sha for _, sha in new_e], node_sha256=[sha for _, sha in new_n],
    )
    save_plan(staging, plan)
    return plan
