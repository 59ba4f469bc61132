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
   :mod:`pipeline.verify.edges`), then an exact out-of-core sort and compare
   of the buckets that differ, which names each differing edge
   (``edge_check="exact"`` compares every bucket so). With ``halo`` 1, each master
   also holds every input edge into it (for an undirected input, every edge
   touching it).
6. **nodes**: ``x``, ``y`` and ``split`` equal the input's rows, through
   ``global_nid`` (bit for bit): against a table of the input's rows by id when it
   fits the memory budget, else partitions are loaded in groups that fit it, each
   group costing one pass over the node shards (:mod:`pipeline.verify.nodes`).
7. **input identity**: the input's shard hashes match the manifest's fingerprints;
   the shards of every ingested increment (``manifest["increments"]``, read from the
   URLs recorded there) count as input too.
8. **state** (when the manifest records one): ``state.zarr`` is of the manifest's
   generation and checksum, its arrays match their checksums, and it agrees with the
   stores: the loads are the partitions' edge counts, the replica bitsets are the
   nodes that touch an (assigned) edge of each partition, and the masters are the
   node map's.
9. **shares**: each partition's assigned edges within its own cap
   ``ceil((1 + eps) share_p |E|)`` (:mod:`pipeline.verify.shares`, in each store's scan).

How it runs: each array of each store is read once, through the checked reader, and
that one read serves the checksums, the CSR checks, the edge fingerprints and the
node comparison (:mod:`pipeline.verify.stores`). The partitions, the input's
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
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow.parquet as pq

from pipeline.machine import free_memory_bytes
from pipeline.verify.edges import (
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
from pipeline.verify.nodes import (
    NodeTable,
    RowMismatch,
    build_node_table,
    compare_nodes_streaming,
    compare_rows,
    mismatch_problems,
    node_table_bytes,
)
from pipeline.verify.state import ReplicaBits, load_state, state_masters_problems, state_partition_problems
from pipeline.verify.stores import PartitionScan, owned_edge_keys, scan_partition
from storage.commit.confine import confined_join
from storage.errors import AseprError, InputError, format_problem
from storage.inputs.directory import open_input
from storage.locations.fs import Shard, discover_shards, fingerprint, join, resolve, url_of
from storage.partitions.manifest import NODE_MAP_NAME, OLD_DIR, STAGING_NAME, read_manifest
from storage.progress import current
from storage.resources import stage

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
        to this process (:func:`pipeline.machine.free_memory_bytes`, cgroup limits included),
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


def _edge_runs(shards: list, runs: int) -> list[list]:
    """Contiguous runs of shards of about equal bytes, in stream order."""
    sizes = [max(1, int(s.size or 0)) for s in shards]
    total = sum(sizes)
    out: list[list] = [[]]
    done = 0
    for shard, size in zip(shards, sizes):
        if out[-1] and len(out) < runs and done >= total * len(out) / runs:
            out.append([])
        out[-1].append(shard)
        done += size
    return [run for run in out if run]


def _hash_shards(shards: list) -> list[str]:
    return [fingerprint(s) for s in shards]


@dataclass(frozen=True)
class _Failed:
    """A task's exception, raised again where a serial run would have met it."""

    error: Exception


def _value(result: Any) -> Any:
    if isinstance(result, _Failed):
        raise result.error
    return result


def _run_tasks(workers: int, tasks: list[tuple[str, Callable, tuple]],
               timings: dict[str, float]) -> list[Any]:
    """Run ``(kind, fn, args)`` tasks on ``workers`` threads, in order; results in order,
    a task's exception as :class:`_Failed` (the caller raises it where the check it
    belongs to comes). ``timings[kind]`` sums each kind's seconds; progress counts tasks."""
    lock, bar = threading.Lock(), current()
    bar.expect(len(tasks))

    def timed(kind: str, fn: Callable, args: tuple) -> Any:
        start = time.perf_counter()
        try:
            return fn(*args)
        except Exception as exc:  # noqa: BLE001 - handed back, raised in the serial order
            return _Failed(exc)
        finally:
            with lock:
                timings[kind] = timings.get(kind, 0.0) + time.perf_counter() - start
            bar.update(1)

    with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="asepr-verify") as pool:
        futures: list[Future] = [pool.submit(timed, kind, fn, args) for kind, fn, args in tasks]
        return [f.result() for f in futures]


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
            shards = _input_shards(input_url, options.storage_options, manifest)
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
    runs = _edge_runs(shards[0], options.workers) if shards is not None else []
    tasks += [("input edges", scan_input_edges, (run, options.batch_rows, num_nodes, z, halo, undirected))
              for run in runs]
    tasks.append(("state", load_state, (out, manifest, options.storage_options, num_nodes, k, state_found)))
    if shards is not None:
        tasks += [("input shard hashes", _hash_shards, (shards[0],)),
                  ("input shard hashes", _hash_shards, (shards[1],))]
    entries = sorted(manifest["partitions"], key=lambda e: int(e["part_id"]))
    tasks += [("partitions", _partition_task, (ctx, entry)) for entry in entries]
    results = _run_tasks(options.workers, tasks, report.timings)
    built = results.pop(0) if table is not None else None
    edge_results, results = results[: len(runs)], results[len(runs) :]
    state = _value(results.pop(0))
    hashes, parts = (results[:2], results[2:]) if shards is not None else ([], results)
    problems.extend(state_found)
    _report_stores(out, manifest, options, ctx.totals, state, parts, report, problems)
    if input_url is None:
        problems.add("input", "the manifest records no input; pass --input INPUT to compare against it")
        return
    if shard_error is not None:
        problems.add("input", shard_error)
        return
    _check_fingerprints(manifest, shards[0], shards[1], _value(hashes[0]), _value(hashes[1]), problems)
    report.checks.append("input fingerprints")
    if not _report_edges(shards[0], options, manifest, ctx.totals, edge_results, parts, report, problems):
        return
    _value(built)
    _report_nodes(shards[1], options, table, parts, report, problems)


def _report_stores(out, manifest, options, totals: _Totals, state, parts, report, problems) -> None:
    """Checks 1 to 4 and 8 from the partition results, in part_id order (a partition whose
    scan failed raises here, after the problems of the partitions before it)."""
    for part in parts:
        problems.extend(_value(part).problems)
    report.checks += ["manifest and store attributes", "checksums", "CSR well formed", "edges within each share"]
    count = totals.master_count
    zero, many = np.flatnonzero(count == 0), np.flatnonzero(count > 1)
    if all(part.store is not None for part in parts) and len(zero):
        problems.add("masters", f"{len(zero):,} node(s) have no master, e.g. global_nid {zero[:5].tolist()}")
    if len(many):
        problems.add("masters", f"{len(many):,} node(s) have several masters, e.g. global_nid {many[:5].tolist()}")
    start = time.perf_counter()
    _check_node_map(out, manifest, options.storage_options, totals.master_part, totals.master_local, problems)
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
        if _value(r).bad_url is not None:
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


# --- input identity and the node map -------------------------------------------------------


def _input_shards(input_url, storage_options, manifest=None):
    """The base input's shards plus, in order, every ingested increment's (by recorded URL)."""
    source = open_input(input_url, storage_options)
    edges, nodes = list(source.edge_shards), list(source.node_shards)
    for inc in (manifest or {}).get("increments", []):
        for kind, shards in (("edges", edges), ("nodes", nodes)):
            for entry in inc.get(kind, []):
                shards.extend(discover_shards(entry["url"], what=f"ingested {kind} shard (generation "
                                              f"{inc.get('generation')})", storage_options=storage_options))
    return edges, nodes


def _recorded_shards(manifest, kind):
    out = list(manifest.get("input", {}).get(kind, []))
    for inc in manifest.get("increments", []):
        out += inc.get(kind, [])
    return out


def _check_fingerprints(manifest, edge_shards, node_shards, edge_hashes, node_hashes, problems) -> None:
    for kind, shards, have in (("edges", edge_shards, edge_hashes), ("nodes", node_shards, node_hashes)):
        want = [s.get("sha256") for s in _recorded_shards(manifest, kind)]
        if want != have:
            problems.add("input", f"the {kind} shards differ from the ones partitioned ({len(want)} recorded, "
                                  f"{len(have)} found, {sum(a != b for a, b in zip(want, have))} with another "
                                  "sha256); the comparisons below are against the input as it is now")


def _check_node_map(out, manifest, storage_options, master_part, master_local, problems) -> None:
    fs, base = resolve(out, storage_options)
    want = manifest.get("node_map", {}).get("sha256")
    try:
        named = confined_join(fs, base, manifest.get("node_map", {}).get("path", NODE_MAP_NAME),
                              what=f"manifest {url_of(fs, join(base, 'manifest.json'))} (node_map path)")
    except AseprError as exc:
        problems.add("node_map", str(exc))
        return
    path = next((c for c in (named, join(base, STAGING_NAME, OLD_DIR, NODE_MAP_NAME))
                 if fs.exists(c) and want in (None, fingerprint(Shard(fs=fs, path=c, url=c, size=0)))), None)
    if path is None:
        problems.add("node_map", f"no {NODE_MAP_NAME} with the manifest's sha256 in {url_of(fs, base)}")
        return
    pf = pq.ParquetFile(fs.open(path, "rb"))
    start = 0
    for batch in pf.iter_batches(batch_size=1 << 20, columns=["global_nid", "part_id", "part_local_nid"]):
        gid = batch.column("global_nid").to_numpy()
        if not np.array_equal(gid, np.arange(start, start + len(gid))):
            problems.add("node_map", f"global_nid must run 0..N-1 in order; rows from {start} do not")
            return
        for column, expect in (("part_id", master_part), ("part_local_nid", master_local)):
            got = batch.column(column).to_numpy()
            bad = np.flatnonzero(got != expect[start : start + len(gid)])
            if len(bad):
                v = start + int(bad[0])
                problems.add("node_map", f"{column} of global_nid {v} is {int(got[bad[0]])}, "
                                         f"the stores say {int(expect[v])} ({len(bad):,} such rows)")
                return
        start += len(gid)
    if start != len(master_part):
        problems.add("node_map", f"{start:,} rows, expected one per node ({len(master_part):,})")
