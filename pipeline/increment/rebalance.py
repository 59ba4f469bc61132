"""``asepr rebalance``: move whole communities off overloaded partitions (docs/design.md#rebalance).

As a graph grows by ingests, its communities grow unevenly. The kernel keeps every
edge load under the cap, but a partition whose *community volume* (the summed volume
of the communities mapped to it) passes the volume cap ``(1+eps)·2|E|/k`` draws more
edges than it may hold, and the kernel has to send them elsewhere, which costs
replication (:func:`asepr.pipeline.stages.metrics.drift_metrics` measures this; ``asepr inspect``
shows it and advises a rebalance). A rebalance:

1. reads, for each overloaded partition ``p`` (largest first), its stored edges and
   counts, per community ``c`` mapped to ``p``, the edges of ``p`` with both ends in
   ``c`` (what moving ``c`` moves);
2. moves communities, fewest moved edges per unit of volume first (ties: the larger
   volume, then the lower id), until ``p``'s community volume is within the cap; each
   goes to the partition ``q`` with the least community volume that stays within its
   volume cap (a community that fits nowhere stays). With shares
   (:mod:`asepr.pipeline.capacity`), each partition has its own caps (``(1+eps) share_p 2|E|``
   volume, at least one community's, :func:`~asepr.pipeline.capacity.volume_limits`;
   ``ceil((1+eps) share_p |E|)`` edges) and "least" compares volumes relative to the
   shares, so a rebalance restores the proportions the run was given. Its edges on ``p`` go with it when
   ``q``'s edge load stays within the edge cap; otherwise only the community's mapping
   moves (its stored edges stay, its future edges go to ``q``), which moves no edge
   and keeps every load within the cap. Since the kernel fills partitions up to
   the edge cap, the edge room is about ``eps·|E|`` in all, so large moves are mostly
   remappings;
3. updates the state: the community map, the loads, the replica bitsets (a node
   keeps its replica on ``p`` while an edge of it stays there, and gains one where its
   moved edges go) and the masters (a node whose master was ``p`` and that has no edge
   left there is mastered where its edges went);
4. rebuilds the partitions that lose or gain edges and commits generation g+1 with
   the node map and the state, like an ingest (:mod:`asepr.pipeline.increment.generation`).

Only the edges inside a moved community that lie on its old partition move: the
edges it has elsewhere, and its edges to other communities, stay where they are.
Outputs written with ``--halo 1`` and algorithms without communities cannot be
rebalanced (a clear error says so). Memory: the state (O(N)) plus one partition's
CSR at a time. The 1-hop locality metric keeps its last measured value.
"""

from __future__ import annotations

import hashlib
import logging
import time
from pathlib import Path
from typing import Any

import numpy as np

from asepr.pipeline.capacity import edge_caps, load_weights, volume_limits
from asepr.pipeline.increment.generation import Plan, load_plan, save_plan, write_increment
from asepr.pipeline.increment.rebuild import store_edges
from asepr.pipeline.stages.metrics import drift_metrics, partition_metrics, share_metrics
from asepr.pipeline.store.commit import Staging, disk_errors, local_output, recover_journal
from asepr.pipeline.store.continuation import Continuation
from asepr.pipeline.store.generations import RemoteStaging, begin_remote_run, remote_output
from asepr.pipeline.store.tasks import Progress
from asepr.storage.commit.atomic import dumps_json
from asepr.storage.commit.lock import OutputLock
from asepr.storage.errors import StoreError, format_problem
from asepr.storage.inputs.npy import save_npy
from asepr.storage.locations.location import is_local_url
from asepr.storage.partitions.manifest import read_manifest
from asepr.storage.partitions.output_stores import committed_store_urls
from asepr.storage.partitions.state import read_state, read_state_attrs
from asepr.storage.resources import peak_rss_bytes, stage

__all__ = ["plan_moves", "rebalance"]

log = logging.getLogger(__name__)


def _run_key(manifest: dict[str, Any], state_checksum: str) -> str:
    identity = {"kind": "rebalance", "base_generation": manifest["generation"], "base_state": state_checksum}
    return hashlib.sha256(dumps_json(identity)).hexdigest()


