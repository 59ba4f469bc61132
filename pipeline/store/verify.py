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
   ``global_nid`` space, equals the input's edge rows; exact, out of core: both sides
   are hashed into the same buckets on disk, and each bucket is sorted and compared.
   With ``halo`` 1, each master also holds every input edge into it (for an
   undirected input, every edge touching it).
6. **nodes**: ``x``, ``y`` and ``split`` equal the input's rows, through
   ``global_nid`` (bit for bit); partitions are loaded in groups that fit a memory
   budget, each group costing one pass over the node shards.
7. **input identity**: the input's shard hashes match the manifest's fingerprints;
   the shards of every ingested increment (``manifest["increments"]``, read from the
   URLs recorded there) count as input too.
8. **state** (when the manifest records one): ``state.zarr`` is of the manifest's
   generation and checksum, its arrays match their checksums, and it agrees with the
   stores: the loads are the partitions' edge counts, the replica bitsets are the
   nodes that touch an (assigned) edge of each partition, and the masters are the
   node map's.

Memory: O(N) counters, one partition (or one group of partitions) at a time, and one
edge bucket at a time.
"""

from __future__ import annotations

import hashlib
import logging
import math
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq

from pipeline.stream import iter_edge_batches
from storage.errors import AseprError, StoreError
from storage.fs import discover_shards, fingerprint, join, resolve, url_of
from storage.manifest import NODE_MAP_NAME, OLD_DIR, STAGING_NAME, read_manifest
from storage.partition_store import (
    EDGE_ARRAYS,
    NODE_ARRAYS,
    PartitionStore,
    checksum_problems,
    open_store,
    resolve_store_url,
)
from storage.resources import stage
from storage.schema import check_node_schema, feature_matrix
from storage.state import resolve_state_url, state_problems
from storage.input import open_input, open_parquet

__all__ = ["Problem", "VerifyReport", "verify_output"]

log = logging.getLogger(__name__)

_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_BUCKET_EDGES = 4 << 20
_PART_RECORD = np.dtype([("key", "<i8"), ("part", "<i4")])


@dataclass
class Problem:
    """One violated invariant: where (``partition 3``, ``manifest``, ``input``) and what."""

    where: str
    message: str

    def __str__(self) -> str:
        return f"{self.where}: {self.message}"


@dataclass
class VerifyReport:
    """The outcome of :func:`verify_output`; ``ok`` when ``problems`` is empty."""

    out: str
    generation: int | None = None
    num_parts: int | None = None
    checks: list[str] = field(default_factory=list)
    problems: list[Problem] = field(default_factory=list)

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


def verify_output(
    out: str | Path,
    *,
    input_url: str | Path | None = None,
    storage_options: dict | None = None,
    batch_rows: int = 1 << 20,
    memory_budget: int = 1 << 30,
    spill_dir: str | None = None,
    max_problems: int = 50,
) -> VerifyReport:
    """Check a committed output against its manifest and its input.

    Parameters
    ----------
    out
        The output directory of ``asepr partition``.
    input_url
        The input directory; default: the one recorded in the manifest.
    memory_budget
        Bytes of partition node data held at once during the node comparison.
    spill_dir
        Where the edge buckets go (a temporary directory by default).
    max_problems
        Stop recording problems after this many (the count is still reported).

    Returns
    -------
    VerifyReport
        ``report.ok`` is False when any invariant is violated; the problems say where.
    """
    report = VerifyReport(out=str(out))
    problems = _Collector(report, max_problems)
    with stage("verify", log) as info:
        try:
            _verify_impl(out, input_url, storage_options, batch_rows, memory_budget, spill_dir, report, problems)
        except (AseprError, OSError) as exc:
            problems.add("output", str(exc))
        if problems.dropped:
            report.problems.append(Problem("verify", f"{problems.dropped} more problem(s) not shown"))
        info.update(problems=len(report.problems))
    return report


def _verify_impl(out, input_url, storage_options, batch_rows, memory_budget, spill_dir, report, problems):
    manifest = read_manifest(out, storage_options=storage_options)
    k = int(manifest["num_parts"])
    report.generation, report.num_parts = int(manifest["generation"]), k
    num_nodes, num_edges = int(manifest["num_nodes"]), int(manifest["num_edges"])
    halo = int(manifest.get("halo", 0))
    ids = sorted(int(e["part_id"]) for e in manifest["partitions"])
    if ids != list(range(k)):
        problems.add("manifest", f"expected one partition entry per part_id 0..{k - 1}, found part_ids {ids[:20]}")
        return

    spill = Path(tempfile.mkdtemp(prefix="asepr-verify-", dir=spill_dir))
    try:
        buckets = max(1, math.ceil(num_edges / _BUCKET_EDGES))
        state = _load_state(out, manifest, storage_options, num_nodes, k, problems)
        scan = _Scan(_BucketSink(spill / "parts", buckets, _PART_RECORD), num_nodes, halo)
        for entry in sorted(manifest["partitions"], key=lambda e: int(e["part_id"])):
            _verify_partition(out, manifest, entry, storage_options, scan, state, problems)
        scan.edge_sink.close()
        report.checks += ["manifest and store attributes", "checksums", "CSR well formed"]

        zero, many = np.flatnonzero(scan.master_count == 0), np.flatnonzero(scan.master_count > 1)
        if len(scan.stores) == k and len(zero):
            problems.add("masters", f"{len(zero):,} node(s) have no master, e.g. global_nid {zero[:5].tolist()}")
        if len(many):
            problems.add("masters", f"{len(many):,} node(s) have several masters, e.g. global_nid {many[:5].tolist()}")
        _check_node_map(out, manifest, storage_options, scan.master_part, scan.master_local, problems)
        report.checks += ["exactly one master per node", "node_map"]
        if state is not None:
            _check_state_masters(state, scan.master_part, scan.master_count, problems)
            report.checks.append("state agrees with the stores (loads, replicas, masters)")

        input_url = input_url if input_url is not None else manifest.get("input", {}).get("url")
        if input_url is None:
            problems.add("input", "the manifest records no input; pass --input INPUT to compare against it")
            return
        try:
            edge_shards, node_shards = _input_shards(input_url, storage_options, manifest)
        except AseprError as exc:
            problems.add("input", f"{exc} (pass --input INPUT if the input moved)")
            return
        _check_fingerprints(manifest, edge_shards, node_shards, problems)
        report.checks.append("input fingerprints")
        in_sink = _BucketSink(spill / "input", buckets, np.dtype("<i8"))
        ids_ok, in_degree = _hash_input_edges(edge_shards, batch_rows, manifest, in_sink, problems)
        if not ids_ok:
            return
        _compare_edges(in_sink, scan.edge_sink, num_nodes, problems)
        report.checks.append("edge multiset equals the input")
        if halo:
            bad = np.flatnonzero((scan.master_count == 1) & (scan.halo_in != in_degree))
            if len(bad):
                v = int(bad[0])
                problems.add(
                    f"partition {int(scan.master_part[v])}",
                    f"halo incomplete: master global_nid {v} holds {int(scan.halo_in[v])} of its "
                    f"{int(in_degree[v])} in-edges ({len(bad):,} master(s) affected)",
                )
            report.checks.append("halo holds every in-edge of each master")
        _compare_nodes(scan.stores, node_shards, memory_budget, problems, scan.damaged)
        report.checks.append("features, labels and splits match the input")
    finally:
        shutil.rmtree(spill, ignore_errors=True)


class _Scan:
    """What the partition scans accumulate: the edge records, the masters and halo counts."""

    def __init__(self, edge_sink: _BucketSink, num_nodes: int, halo: int):
        self.edge_sink, self.num_nodes, self.halo = edge_sink, num_nodes, halo
        self.master_count = np.zeros(num_nodes, dtype=np.int32)
        self.master_part = np.full(num_nodes, -1, dtype=np.int64)
        self.master_local = np.full(num_nodes, -1, dtype=np.int64)
        self.halo_in = np.zeros(num_nodes, dtype=np.int64) if halo else None
        #: The stores scanned; a damaged one (in ``damaged``) opened unchecked.
        self.stores: dict[int, PartitionStore] = {}
        self.damaged: set[int] = set()


def _verify_partition(out, manifest, entry, storage_options, scan: _Scan, state, problems) -> None:
    """Open, check and scan one partition. A store whose chunks are missing, undecodable or
    altered is reported chunk by chunk, then scanned unchecked (as far as it decodes) so
    the problems it causes elsewhere (masters, edges, node rows) are reported too."""
    p = int(entry["part_id"])
    where = f"partition {p}"
    try:
        url = resolve_store_url(out, manifest, entry, storage_options)
        store = open_store(url, storage_options=storage_options)
    except StoreError as exc:
        problems.add(where, str(exc))
        return
    layout_ok, damaged = _check_store(store, entry, manifest, problems)
    if not layout_ok:
        return
    if damaged:
        store = open_store(url, storage_options=storage_options, verify=False)
    undirected = bool(manifest.get("undirected", False))
    try:
        _scan_partition(store, scan.num_nodes, undirected, scan.halo, scan.edge_sink, scan.master_count,
                        scan.master_part, scan.master_local, scan.halo_in, problems, state)
    except Exception as exc:  # noqa: BLE001 - a damaged store may fail to decode in any way
        if not damaged:
            raise
        problems.add(where, f"could not be scanned past its damage ({type(exc).__name__}: {exc})")
        return
    scan.stores[p] = store
    if damaged:
        scan.damaged.add(p)


def _hash_input_edges(edge_shards, batch_rows, manifest, in_sink, problems):
    """Bucket the input's edge keys: ``(ids_ok, in_degree)``, the in-degrees with halo 1."""
    num_nodes, num_edges = int(manifest["num_nodes"]), int(manifest["num_edges"])
    halo, undirected = int(manifest.get("halo", 0)), bool(manifest.get("undirected", False))
    in_degree = np.zeros(num_nodes, dtype=np.int64) if halo else None
    rows = 0
    for batch in iter_edge_batches(edge_shards, batch_rows):
        src, dst = batch.src, batch.dst
        rows += len(src)
        if src.size and (src.min() < 0 or dst.min() < 0 or src.max() >= num_nodes or dst.max() >= num_nodes):
            problems.add("input", f"edge ids outside [0, {num_nodes}) in {edge_shards[batch.shard_index].url}")
            return False, in_degree
        in_sink.add(src * num_nodes + dst)
        if halo:
            in_degree += np.bincount(dst, minlength=num_nodes)
            if undirected:
                loop = src == dst
                in_degree += np.bincount(src[~loop], minlength=num_nodes)
    in_sink.close()
    if rows != num_edges:
        problems.add("input", f"the manifest says {num_edges:,} edges, the input has {rows:,}")
    return True, in_degree


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


