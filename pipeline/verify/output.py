"""``asepr verify``: check every invariant of a committed partition output.

Checks (each problem names the partition, what was expected and what was found):

1. **manifest**: readable, one entry per ``part_id`` in ``0..k-1``; each store is of
   the manifest's generation and its attrs agree with the manifest (part_id,
   num_parts, checksum, counts, undirected, halo).
2. **checksums**: every array's content digest matches its ``array_checksums`` attr,
   and those combine into the store's ``checksum``.
3. **CSR well formed**: dtypes and shapes of the layout; ``global_nid`` strictly
   increasing in ``[0, N)``; ``indptr`` starts at 0, never decreases, ends at ``m``;
   ``indices`` in ``[0, n)`` and sorted within each row; every node without an edge
   in the partition is mastered there.
4. **exactly one master** per node over all partitions, and ``node_map.parquet``
   agrees (master ``part_id`` and ``part_local_nid``).
5. **edges**: the multiset union of every partition's (non-halo) edges, in
   ``global_nid`` space, equals the input's edge rows: per-bucket counts and
   polynomial fingerprints at points drawn at random for each run (a difference
   escapes with probability below ``2**-60``, argued in
   :mod:`asepr.pipeline.verify.edges`), then an exact out-of-core sort and compare
   of the buckets that differ, which names each differing edge
   (``edge_check="exact"`` compares every bucket so). With ``halo`` 1, each master
   also holds every input edge into it (for an undirected input, every edge
   touching it).
6. **nodes**: ``x``, ``y`` and ``split`` equal the input's rows, through
   ``global_nid`` (bit for bit): against a table of the input's rows by id when it
   fits the memory budget, else partitions are loaded in groups that fit it, each
   group costing one pass over the node shards (:mod:`asepr.pipeline.verify.nodes`).
7. **input identity**: the input's shard hashes match the manifest's fingerprints;
   the shards of every ingested increment (``manifest["increments"]``, read from the
   URLs recorded there) count as input too.
8. **state** (when the manifest records one): ``state.zarr`` is of the manifest's
   generation and checksum, its arrays match their checksums, and it agrees with the
   stores: the loads are the partitions' edge counts, the replica bitsets are the
   nodes that touch an (assigned) edge of each partition, and the masters are the
   node map's.
9. **shares**: each partition's assigned edges within its own cap
   ``ceil((1 + eps) share_p |E|)`` (:mod:`asepr.pipeline.verify.shares`, in each store's scan).

How it runs: each array of each store is read once, through the checked reader, and
that one read serves the checksums, the CSR checks, the edge fingerprints and the
node comparison (:mod:`asepr.pipeline.verify.stores`). The partitions, the input's
edge shards (in ``workers`` contiguous runs), the input node table, the shard
hashes and the state are independent tasks on ``workers`` threads (numpy, hashlib,
pyarrow, zarr's codecs and the numba kernels release the GIL); each task keeps its
problems apart and they are reported in the order above, so the report does not
depend on ``workers``. Each kind of task logs its time.

Memory: O(N) counters and bitsets, the input node table (O(N * d), within
``memory_budget``), a few partitions (one per worker) and edge batches at a time;
nothing grows with the number of edges. Disk: only for the buckets that differ.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from asepr.pipeline.planning.machine import free_memory_bytes
from asepr.pipeline.verify.edges import (
    EDGE_CHECKS,
    EdgeFingerprint,
    InputEdges,
    draw_points,
    exact_edge_problems,
    fingerprint_applies,
    fold_partition,
    miss_bound,
    scan_input_edges,
)
from asepr.pipeline.verify.nodes import (
    NodeTable,
    RowMismatch,
    build_node_table,
    compare_nodes_streaming,
    compare_rows,
    mismatch_problems,
    node_table_bytes,
)
from asepr.pipeline.verify.identity import check_fingerprints, check_node_map, input_shards
from asepr.pipeline.verify.state import ReplicaBits, load_state, state_masters_problems, state_partition_problems
from asepr.pipeline.verify.stores import PartitionScan, owned_edge_keys, scan_partition
from asepr.pipeline.verify.tasks import edge_runs, hash_shards, run_tasks, value_of
from asepr.storage.errors import AseprError, InputError, format_problem
from asepr.storage.partitions.manifest import read_manifest
from asepr.storage.resources import stage

__all__ = ["Problem", "VerifyReport", "verify_output"]

log = logging.getLogger(__name__)


@dataclass
class Problem:
    """One violated invariant: where (``partition 3``, ``manifest``, ``input``) and what."""

    where: str
    message: str

    def __str__(self) -> str:
        return f"{self.where}: {self.message}"


@dataclass
class VerifyReport:
    """The outcome of :func:`verify_output`; ``ok`` when ``problems`` is empty.

    ``timings`` holds the seconds spent per kind of task (summed over the tasks, which
    ran concurrently) and per step after them.
    """

    out: str
    generation: int | None = None
    num_parts: int | None = None
    checks: list[str] = field(default_factory=list)
    problems: list[Problem] = field(default_factory=list)
    timings: dict[str, float] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return not self.problems

    def summary(self) -> str:
        head = f"output {self.out}: generation {self.generation}, {self.num_parts} partitions"
        if self.ok:
            return head + "\n" + "\n".join(f"ok  {c}" for c in self.checks) + "\nverified: all invariants hold"
        lines = [head, *(f"FAIL {p}" for p in self.problems)]
        lines.append(f"{len(self.problems)} problem(s) found")
        return "\n".join(lines)


class _Collector:
    def __init__(self, report: VerifyReport, limit: int):
        self.report, self.limit, self.dropped = report, limit, 0

    def add(self, where: str, message: str) -> None:
        if len(self.report.problems) < self.limit:
            self.report.problems.append(Problem(where, message))
        else:
            self.dropped += 1

    def extend(self, found: list[tuple[str, str]]) -> None:
        for where, message in found:
            self.add(where, message)


def default_verify_workers() -> int:
    """Threads when nothing else is said: the cores, at most 4 (each holds one partition)."""
    return max(1, min(4, os.cpu_count() or 1))


def verify_output(
    out: str | Path,
    *,
    input_url: str | Path | None = None,
    storage_options: dict | None = None,
    batch_rows: int = 1 << 20,
    memory_budget: int | None = None,
    spill_dir: str | None = None,
    max_problems: int = 50,
    workers: int | None = None,
    edge_check: str = "fingerprint",
) -> VerifyReport:
    """Check a committed output against its manifest and its input.

    Parameters
    ----------
    out
        The output directory of ``asepr partition``.
    input_url
        The input directory; default: the one recorded in the manifest.
    memory_budget
        Bytes of node rows held at once for the node comparison: the input's node table
        when it fits, else groups of partitions. Default: a quarter of the memory available
        to this process (:func:`asepr.pipeline.planning.machine.free_memory_bytes`, cgroup limits included),
        at least 1 GiB; a fixed 1 GiB sent mid-sized inputs into the slower multi-pass
        comparison (``docs/results/verify/budget/README.md``).
    spill_dir
        Where the edge buckets of the exact comparison go (a temporary directory by default).
    max_problems
        Stop recording problems after this many (the count is still reported).
    workers
        Threads that run the checks (default :func:`default_verify_workers`); the report
        is the same for any number.
    edge_check
        ``"fingerprint"`` (default): per-bucket fingerprints, then an exact comparison of
        the buckets that differ; ``"exact"``: the exact comparison of every bucket.

    Returns
    -------
    VerifyReport
        ``report.ok`` is False when any invariant is violated; the problems say where.
    """
    if edge_check not in EDGE_CHECKS:
        raise InputError(format_problem("verify_output, edge_check", " or ".join(map(repr, EDGE_CHECKS)),
                                        repr(edge_check), 'use edge_check="fingerprint" (the default).'))
    report = VerifyReport(out=str(out))
    problems = _Collector(report, max_problems)
    if memory_budget is None:
        memory_budget = max(1 << 30, free_memory_bytes() // 4)
    options = _Options(input_url, storage_options, batch_rows, memory_budget, spill_dir,
                       workers or default_verify_workers(), edge_check)
    with stage("verify", log) as info:
        try:
            _verify_impl(out, options, report, problems)
        except (AseprError, OSError) as exc:
            problems.add("output", str(exc))
        if problems.dropped:
            report.problems.append(Problem("verify", f"{problems.dropped} more problem(s) not shown"))
        info.update(problems=len(report.problems))
    for name, seconds in report.timings.items():
        log.info("verify %s: %.2f s", name, seconds)
    return report


@dataclass(frozen=True)
class _Options:
    input_url: str | Path | None
    storage_options: dict | None
    batch_rows: int
    memory_budget: int
    spill_dir: str | None
    workers: int
    edge_check: str


# --- the tasks ---------------------------------------------------------------------------


class _Totals:
    """What the partition tasks add up, under one lock; the sums, products and the
    highest-``part_id`` rule make the result independent of the order they finish in."""

    def __init__(self, num_nodes: int, num_parts: int, halo: int, with_state: bool, z: np.ndarray | None):
        self.lock = threading.Lock()
        self.master_count = np.zeros(num_nodes, dtype=np.int32)
        self.master_part = np.full(num_nodes, -1, dtype=np.int64)
        self.master_local = np.full(num_nodes, -1, dtype=np.int64)
        self.halo_in = np.zeros(num_nodes, dtype=np.int64) if halo else None
        self.bits = ReplicaBits(num_nodes, num_parts) if with_state else None
        self.fingerprint = EdgeFingerprint(z) if z is not None else None
        self.owned_edges: dict[int, int] = {}

    def add(self, part_id: int, csr, fp: EdgeFingerprint | None) -> None:
        mastered = csr.gids[csr.is_master]
        local = np.flatnonzero(csr.is_master)
        with self.lock:
            self.master_count[mastered] += 1
            # A node mastered twice keeps the highest part_id, as a scan in part_id order would.
            take = self.master_part[mastered] < part_id
            self.master_part[mastered[take]] = part_id
            self.master_local[mastered[take]] = local[take]
            if self.halo_in is not None:
                self.halo_in[mastered] += csr.into[csr.is_master]
            if self.bits is not None:
                self.bits.add(part_id, csr.gids, csr.touched_owned)
            if fp is not None:
                self.fingerprint.merge(fp)
            self.owned_edges[part_id] = csr.owned_edges


class _TableSlot:
    """The input node table, built by one task and awaited by the partition tasks."""

    def __init__(self) -> None:
        self.ready = threading.Event()
        self.table: NodeTable | None = None
        self.why = "not built"

    def build(self, node_shards, num_nodes: int, dim: int) -> None:
        try:
            self.table, self.why = build_node_table(node_shards, num_nodes, dim)
        finally:
            self.ready.set()

    def wait(self) -> NodeTable | None:
        self.ready.wait()
        return self.table


@dataclass
class _Context:
    out: str | Path
    manifest: dict[str, Any]
    storage_options: dict | None
    num_nodes: int
    z: np.ndarray | None
    totals: _Totals
    table: _TableSlot | None


@dataclass
class _PartitionResult:
    part_id: int
    problems: list[tuple[str, str]]
    store: Any = None
    damaged: bool = False
    csr_ok: bool = False
    node_problems: list[tuple[str, str]] = field(default_factory=list)
    mismatches: list[RowMismatch] = field(default_factory=list)


def _partition_task(ctx: _Context, entry: dict[str, Any]) -> _PartitionResult:
    """Checks 1 to 3 of one partition, its share of 4, 5 and 8, and check 6 against the table."""
    scan: PartitionScan = scan_partition(ctx.out, ctx.manifest, entry, ctx.storage_options)
    p = scan.part_id
    result = _PartitionResult(p, scan.problems, scan.store, scan.damaged, scan.csr is not None)
    if scan.csr is not None:
        fp = None
        if ctx.z is not None:
            fp = EdgeFingerprint(ctx.z)
            fold_partition(fp, scan.csr.gids, scan.csr.indptr, scan.csr.indices, scan.csr.owned, ctx.num_nodes)
        ctx.totals.add(p, scan.csr, fp)
    if scan.store is None or ctx.table is None or ctx.table.wait() is None:
        return result
    if scan.node_error is not None:
        result.node_problems.append((f"partition {p}", f"node rows unreadable past the damage ({scan.node_error})"))
        return result
    arrays = scan.arrays
    result.mismatches, absent = compare_rows(ctx.table.table, p, arrays["nodes/global_nid"], arrays["nodes/x"],
                                             arrays["nodes/y"], arrays["nodes/split"])
    if absent is not None:
        result.node_problems.append(absent)
    return result


# --- the run -------------------------------------------------------------------------------


def _verify_impl(out, options: _Options, report: VerifyReport, problems: _Collector) -> None:
    manifest = read_manifest(out, storage_options=options.storage_options)
    k = int(manifest["num_parts"])
    report.generation, report.num_parts = int(manifest["generation"]), k
    num_nodes = int(manifest["num_nodes"])
    ids = sorted(int(e["part_id"]) for e in manifest["partitions"])
    if ids != list(range(k)):
        problems.add("manifest", f"expected one partition entry per part_id 0..{k - 1}, found part_ids {ids[:20]}")
        return
    input_url = options.input_url if options.input_url is not None else manifest.get("input", {}).get("url")
    shards, shard_error = None, None
    if input_url is not None:
        try:
            shards = input_shards(input_url, options.storage_options, manifest)
        except AseprError as exc:
            shard_error = f"{exc} (pass --input INPUT if the input moved)"
    fingerprinted = options.edge_check == "fingerprint" and fingerprint_applies(num_nodes)
    z = draw_points(num_nodes) if fingerprinted else None
    halo, undirected = int(manifest.get("halo", 0)), bool(manifest.get("undirected", False))
    dim = manifest.get("feat_dim")
    table = None
    if shards is not None and dim is not None and node_table_bytes(num_nodes, int(dim)) <= options.memory_budget:
        table = _TableSlot()
    ctx = _Context(out, manifest, options.storage_options, num_nodes, z,
                   _Totals(num_nodes, k, halo, bool(manifest.get("state")), z), table)
    state_found: list[tuple[str, str]] = []
    tasks: list[tuple[str, Callable, tuple]] = []
    if table is not None:
        tasks.append(("input node table", table.build, (shards[1], num_nodes, int(dim))))
    runs = edge_runs(shards[0], options.workers) if shards is not None else []
    tasks += [("input edges", scan_input_edges, (run, options.batch_rows, num_nodes, z, halo, undirected))
              for run in runs]
    tasks.append(("state", load_state, (out, manifest, options.storage_options, num_nodes, k, state_found)))
    if shards is not None:
        tasks += [("input shard hashes", hash_shards, (shards[0],)),
                  ("input shard hashes", hash_shards, (shards[1],))]
    entries = sorted(manifest["partitions"], key=lambda e: int(e["part_id"]))
    tasks += [("partitions", _partition_task, (ctx, entry)) for entry in entries]
    results = run_tasks(options.workers, tasks, report.timings)
    built = results.pop(0) if table is not None else None
    edge_results, results = results[: len(runs)], results[len(runs) :]
    state = value_of(results.pop(0))
    hashes, parts = (results[:2], results[2:]) if shards is not None else ([], results)
    problems.extend(state_found)
    _report_stores(out, manifest, options, ctx.totals, state, parts, report, problems)
    if input_url is None:
        problems.add("input", "the manifest records no input; pass --input INPUT to compare against it")
        return
    if shard_error is not None:
        problems.add("input", shard_error)
        return
    check_fingerprints(manifest, shards[0], shards[1], value_of(hashes[0]), value_of(hashes[1]), problems)
    report.checks.append("input fingerprints")
    if not _report_edges(shards[0], options, manifest, ctx.totals, edge_results, parts, report, problems):
        return
    value_of(built)
    _report_nodes(shards[1], options, table, parts, report, problems)


def _report_stores(out, manifest, options, totals: _Totals, state, parts, report, problems) -> None:
    """Checks 1 to 4 and 8 from the partition results, in part_id order (a partition whose
    scan failed raises here, after the problems of the partitions before it)."""
    for part in parts:
        problems.extend(value_of(part).problems)
    report.checks += ["manifest and store attributes", "checksums", "CSR well formed", "edges within each share"]
    count = totals.master_count
    zero, many = np.flatnonzero(count == 0), np.flatnonzero(count > 1)
    if all(part.store is not None for part in parts) and len(zero):
        problems.add("masters", f"{len(zero):,} node(s) have no master, e.g. global_nid {zero[:5].tolist()}")
    if len(many):
        problems.add("masters", f"{len(many):,} node(s) have several masters, e.g. global_nid {many[:5].tolist()}")
    start = time.perf_counter()
    check_node_map(out, manifest, options.storage_options, totals.master_part, totals.master_local, problems)
    report.timings["node_map"] = time.perf_counter() - start
    report.checks += ["exactly one master per node", "node_map"]
    if state is not None:
        problems.extend(state_partition_problems(state, totals.bits, totals.owned_edges))
        problems.extend(state_masters_problems(state, totals.master_part, totals.master_count))
        report.checks.append("state agrees with the stores (loads, replicas, masters)")


def _report_edges(edge_shards, options, manifest, totals: _Totals, edge_results: list[InputEdges],
                  parts, report, problems) -> bool:
    """Check 5 (and the halo's in-edges); False when the input's ids are out of range."""
    num_nodes, num_edges = int(manifest["num_nodes"]), int(manifest["num_edges"])
    for r in edge_results:  # in stream order, as one pass would meet them
        if value_of(r).bad_url is not None:
            problems.add("input", f"edge ids outside [0, {num_nodes}) in {r.bad_url}")
            return False
    rows = sum(r.rows for r in edge_results)
    if rows != num_edges:
        problems.add("input", f"the manifest says {num_edges:,} edges, the input has {rows:,}")
    select = None
    if totals.fingerprint is not None:
        fp_in = EdgeFingerprint(totals.fingerprint.z)
        for r in edge_results:
            fp_in.merge(r.fingerprint)
        select = fp_in.differing_buckets(totals.fingerprint)
        log.info("verify edges: %d of %d fingerprint buckets differ; equal ones hide a difference with "
                 "probability <= %.1e", int(select.sum()), len(select),
                 miss_bound(fp_in, totals.fingerprint, num_nodes))
    if select is None or select.any():
        start = time.perf_counter()
        halo = int(manifest.get("halo", 0))
        scanned = ((part.part_id, *owned_edge_keys(part.store, num_nodes, halo)) for part in parts if part.csr_ok)
        problems.extend(exact_edge_problems(edge_shards, options.batch_rows, scanned, num_nodes, num_edges,
                                            select, options.spill_dir))
        report.timings["edges, exact comparison"] = time.perf_counter() - start
    report.checks.append("edge multiset equals the input")
    if totals.halo_in is not None:
        in_degree = sum(r.in_degree for r in edge_results) if edge_results else np.zeros_like(totals.halo_in)
        bad_nodes = np.flatnonzero((totals.master_count == 1) & (totals.halo_in != in_degree))
        if len(bad_nodes):
            v = int(bad_nodes[0])
            problems.add(
                f"partition {int(totals.master_part[v])}",
                f"halo incomplete: master global_nid {v} holds {int(totals.halo_in[v])} of its "
                f"{int(in_degree[v])} in-edges ({len(bad_nodes):,} master(s) affected)",
            )
        report.checks.append("halo holds every in-edge of each master")
    return True


def _report_nodes(node_shards, options, table: _TableSlot | None, parts, report, problems) -> None:
    """Check 6: from the partition tasks' comparison with the table, or streaming."""
    start = time.perf_counter()
    if table is not None and table.table is not None:
        messages = iter(mismatch_problems([m for part in parts for m in part.mismatches], node_shards))
        for part in parts:
            problems.extend([next(messages) for _ in part.mismatches])
            problems.extend(part.node_problems)
    else:
        if table is not None:
            log.info("verify: node rows compared streaming (%s)", table.why)
        stores = {part.part_id: part.store for part in parts if part.store is not None}
        damaged = {part.part_id for part in parts if part.damaged}
        problems.extend(compare_nodes_streaming(stores, node_shards, options.memory_budget, damaged))
        report.timings["node rows, streaming"] = time.perf_counter() - start
    report.checks.append("features, labels and splits match the input")