def _set_bit(replicas: np.ndarray, nodes: np.ndarray, p: int) -> None:
    replicas[nodes, p >> 6] |= np.uint64(1) << np.uint64(p & 63)


def _clear_bit(replicas: np.ndarray, nodes: np.ndarray, p: int) -> None:
    replicas[nodes, p >> 6] &= ~(np.uint64(1) << np.uint64(p & 63))


def plan_moves(cont: Continuation, store_urls: dict[int, str], storage_options: dict | None = None) -> dict[str, Any]:
    """Choose the communities to move and update ``cont`` (map, loads, replicas, masters).

    Returns a summary with ``move_from`` / ``move_to`` (``int32`` per community id,
    -1 where its edges stay), ``sources`` (partitions that lose edges) and per-pair
    counts of moved communities, volume, edges and remapped-only communities.
    """
    k = cont.num_parts
    eps, shares = cont.kernel.epsilon, cont.kernel.shares
    volume, part_of = cont.volume, cont.community_part
    live = (volume > 0) & (part_of >= 0)
    part_volume = np.bincount(part_of[live], weights=volume[live], minlength=k)[:k].astype(np.float64)
    volume_cap = volume_limits(float(part_volume.sum()), k, eps, shares)
    e_cap = edge_caps(int(cont.loads.sum()), k, eps, shares)
    weight = load_weights(k, shares)
    loads = cont.loads
    move_from = np.full(len(volume), -1, dtype=np.int32)
    move_to = np.full(len(volume), -1, dtype=np.int32)
    pairs: dict[tuple[int, int], list[int]] = {}
    sources = []
    over = [int(p) for p in np.argsort(-part_volume * weight, kind="stable") if part_volume[p] > volume_cap[p] + 1e-9]
    for p in over:
        global_nid, rows, indices, _ = store_edges(store_urls[p], 0, storage_options)
        comm = cont.community[global_nid]
        cs, cd = comm[rows], comm[indices]
        intra = cs == cd
        ids, moved_count = np.unique(cs[intra], return_counts=True)
        cands = np.flatnonzero(live & (part_of == p))
        edges_of = np.zeros(len(cands), dtype=np.int64)
        pos = np.searchsorted(ids, cands)
        hit = (pos < len(ids)) & (ids[np.minimum(pos, max(len(ids) - 1, 0))] == cands) if len(ids) else np.zeros(
            len(cands), bool)
        edges_of[hit] = moved_count[pos[hit]]
        vols = volume[cands].astype(np.float64)
        order = np.lexsort((cands, -vols, edges_of / np.maximum(vols, 1.0)))
        excess = part_volume[p] - volume_cap[p]
        chosen = False
        for i in order:
            if excess <= 1e-9:
                break
            c, vol, moved = int(cands[i]), float(vols[i]), int(edges_of[i])
            dests = [int(q) for q in np.argsort(part_volume * weight, kind="stable")
                     if q != p and part_volume[q] + vol <= volume_cap[q]]
            if not dests:
                continue
            q = dests[0]
            entry = pairs.setdefault((p, q), [0, 0, 0, 0])
            part_of[c] = q
            part_volume[p] -= vol
            part_volume[q] += vol
            excess -= vol
            entry[0] += 1
            entry[1] += int(vol)
            if moved and loads[q] + moved <= e_cap[q]:
                move_from[c], move_to[c] = p, q
                loads[p] -= moved
                loads[q] += moved
                entry[2] += moved
                chosen = True
            elif moved:
                entry[3] += 1
        if not chosen:
            if not any(a == p for a, _ in pairs):
                log.warning("rebalance: no community of partition %d fits elsewhere under the volume cap", p)
            continue
        sources.append(p)
        # Replicas and masters of the nodes of p, after its moves.
        moving = intra & (move_from[cs] == p)
        kept = np.zeros(len(global_nid), dtype=bool)
        kept[rows[~moving]] = True
        kept[indices[~moving]] = True
        touched = np.zeros(len(global_nid), dtype=bool)
        touched[rows] = True
        touched[indices] = True
        _clear_bit(cont.replicas, global_nid[touched & ~kept], p)
        dest_of = np.full(len(global_nid), -1, dtype=np.int64)
        dest = move_to[cs[moving]].astype(np.int64)
        dest_of[rows[moving]] = dest
        dest_of[indices[moving]] = dest
        for q in np.unique(dest):
            _set_bit(cont.replicas, global_nid[dest_of == q], int(q))
        leave = (~kept) & (dest_of >= 0) & (cont.master[global_nid] == p)
        cont.master[global_nid[leave]] = dest_of[leave].astype(np.int32)
        del global_nid, rows, indices, comm, cs, cd, intra, moving
    return {
        "move_from": move_from, "move_to": move_to, "sources": sources,
        "moves": [{"from": p, "to": q, "communities": v[0], "volume": v[1], "edges": v[2], "remapped_only": v[3]}
                  for (p, q), v in sorted(pairs.items())],
        "volume_cap": float(volume_cap.max(initial=0.0)),
    }