def _check_fingerprints(manifest, edge_shards, node_shards, problems) -> None:
    for kind, shards in (("edges", edge_shards), ("nodes", node_shards)):
        want = [s.get("sha256") for s in _recorded_shards(manifest, kind)]
        have = [fingerprint(s) for s in shards]
        if want != have:
            problems.add(
                "input",
                f"the {kind} shards differ from the ones partitioned ({len(want)} recorded, {len(have)} found, "
                f"{sum(a != b for a, b in zip(want, have))} with another sha256); the comparisons below "
                "are against the input as it is now",
            )


# --- per-partition structure ----------------------------------------------------------


def _check_store(store: PartitionStore, entry, manifest, problems) -> tuple[bool, bool]:
    """Attributes, checksums, dtypes and shapes: ``(layout_ok, damaged)``. The CSR can
    be scanned when the layout is right; ``damaged`` when a chunk is missing,
    undecodable or altered (the store's checked reads refuse it)."""
    where = f"partition {store.part_id}"
    attrs = store.attrs
    expect = {
        "part_id": int(entry["part_id"]),
        "num_parts": int(manifest["num_parts"]),
        "generation": int(entry.get("generation", manifest["generation"])),
        "checksum": entry.get("checksum"),
        "undirected": bool(manifest.get("undirected", False)),
        "halo": int(manifest.get("halo", 0)),
    }
    for key, value in expect.items():
        if attrs.get(key) != value:
            problems.add(where, f"attrs {key} is {attrs.get(key)!r}, the manifest says {value!r}")
    damaged = checksum_problems(store)
    for name in damaged:
        problems.add(where, f"checksum mismatch: {name}")
    n = store.num_nodes
    m = store.num_edges
    d = int(manifest.get("feat_dim", store.x.shape[1] if len(store.x.shape) == 2 else 0))
    shapes = {
        "nodes/global_nid": ((n,), ("int64",)), "nodes/x": ((n, d), ("float32",)),
        "nodes/y": ((n,), ("int64",)), "nodes/split": ((n,), ("int8",)),
        "nodes/is_master": ((n,), ("bool",)), "edges/indptr": ((n + 1,), ("int64",)),
        "edges/indices": ((m,), ("int32", "int64")),
    }
    if manifest.get("halo"):
        shapes["edges/is_halo"] = ((m,), ("bool",))
    ok = True
    for name, (shape, dtypes) in shapes.items():
        array = store.arrays.get(name)
        if array is None:
            problems.add(where, f"array {name} is missing")
            ok = False
            continue
        if tuple(array.shape) != shape or array.dtype.name not in dtypes:
            problems.add(where, f"array {name}: expected {'|'.join(dtypes)} {list(shape)}, "
                                f"found {array.dtype.name} {list(array.shape)}")
            ok = False
    counts = attrs.get("counts", {})
    for key, value in (("nodes", n), ("edges", m)):
        if counts.get(key) != value or entry.get("counts", {}).get(key) != value:
            problems.add(where, f"counts.{key}: attrs say {counts.get(key)}, manifest "
                                f"{entry.get('counts', {}).get(key)}, the arrays hold {value}")
    return ok, bool(damaged)