def rebalance(out: str | Path, *, client=None, progress: Progress | None = None,
              storage_options: dict | None = None) -> dict[str, Any]:
    """Move whole communities off the partitions past the volume cap; commit a new generation.

    Parameters
    ----------
    out
        The output of ``asepr partition`` / ``asepr ingest``: a local directory or an
        object-store URL.
    client
        A ``distributed.Client`` for the Dask stages; None runs them on local threads.

    Returns
    -------
    dict
        The committed manifest; the current one when no partition is past the cap (or
        nothing fits elsewhere).

    Raises
    ------
    StoreError
        No state, a halo output, an algorithm without communities, a lock held by
        another writer, or a disk error (generation g stays intact; rerun).
    """
    if not is_local_url(out, storage_options):
        read_manifest(out, storage_options=storage_options)  # a clear error before taking the lease
        with remote_output(out, storage_options) as staging:
            return _rebalance_locked(out, client, progress, staging=staging)
    out_path = local_output(out, storage_options)
    read_manifest(out_path)
    with OutputLock(out_path), disk_errors(out_path):
        return _rebalance_locked(out_path, client, progress)


def _rebalance_locked(out_path: Path | str, client, progress: Progress | None, *,
                      staging: RemoteStaging | None = None) -> dict[str, Any]:
    """:func:`rebalance` once the output is locked (or, remote, leased)."""
    start = time.perf_counter()
    remote = staging is not None
    options = staging.storage_options if remote else None
    manifest = read_manifest(out_path, storage_options=options)
    if not remote:
        staging = Staging(out_path)
        attrs = read_state_attrs(out_path, manifest)
        committed = recover_journal(staging, _run_key(manifest, attrs["checksum"]))
        if committed is not None:
            return committed
        manifest = read_manifest(out_path)
    if int(manifest.get("halo", 0)):
        raise StoreError(
            format_problem(f"output {out_path}", "an output without halo copies (--halo 0)", "halo 1",
                           "repartition with `asepr partition ... --overwrite` to rebalance a halo output.")
        )
    state = read_state(out_path, manifest, storage_options=options)
    run_key = _run_key(manifest, state.checksum)
    cont = Continuation.from_state(state)
    del state
    if not cont.has_communities:
        raise StoreError(
            format_problem(
                f"output {out_path}", "an output of a community algorithm (asep, 2ps-l, 2ps-hdrf)",
                f"algorithm {manifest.get('algorithm')!r}, which maps no communities to partitions",
                "nothing to rebalance; repartition with `asepr partition ... --overwrite` to change balance.",
            )
        )
    eps = cont.kernel.epsilon
    drift = drift_metrics(cont.loads, eps, cont.community_part, cont.volume, shares=cont.kernel.shares)
    if not drift["rebalance_advised"]:
        log.warning("nothing to rebalance in %s: no partition is past its cap (community balance %.3f, "
                    "cap %.3f); it stays at generation %d", out_path, drift.get("community_balance", 1.0),
                    1.0 + eps, manifest["generation"])
        return manifest
    generation = int(manifest["generation"]) + 1
    if remote:
        begin_remote_run(staging, run_key, True, "rebalance")
    else:
        staging.open_run(run_key, generation, "rebalance")
    timings = {"load state": time.perf_counter() - start}
    plan = load_plan(staging, run_key, generation, command="rebalance")
    if plan is None:
        staging.reset_work()
        plan = _plan_rebalance(out_path, manifest, staging, cont, run_key, generation, timings)
        if plan is None:
            staging.clear()
            if remote:
                staging.discard()
            return manifest
    else:
        log.warning("resuming: reusing the saved rebalance plan of generation %d", generation)
        timings.update(plan.timings)
    return write_increment(staging, plan, old_manifest=manifest, client=client, progress=progress,
                           timings=timings)


def _plan_rebalance(out_path, manifest, staging: Staging, cont: Continuation, run_key: str, generation: int,
                    timings: dict[str, float]) -> Plan | None:
    t0 = time.perf_counter()
    urls = committed_store_urls(out_path, manifest, storage_options=staging.storage_options)
    before = drift_metrics(cont.loads, cont.kernel.epsilon,
                           cont.community_part, cont.volume, shares=cont.kernel.shares)
    old_master = cont.master.copy()
    with stage("plan moves", log) as info:
        moves = plan_moves(cont, urls, staging.storage_options)
        info.update(sources=len(moves["sources"]), moved_edges=sum(m["edges"] for m in moves["moves"]))
    timings["plan moves"] = time.perf_counter() - t0
    if not moves["moves"]:
        log.warning("rebalance: no community fits on another partition under the volume cap; %s stays at "
                    "generation %d", out_path, manifest["generation"])
        return None
    work = staging.work
    save_npy(work / "source.npy", old_master.astype(np.int32))
    save_npy(work / "master.npy", cont.master.astype(np.int32))
    save_npy(work / "community.npy", cont.community.astype(np.int64))
    save_npy(work / "move_from.npy", moves["move_from"])
    save_npy(work / "move_to.npy", moves["move_to"])
    eps = cont.kernel.epsilon
    local_total = tuple(int(x) for x in cont.attrs.get("locality", (0, 0)))
    metrics = partition_metrics(cont.replicas, cont.loads, cont.master, cont.attr, cont.label, local_total)
    metrics["cap"] = cont.kernel.with_edges(int(cont.loads.sum()), cont.num_parts).cap
    metrics["drift"] = drift_metrics(cont.loads, eps, cont.community_part, cont.volume, shares=cont.kernel.shares)
    if cont.kernel.shares is not None:
        metrics["capacity"] = share_metrics(cont.loads, metrics["masters"], cont.kernel.shares)
    for key in ("attribute_lift", "ingest"):
        if key in manifest.get("metrics", {}):
            metrics[key] = manifest["metrics"][key]
    metrics["peak_rss_bytes"] = peak_rss_bytes()
    record = {
        "generation": generation,
        "moves": moves["moves"],
        "moved_edges": int(sum(m["edges"] for m in moves["moves"])),
        "moved_communities": int(sum(m["communities"] for m in moves["moves"])),
        "community_balance_before": before.get("community_balance"),
        "community_balance_after": metrics["drift"].get("community_balance"),
    }
    metrics["rebalance"] = {k: v for k, v in record.items() if k != "moves"}
    t0 = time.perf_counter()
    checksum = cont.write(staging.state_path, generation, shards=list(cont.attrs.get("shards", [])),
                          locality=local_total)
    timings["write state"] = time.perf_counter() - t0
    plan = Plan(
        kind="rebalance", generation=generation, num_nodes=cont.num_nodes, num_old_nodes=cont.num_nodes,
        num_edges=int(cont.num_edges), sources=sorted(moves["sources"]), metrics=metrics, record=record,
        timings=dict(timings), state_checksum=checksum, run_key=run_key,
    )
    save_plan(staging, plan)
    return plan