def _scan_partition(store, num_nodes, undirected, halo, edge_sink, master_count, master_part,
                    master_local, halo_in, problems, state=None) -> None:
    p = store.part_id
    where = f"partition {p}"
    data = store.to_numpy([*NODE_ARRAYS[:1], "nodes/is_master", *EDGE_ARRAYS]
                          + (["edges/is_halo"] if halo else []))
    gids, is_master = data["nodes/global_nid"], data["nodes/is_master"]
    indptr, indices = data["edges/indptr"], data["edges/indices"].astype(np.int64)
    n, m = len(gids), len(indices)
    if n and (gids[0] < 0 or gids[-1] >= num_nodes or (np.diff(gids) <= 0).any()):
        problems.add(where, f"nodes/global_nid must be strictly increasing within [0, {num_nodes})")
        return
    if indptr[0] != 0 or indptr[-1] != m or (np.diff(indptr) < 0).any():
        problems.add(where, f"edges/indptr must start at 0, never decrease and end at {m}; "
                            f"found start {indptr[0]}, end {indptr[-1]}")
        return
    if m and (indices.min() < 0 or indices.max() >= n):
        problems.add(where, f"edges/indices must lie in [0, {n}); found [{indices.min()}, {indices.max()}]")
        return
    row = np.repeat(np.arange(n, dtype=np.int64), np.diff(indptr))
    unsorted = (row[1:] == row[:-1]) & (indices[1:] < indices[:-1])
    if unsorted.any():
        problems.add(where, f"edges/indices are not sorted within row {int(row[1:][unsorted][0])}")
    touched = np.bincount(row, minlength=n) + np.bincount(indices, minlength=n)
    stray = np.flatnonzero((touched == 0) & ~is_master)
    if len(stray):
        problems.add(where, f"{len(stray):,} node(s) have no edge here and are not mastered here, "
                            f"e.g. global_nid {gids[stray[:5]].tolist()}")
    mastered = gids[is_master]
    master_count[mastered] += 1
    master_part[mastered] = p
    master_local[mastered] = np.flatnonzero(is_master)
    is_halo = data.get("edges/is_halo")
    owned = ~is_halo if is_halo is not None else slice(None)
    if is_halo is not None and int(is_halo.sum()) != store.attrs.get("counts", {}).get("halo_edges"):
        problems.add(where, f"{int(is_halo.sum())} halo edges, attrs counts say "
                            f"{store.attrs.get('counts', {}).get('halo_edges')}")
    src, dst = gids[row], gids[indices]
    if state is not None:
        _check_state_partition(state, p, gids, row, indices, owned, n, problems)
    keys = src[owned] * num_nodes + dst[owned]
    records = np.empty(len(keys), dtype=_PART_RECORD)
    records["key"], records["part"] = keys, p
    edge_sink.add(records, keys=keys)
    if halo_in is not None:
        into = np.bincount(indices, minlength=n)
        if undirected:
            loop = row == indices
            into = into + np.bincount(row[~loop], minlength=n)
        halo_in[gids[is_master]] += into[is_master]


def _check_node_map(out, manifest, storage_options, master_part, master_local, problems) -> None:
    fs, base = resolve(out, storage_options)
    want = manifest.get("node_map", {}).get("sha256")
    path = None
    for cand in (join(base, NODE_MAP_NAME), join(base, STAGING_NAME, OLD_DIR, NODE_MAP_NAME)):
        if fs.exists(cand):
            h = hashlib.sha256()
            with fs.open(cand, "rb") as fh:
                while block := fh.read(8 << 20):
                    h.update(block)
            if want is None or h.hexdigest() == want:
                path = cand
                break
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


# --- edges: exact multiset comparison, out of core -------------------------------------


class _BucketSink:
    """Hash-partitions records into ``buckets`` append-only files (by their int64 key)."""

    def __init__(self, directory: Path, buckets: int, dtype: np.dtype):
        directory.mkdir(parents=True)
        self.paths = [directory / f"b{b:05d}.bin" for b in range(buckets)]
        self.files = [open(p, "wb") for p in self.paths]  # noqa: SIM115 - closed by close()
        self.dtype = dtype

    def add(self, records: np.ndarray, keys: np.ndarray | None = None) -> None:
        keys = records if keys is None else keys
        if len(self.files) == 1:
            records.tofile(self.files[0])
            return
        bucket = ((keys.astype(np.uint64) * _GOLDEN) >> np.uint64(33)) % np.uint64(len(self.files))
        order = np.argsort(bucket, kind="stable")
        bounds = np.searchsorted(bucket[order], np.arange(len(self.files) + 1, dtype=np.uint64))
        records = records[order]
        for b in np.flatnonzero(np.diff(bounds)):
            records[bounds[b] : bounds[b + 1]].tofile(self.files[b])

    def close(self) -> None:
        for fh in self.files:
            fh.close()

    def read(self, b: int) -> np.ndarray:
        return np.fromfile(self.paths[b], dtype=self.dtype)


def _compare_edges(in_sink: _BucketSink, part_sink: _BucketSink, num_nodes: int, problems) -> None:
    shown = 0
    differing = 0
    for b in range(len(in_sink.paths)):
        a = np.sort(in_sink.read(b))
        records = part_sink.read(b)
        records = records[np.argsort(records["key"], kind="stable")]
        if np.array_equal(a, records["key"]):
            continue
        ua, ca = np.unique(a, return_counts=True)
        ub, cb = np.unique(records["key"], return_counts=True)
        keys = np.union1d(ua, ub)
        count_a = np.zeros(len(keys), np.int64)
        count_b = np.zeros(len(keys), np.int64)
        count_a[np.searchsorted(keys, ua)] = ca
        count_b[np.searchsorted(keys, ub)] = cb
        bad = np.flatnonzero(count_a != count_b)
        differing += len(bad)
        for i in bad[: max(0, 5 - shown)]:
            key = int(keys[i])
            lo, hi = np.searchsorted(records["key"], [key, key + 1])
            parts = sorted(set(records["part"][lo:hi].tolist()))
            problems.add(
                "edges",
                f"edge ({key // num_nodes}, {key % num_nodes}) appears {int(count_a[i])} time(s) in the input "
                f"and {int(count_b[i])} time(s) in the partitions" + (f" (partitions {parts})" if parts else ""),
            )
            shown += 1
    if differing > shown:
        problems.add("edges", f"{differing:,} distinct edges differ in multiplicity between input and partitions")


# --- nodes: features, labels and splits through global_nid ---------------------------


def _compare_nodes(stores: dict[int, PartitionStore], node_shards, memory_budget: int, problems,
                   damaged: set[int]) -> None:
    groups: list[list[int]] = []
    size = 0
    for p, store in stores.items():
        need = store.num_nodes * (8 + 8 + 1 + 1 + 4 * max(1, store.x.shape[1]))
        if groups and size + need <= memory_budget:
            groups[-1].append(p)
            size += need
        else:
            groups.append([p])
            size = need
    for group in groups:
        loaded = {}
        for p in group:
            try:
                loaded[p] = stores[p].to_numpy(["nodes/global_nid", "nodes/x", "nodes/y", "nodes/split"])
            except Exception as exc:  # noqa: BLE001 - a damaged store may fail to decode in any way
                if p not in damaged:
                    raise
                problems.add(f"partition {p}",
                             f"node rows unreadable past the damage ({type(exc).__name__}: {exc})")
        seen = {p: np.zeros(stores[p].num_nodes, dtype=bool) for p in loaded}
        reported: set[tuple[int, str]] = set()
        for shard in node_shards:
            pf = open_parquet(shard)
            layout, present, _ = check_node_schema(pf.schema_arrow, shard.url)
            columns = ["id", *layout.columns, *present]
            rows = max(1024, min(1 << 20, (16 << 20) // max(1, 4 * (layout.dim or 256))))
            row0 = 0
            for batch in pf.iter_batches(batch_size=rows, columns=columns):
                ids = batch.column("id").to_numpy()
                n = len(ids)
                feat = feature_matrix(batch, layout)
                label = batch.column("label").to_numpy() if "label" in present else np.full(n, -1, np.int64)
                split = batch.column("split").to_numpy() if "split" in present else np.full(n, -1, np.int8)
                for p, arrays in loaded.items():
                    gids = arrays["nodes/global_nid"]
                    if not len(gids):
                        continue
                    pos = np.searchsorted(gids, ids)
                    hit = np.flatnonzero(pos < len(gids))
                    hit = hit[gids[pos[hit]] == ids[hit]]
                    if not len(hit):
                        continue
                    local = pos[hit]
                    seen[p][local] = True
                    checks = (
                        ("x", arrays["nodes/x"][local].view(np.uint32), np.ascontiguousarray(feat[hit]).view(np.uint32)),
                        ("y", arrays["nodes/y"][local], label[hit]),
                        ("split", arrays["nodes/split"][local], split[hit]),
                    )
                    for name, got, want in checks:
                        if (p, name) in reported:
                            continue
                        diff = got != want
                        if diff.ndim > 1:
                            diff = diff.any(axis=1)
                        if diff.any():
                            i = int(np.flatnonzero(diff)[0])
                            problems.add(
                                f"partition {p}",
                                f"nodes/{name} of global_nid {int(ids[hit[i]])} (part_local_nid {int(local[i])}) "
                                f"differs from {shard.url} row {row0 + int(hit[i])} "
                                f"({int(diff.sum()):,} such rows in this batch)",
                            )
                            reported.add((p, name))
                row0 += n
        for p in loaded:
            missing = np.flatnonzero(~seen[p])
            if len(missing):
                problems.add(f"partition {p}", f"{len(missing):,} node(s) have no row in the input, e.g. "
                                               f"global_nid {loaded[p]['nodes/global_nid'][missing[:5]].tolist()}")
        del loaded


# --- the partitioner state ---------------------------------------------------------------


def _load_state(out, manifest, storage_options, num_nodes, num_parts, problems) -> dict | None:
    """The state's loads, replicas and masters (O(N)), or None (no state, or a problem)."""
    if not manifest.get("state"):
        return None
    try:
        url = resolve_state_url(out, manifest, storage_options=storage_options)
    except AseprError as exc:
        problems.add("state", str(exc))
        return None
    found = state_problems(url, storage_options=storage_options)
    for message in found:
        problems.add("state", message)
    if found:
        return None
    from storage.state import open_state

    state = open_state(url, verify=False, storage_options=storage_options)
    if state.num_nodes != num_nodes or state.num_parts != num_parts:
        problems.add("state", f"{state.num_nodes} nodes and {state.num_parts} partitions, the manifest says "
                              f"{num_nodes} and {num_parts}")
        return None
    if state.num_edges != int(manifest["num_edges"]):
        problems.add("state", f"num_edges {state.num_edges}, the manifest says {manifest['num_edges']}")
    return {"loads": state["partitions/loads"], "replicas": state["vertices/replicas"],
            "master": state["vertices/master"]}


def _check_state_partition(state, p, gids, row, indices, owned, n, problems) -> None:
    where = f"partition {p}"
    edges = int(np.count_nonzero(owned)) if not isinstance(owned, slice) else len(row)
    if int(state["loads"][p]) != edges:
        problems.add(where, f"holds {edges:,} assigned edges, the state's load says {int(state['loads'][p]):,}")
    touched = np.zeros(n, dtype=bool)
    touched[row[owned]] = True
    touched[indices[owned]] = True
    bit = (state["replicas"][gids, p >> 6] >> np.uint64(p & 63)) & np.uint64(1)
    wrong = np.flatnonzero(bit.astype(bool) != touched)
    if len(wrong):
        problems.add(where, f"the state's replica bit disagrees for {len(wrong):,} node(s), e.g. global_nid "
                            f"{gids[wrong[:5]].tolist()}")
    others = int(np.count_nonzero((state["replicas"][:, p >> 6] >> np.uint64(p & 63)) & np.uint64(1))) - int(
        np.count_nonzero(bit))
    if others:
        problems.add(where, f"the state has {others:,} replica(s) here of nodes the store does not hold")


def _check_state_masters(state, master_part, master_count, problems) -> None:
    ok = master_count == 1
    bad = np.flatnonzero(ok & (state["master"].astype(np.int64) != master_part))
    if len(bad):
        v = int(bad[0])
        problems.add("state", f"{len(bad):,} node(s) have another master in the state than in the stores, e.g. "
                              f"global_nid {v}: state {int(state['master'][v])}, stores {int(master_part[v])}")
