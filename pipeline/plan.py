"""``pipeline.plan``: the memory and disk plan of an ``asepr partition`` run, before it starts.

The plan is computed from |V| and |E| (``meta.json`` and the Parquet footers, never the
edges themselves), k, the feature width d and the :class:`~pipeline.config.PartitionConfig`
(algorithm, batch rows, k-means and projection settings), the halo and where the Dask
tasks run. It gives, per stage, the peak resident memory of the driver process and of
the local Dask workers, and the bytes the stage writes. ``asepr partition`` prints it
and refuses to start when it does not fit (:func:`check_plan`) unless ``--ignore-plan``.

The model
---------
A stage's peak is the arrays its code holds at its high-water mark (each stage's
docstring below names them: ``itemsize × |V|`` per O(|V|) array, ``batch_rows`` times
the bytes per row for per-batch buffers) plus the process baselines:

* the driver's: its resident size when it plans (interpreter and imported modules) plus
  the numba kernels a run loads, the scheduler and client of a local cluster, and one
  edge stream (:func:`pipeline.stream.iter_edge_batches`: two batches queued, the
  kernel's, the decoder's and the row group the Parquet reader holds);
* each local worker process's, plus the arrays of the one task it runs
  (``threads_per_worker=1``); with ``--workers 0`` the tasks run on threads of the
  driver and their arrays add to the driver's. Pages of a memory-mapped spill file
  that a task touched count as resident while it is mapped.

Three terms come from the allocators rather than from the arrays, and their constants
were fitted on measured runs (``docs/results/plan``): the memory a process keeps after
freeing it (:data:`RETAINED`; :func:`_compose` says how later stages reuse it), the
worker baselines, and what reading a node shard costs (:data:`NODE_READ_FACTOR`).

The replication factor RF is unknown before the run. The plan takes random edge
hashing's at the mean degree, ``k (1 - (1 - 1/k) ** (2|E|/|V|))``, which bounds
hashing's own RF (the expression is concave in the degree) and lies above what the
streaming algorithms reach, unless a known RF is given. RF sets the masters' counters
and the node rows of the stores.

Disk: everything is staged under ``OUT/`` until the commit (the decoded node table
``|V|·(4d + 9)``, edge partitions 2 B per edge, routed edges 8 B per edge row and halo
copy (16 B past 2**31 nodes), the ``global_nid`` lists, the new stores, ``state.zarr``,
the node map; the decoded edge copy, 8 B per edge, only until the route has read it),
so the output's
filesystem needs their sum; attribute clustering writes nothing (it fits on an
in-memory sample, then labels the decoded table in one pass). Store sizes use the
compression ratios measured in :mod:`storage.partition_store`.
"""

from __future__ import annotations

import math
import os
import shutil
from dataclasses import dataclass, field, replace
from pathlib import Path

from pipeline.assign.hybrid import held_bytes
from pipeline.assign.state import FIELDS
from pipeline.config import PartitionConfig
from pipeline.stages.attr_cluster import RESTARTS, sample_rows
from pipeline.stages.attr_rows import label_threads
from pipeline.store.route import EDGE_RECORD, edge_record
from pipeline.stream import stream_ways
from storage.decoded import decoded_row
from storage.direct_io import WRITE_BUFFER
from storage.errors import AseprError, InputError, format_problem
from storage.input import InputDir, open_input, open_parquet
from storage.node_table import WINDOW_BYTES, node_table_bytes
from storage.partition_store import CHUNK_BYTES
from storage.schema import check_node_schema, feature_matrix

__all__ = [
    "InputSizes",
    "RunPlan",
    "StagePlan",
    "check_plan",
    "free_disk_bytes",
    "free_memory_bytes",
    "human_bytes",
    "input_sizes",
    "plan_partition",
    "plan_run",
    "planning_rf",
    "process_baseline",
]


MIB = 1 << 20

# --- process baselines (measured on the synthetic graphs: docs/results/plan) ----------------
#: What a run adds to the planning process before its first O(|V|) array: the numba
#: kernels it compiles or loads from the cache.
KERNELS_BASE = 60 * MIB
#: A fresh ``asepr partition`` driver before any O(|V|) array: the interpreter and every
#: module the CLI imports (460 MiB), and the kernels. :func:`plan_partition` measures
#: the running process instead (:func:`process_baseline`).
DRIVER_BASE = 460 * MIB + KERNELS_BASE
#: Added to the driver by a local cluster: the scheduler, the nannies and the client.
SCHEDULER_BASE = 60 * MIB
#: A local Dask worker process before its first task, and after it: its first task
#: imports the pipeline (numba, the cached kernels, pyarrow, zarr).
WORKER_FRESH = 110 * MIB
WORKER_BASE = 300 * MIB
#: Share of its peak arrays a process keeps resident after freeing them: arrays below
#: glibc's largest mmap threshold (32 MiB) come from the heap, and Arrow's pool keeps
#: its buffers for reuse; a later stage reuses that memory before it grows.
RETAINED = 0.6
#: Reading a node shard with its features through its fsspec file object peaks at
#: about twice the file's bytes (the column chunks as Python bytes, then decoded).
NODE_READ_FACTOR = 2.0

#: Edge batches resident in a stream: 2 queued (``prefetch``), the kernel's, the decoder's,
#: and the row group the Parquet reader decoded.
STREAM_BATCHES = 5
#: Bytes of one decoded edge row: ``src`` and ``dst``, int64.
EDGE_ROW = EDGE_RECORD.itemsize

# As the stages read: k-means feature batches (pipeline.stages.attr_cluster), node batches
# of the validator (storage.validate), a step of a node-table sweep
# (pipeline.store.finalize).
_KMEANS_BATCH_BYTES = 64 * MIB
_KMEANS_BATCH_ROWS = 65_536
_NODE_BATCH_BYTES = 16 * MIB
_SWEEP_BYTES = 16 * MIB

# Compression ratios (raw / stored) of the store codecs, from storage.partition_store's
# measurement; arrays it does not list take the ratio of the closest listed one. Dense
# features are stored raw (blosc saves less than storage.partition_store.MIN_SAVING on
# them): 1.0, the most disk they can take.
_RATIO = {"x": 1.0, "global_nid": 7.1, "indptr": 7.1, "indices": 1.53, "y": 19.6, "flags": 8.0,
          "state": 2.0}
#: ``node_map.parquet`` (zstd) per node: the sequential ids compress away, the part ids
#: and part-local ids do not.
_NODE_MAP_BYTES = 5.0


def human_bytes(n: float) -> str:
    """``n`` bytes as B, KiB, MiB (one decimal), GiB or TiB (two decimals)."""
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(n) < 1024:
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.{2 if unit == 'GiB' else 1}f} {unit}"
        n /= 1024
    return f"{n:.2f} TiB"


# --- what the plan is computed from -----------------------------------------------------------


@dataclass(frozen=True)
class InputSizes:
    """The sizes of an input, read from its ``meta.json`` and its Parquet footers.

    Attributes
    ----------
    num_nodes, num_edges
        |V| and |E| (edge rows).
    feat_dim
        d, the feature width.
    edge_shards, node_shards
        Shard counts.
    max_edge_shard_rows, max_node_shard_rows
        Rows of the largest shard of each kind (a task holds at most one shard).
    max_node_shard_bytes
        File bytes of the largest node shard (default: its rows at 4d + 17 bytes).
    undirected
        ``meta.json``'s ``undirected``.
    """

    num_nodes: int
    num_edges: int
    feat_dim: int
    edge_shards: int = 1
    node_shards: int = 1
    max_edge_shard_rows: int = 0
    max_node_shard_rows: int = 0
    max_node_shard_bytes: int = 0
    undirected: bool = False

    def __post_init__(self) -> None:
        # Unknown shard sizes: one shard holds everything (the most a task can hold).
        if self.max_edge_shard_rows <= 0:
            object.__setattr__(self, "max_edge_shard_rows", self.num_edges)
        if self.max_node_shard_rows <= 0:
            object.__setattr__(self, "max_node_shard_rows", self.num_nodes)
        if self.max_node_shard_bytes <= 0:
            object.__setattr__(self, "max_node_shard_bytes", self.max_node_shard_rows * (4 * self.feat_dim + 17))


def _feat_dim_from_schema(source: InputDir) -> int:
    """d from the first node shard whose schema (or first row, for ``list``) tells it."""
    for shard in source.node_shards:
        pf = open_parquet(shard)
        layout, _, _ = check_node_schema(pf.schema_arrow, shard.url)
        if layout.dim is not None:
            return int(layout.dim)
        for batch in pf.iter_batches(batch_size=1, columns=list(layout.columns)):
            if batch.num_rows:
                return int(feature_matrix(batch, layout).shape[1])
    return 0


def input_sizes(source: str | Path | InputDir, storage_options: dict | None = None) -> InputSizes:
    """|V|, |E|, d and the shard sizes of an input, from metadata only.

    The row counts come from the Parquet footers (one small read per shard), |V| from
    ``meta.json`` when it records it, d from ``meta.json`` or the node schema. No edge
    or feature row is read.

    Parameters
    ----------
    source
        The input directory, or one already opened (:func:`storage.input.open_input`).
    storage_options
        Passed to fsspec.

    Returns
    -------
    InputSizes
    """
    source = open_input(source, storage_options)
    edge_rows = [open_parquet(s).metadata.num_rows for s in source.edge_shards]
    node_rows = [open_parquet(s).metadata.num_rows for s in source.node_shards]
    num_nodes = source.num_nodes if source.num_nodes is not None else sum(node_rows)
    feat_dim = source.meta.get("feat_dim") or _feat_dim_from_schema(source)
    return InputSizes(
        num_nodes=int(num_nodes), num_edges=int(sum(edge_rows)), feat_dim=int(feat_dim),
        edge_shards=len(edge_rows), node_shards=len(node_rows),
        max_edge_shard_rows=max(edge_rows, default=0), max_node_shard_rows=max(node_rows, default=0),
        max_node_shard_bytes=max((s.size for s in source.node_shards), default=0), undirected=source.undirected,
    )


def planning_rf(num_nodes: int, num_edges: int, num_parts: int) -> float:
    """The RF the plan assumes: random edge hashing's at the mean degree ``2|E|/|V|``.

    ``k (1 - (1 - 1/k) ** mean_degree)``, at least 1. Hashing's expected RF is concave
    in the degree, so this bounds its RF over any degree sequence of that mean; the
    streaming algorithms replicate less than hashing.
    """
    if num_nodes <= 0 or num_parts <= 1:
        return 1.0
    mean_degree = 2.0 * num_edges / num_nodes
    return max(1.0, num_parts * (1.0 - (1.0 - 1.0 / num_parts) ** mean_degree))


# --- the plan ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class StagePlan:
    """One stage of the plan.

    Attributes
    ----------
    name
        The stage, as the run's timings name it.
    driver
        Peak resident bytes of the driver process during the stage (baseline included).
    workers
        Peak resident bytes of all local Dask worker processes together (0 without any).
    written
        Bytes the stage writes (spills, stores, the node map, the state).
    """

    name: str
    driver: int
    workers: int
    written: int

    @property
    def peak(self) -> int:
        """Driver and local workers together."""
        return self.driver + self.workers


@dataclass(frozen=True)
class RunPlan:
    """The plan of one run: its stages, its disk needs and the free resources.

    Attributes
    ----------
    sizes
        The input's sizes.
    config
        The effective configuration planned.
    stages
        One :class:`StagePlan` per stage, in run order.
    replication_factor
        The RF assumed; ``rf_source`` says where it came from.
    workers, threads, remote
        Local worker processes (0: tasks on ``threads`` driver threads), or tasks on a
        remote cluster (not planned here).
    staging_bytes
        Everything staged under the output until the commit (its disk peak).
    committed_bytes
        What stays after the commit: the stores, ``state.zarr`` and the node map.
    free_memory, free_disk
        Available memory and free disk of the output's filesystem (None until
        :meth:`with_resources`).
    """

    sizes: InputSizes
    config: PartitionConfig
    stages: tuple[StagePlan, ...]
    replication_factor: float
    rf_source: str
    workers: int
    threads: int
    remote: bool
    halo: int
    staging_bytes: int
    committed_bytes: int
    out: str | None = None
    free_memory: int | None = None
    free_disk: int | None = None
    notes: tuple[str, ...] = field(default=())

    @property
    def peak(self) -> StagePlan:
        """The stage with the largest resident total."""
        return max(self.stages, key=lambda s: s.peak)

    @property
    def peak_bytes(self) -> int:
        return self.peak.peak

    @property
    def written_bytes(self) -> int:
        return sum(s.written for s in self.stages)

    @property
    def disk_bytes(self) -> int:
        """Disk the run needs on the output's filesystem."""
        return self.staging_bytes

    def with_resources(self, out: str | Path) -> RunPlan:
        """This plan with the free memory and disk of this machine filled in."""
        return replace(self, out=str(out), free_memory=free_memory_bytes(),
                       free_disk=free_disk_bytes(out))

    def shortfalls(self) -> list[str]:
        """What does not fit: each need next to what is free (empty when it all fits)."""
        found = []
        if self.free_memory is not None and self.peak_bytes > self.free_memory:
            found.append(f"a peak memory of {human_bytes(self.peak_bytes)} (stage {self.peak.name}) "
                         f"with {human_bytes(self.free_memory)} available")
        if self.free_disk is not None and self.disk_bytes > self.free_disk:
            found.append(f"{human_bytes(self.disk_bytes)} of disk (spills, stores, state, node map) "
                         f"with {human_bytes(self.free_disk)} free at {self.out}")
        return found

    def table(self) -> str:
        """The plan as printed by ``asepr partition`` (and ``--dry-run``)."""
        return _table(self)


def _table(plan: RunPlan) -> str:
    s, c = plan.sizes, plan.config
    if plan.remote:
        where = "tasks on a remote Dask cluster (not planned here)"
    elif plan.workers:
        where = f"{plan.workers} local worker process(es)"
    else:
        where = f"tasks on {plan.threads} thread(s) of this process"
    lines = [
        f"plan: {s.num_nodes:,} nodes, {s.num_edges:,} edges, d = {s.feat_dim} (float32), k = {c.num_parts}, "
        f"{c.algo}, halo {plan.halo}, batch rows {c.batch_rows:,}; {where}",
        f"  RF planned {plan.replication_factor:.2f} ({plan.rf_source})",
        f"  {'stage':24s} {'driver':>10s} {'workers':>10s} {'peak RSS':>10s} {'written':>10s}",
    ]
    for st in plan.stages:
        lines.append(f"  {st.name:24s} {human_bytes(st.driver):>10s} {human_bytes(st.workers):>10s} "
                     f"{human_bytes(st.peak):>10s} {human_bytes(st.written):>10s}")
    lines.append(f"  {'total':24s} {'':>10s} {'':>10s} {human_bytes(plan.peak_bytes):>10s} "
                 f"{human_bytes(plan.written_bytes):>10s}")
    lines.append(f"  peak memory {human_bytes(plan.peak_bytes)} (stage {plan.peak.name}); disk "
                 f"{human_bytes(plan.staging_bytes)} staged under the output until the commit, "
                 f"{human_bytes(plan.committed_bytes)} committed")
    if plan.free_memory is not None:
        lines.append(f"  available memory {human_bytes(plan.free_memory)}; free disk "
                     f"{human_bytes(plan.free_disk)} at {plan.out}")
        short = plan.shortfalls()
        lines.append("  does not fit: " + "; ".join(short) if short else "  fits this machine")
    lines += [f"  note: {n}" for n in plan.notes]
    return "\n".join(lines)


# --- the stages -------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Need:
    """What a stage holds and writes.

    ``driver``: the driver's arrays; ``task``: one task's arrays, for ``tasks`` tasks;
    ``written``: bytes written, of which ``kept`` stay after the commit; ``removed``:
    bytes (written by it or before) that the stage deletes when it ends.
    """

    driver: float = 0.0
    task: float = 0.0
    tasks: int = 0
    written: float = 0.0
    kept: float = 0.0
    removed: float = 0.0


@dataclass(frozen=True)
class _Shape:
    """The quantities the stage formulas use (all counts, not bytes)."""

    n: int          # |V|
    e: int          # |E|
    k: int
    epsilon: float
    d: int          # feature width
    d_emb: int      # d' = k-means width (projected or not)
    b: int          # edge batch rows (capped by the largest edge shard)
    rf: float
    halo_copies: float  # halo copies per edge, at most (0, 1, or 2 for undirected inputs)
    n_s: int        # rows of the largest node shard
    e_s: int        # rows of the largest edge shard
    node_shards: int
    edge_shards: int
    node_read: float  # peak bytes of reading the largest node shard with its features
    label_threads: int = 1  # threads labelling the decoded node table (pipeline.stages.attr_cluster)
    sweeps: int = 1  # node-table sweeps at once (one per worker; local threads share one)

    @property
    def words(self) -> int:
        """W = ceil(k / 64) replica words per vertex."""
        return (self.k + 63) // 64

    @property
    def n_p(self) -> float:
        """Nodes of one partition: RF·|V|/k, at most |V|."""
        return min(self.n, self.rf * self.n / self.k)

    @property
    def e_p(self) -> float:
        """Edge rows of one partition: the cap ``(1 + eps)|E|/k`` plus its halo copies."""
        return math.ceil((1.0 + self.epsilon) * self.e / self.k) * (1.0 + self.halo_copies)

    @property
    def stream(self) -> float:
        """One edge stream's batches (:data:`STREAM_BATCHES` of ``b`` rows)."""
        return STREAM_BATCHES * EDGE_ROW * self.b


def _held(run: PartitionConfig, s: _Shape) -> float:
    """O(|V|) arrays the driver keeps from ② on: ``degree`` int64 and ``attr_cluster_id``
    int32; with communities (asep, 2ps-*) also ``community_id`` and ``volume`` int64 and
    the mapping's ``community_part`` int32."""
    return 12 * s.n + (20 * s.n if run.uses_communities else 0)


def _validate(run: PartitionConfig, s: _Shape) -> _Need:
    """storage.validate, its two passes at once: node pass ``seen`` bool[N] + reading a node shard, or one node
    batch (16 MiB of features, their ``isfinite`` mask, ids, labels); edge pass
    ``degree`` int64[N] + the batch and its range masks. ``asepr partition`` also writes
    the decoded edge copy (:mod:`storage.decoded`, 8 B per edge, 16 past 2**31 nodes), removed once the
    route has read it, and the decoded node table (:mod:`storage.node_table`,
    ``4d + 9`` B per node), kept until the run ends."""
    node_rows = min(s.n_s, max(1024, min(run.batch_rows, _NODE_BATCH_BYTES // (4 * max(1, s.d)))))
    node_pass = s.n + max(s.node_read, 2 * node_rows * (5 * s.d + 17))
    edge_pass = 8 * s.n + 2 * EDGE_ROW * s.b + 4 * s.b
    # The two passes run side by side (storage.validate); the copies' writers buffer a
    # block each (storage.direct_io): src and dst, x, y and split.
    return _Need(driver=node_pass + edge_pass + 5 * WRITE_BUFFER,
                 written=decoded_row(s.n) * s.e + node_table_bytes(s.n, s.d))


def _kmeans(run: PartitionConfig, s: _Shape) -> _Need:
    """pipeline.stages.attr_cluster, nothing written, from the decoded node table (what
    ``asepr partition`` runs): the driver gathers the ``m`` sampled rows (``float32
    [m, d]``) and fits on their embedding (a copy of its non-zero rows, the 20 B per row
    of an assignment, and k-means++'s ``2 + ln C`` float64 distance rows, three at a
    time); then ``label_threads`` threads each read a block of rows and embed it in
    float64 into ``attr_cluster_id`` int32[N], beside ``degree``. When the sample is every
    row (``m = N``) it also holds every embedded row and its id. A column's clusters:
    tasks read the shards; the driver receives every shard's ids and labels (12 B per
    node) and scatters them with a ``seen`` bool[N]."""
    if run.attr_column:
        labels_driver = 8 * s.n + 12 * s.n + 5 * s.n + 8 * s.n_s
        return _Need(driver=labels_driver, task=12 * s.n_s + 2 * 16 * min(s.n_s, run.batch_rows),
                     tasks=s.node_shards)
    rows = min(s.n, max(1, min(_KMEANS_BATCH_ROWS, _KMEANS_BATCH_BYTES // (8 + 4 * s.d))))
    m = sample_rows(s.n, run.attr_clusters, s.d, s.d_emb, run.kmeans_sample, run.kmeans_max_passes,
                    RESTARTS)
    every = m >= s.n
    fit = 8 * s.n + 4 * m * s.d + 2 * 4 * m * s.d_emb + m * (20 + 24 * (2 + math.log(run.attr_clusters)))
    kept = s.n * (8 + 4 * s.d_emb) if every else 0
    labels = 12 * s.n + s.label_threads * rows * (4 * s.d + 8 * s.d + 21 * s.d_emb + 20)
    return _Need(driver=max(fit, labels + kept))


def _clustering(run: PartitionConfig, s: _Shape) -> _Need:
    """pipeline.stages.struct_cluster: ``ClusterState.rows`` int64[N, 4] (32 B per node),
    then the ``community`` and ``volume`` copies int64[N] while the rows live; the
    published 2PS-L rule starts from three more int64/int32 [N] arrays. ASEP first
    measures the attribute lift on a 2M-edge prefix (one batch, no prefetch)."""
    held = 12 * s.n
    if run.algo == "metis":
        # pipeline.stages.metis, in memory: src/dst lists and their concatenations, both
        # directions, the unique sorted keys and the CSR: about 16 int64 per edge row,
        # plus METIS's own copy of the graph.
        return _Need(driver=held + 128 * s.e + 48 * s.e + 16 * s.n)
    published = not run.uses_attributes
    start = 20 * s.n if published else 8 * s.n
    return _Need(driver=held + 32 * s.n + max(start, 16 * s.n) + s.stream)


def _mapping(s: _Shape) -> _Need:
    """pipeline.stages.mapping: ``group`` int64[N]; the lexsort over the live communities
    (at most N: ``live``, three int64 keys, the order and its gather, 48 B each); then
    ``part_of`` int32[N] and the homes' ``vertex_part`` int32, ``has`` bool and three
    gathers (29 B per node); then the per-vertex steering: ``vertex_part`` int32,
    ``vertex_volume`` int64, ``vertex_home`` int32."""
    return _Need(driver=28 * s.n + 8 * s.n + max(48 * s.n, 8 * s.n + 29 * s.n))


def _assignment(run: PartitionConfig, s: _Shape) -> _Need:
    """pipeline.assign: ``AssignState.vstate`` int64[N, stride] (stride 8 words up to
    k = 192: 64 B per node), the steering arrays (16 B per node) until it is built, and
    at the end the contiguous ``replicas`` uint64[N, W]; the stream, the ``int16`` output
    and its bytes, and the hybrid's held subgraph (at most ``memory_budget``). Two-phase
    baselines also write (and remove) a first-phase file."""
    width = s.words + FIELDS
    stride = 8 if width <= 8 else -(-width // 8) * 8
    steering = 16 * s.n if run.uses_communities or run.algo == "metis" else 0
    driver = _held(run, s) + 8 * stride * s.n + max(steering, 8 * s.words * s.n) + s.stream + 4 * s.b
    # The hybrid (pipeline.assign.hybrid) holds at most its budget beyond this, and at
    # most the whole graph.
    if run.memory_budget > 0:
        driver += min(run.memory_budget, held_bytes(s.n, s.n, 2 * s.e, s.k))
    first_phase = 2 * s.e if run.algo in ("2ps-l", "2ps-hdrf") else 0
    return _Need(driver=driver, written=2 * s.e + first_phase, removed=first_phase)


def _fallback(run: PartitionConfig, s: _Shape, asep_peak: float) -> _Need:
    """pipeline.partition's two-phase fallback (ASEP): 2PS-HDRF's clustering and
    two-phase assignment, its edge partitions and first-phase file in a subdirectory
    (the first phase and the losing stream's partitions are removed).

    ``concurrent_fallback`` (default) runs it on a thread beside ASEP's attribute
    clustering, clustering, mapping and stream, so its largest step adds to
    ``asep_peak``, the largest of those (``degree`` is shared); sequentially it runs after
    them beside ASEP's ``replicas`` uint64[N, W] and communities (``community_id``,
    ``volume`` int64[N])."""
    twops = run.two_phase_config()
    own = max(_clustering(twops, s).driver, _assignment(twops, s).driver)
    if run.concurrent_fallback:
        driver = asep_peak + own - 12 * s.n
    else:
        driver = 8 * s.words * s.n + 16 * s.n + own
    return _Need(driver=driver, written=4 * s.e, removed=4 * s.e)


def _ways(s: _Shape) -> int:
    """Threads of an order-free edge pass (:func:`pipeline.stream.map_shard_ranges`)."""
    return max(1, min(stream_ways(), s.edge_shards))


def _masters(run: PartitionConfig, s: _Shape) -> _Need:
    """pipeline.stages.masters: ``replicas`` uint64[N, W], ``offsets`` int64[N+1], the
    ``popcounts`` int64[N], the packed rows int64[N, W + 1]; then each stream range's
    thread keeps one counter per replica (``int32``, RF·N of them, ``int64`` from 2**31
    edges) and reads its own stream with each batch's ``int16`` partitions; then
    ``master`` int32[N]."""
    held = _held(run, s) + 8 * s.words * s.n + 8 * s.n + 8 * (s.words + 1) * s.n
    ways = _ways(s)
    counter = 4 if s.e < 2**31 else 8
    return _Need(driver=held + max(8 * s.n, ways * (counter * s.rf * s.n + s.stream + 2 * s.b) + 4 * s.n))


def _metrics(run: PartitionConfig, s: _Shape) -> _Need:
    """pipeline.stages.metrics: ``replicas``, ``master`` int32, the masters stage's
    packed rows int64[N, W + 1], the locality pass's streams (one per range thread),
    then ``labels`` int64[N] read from the node shards, the ``attr`` int64 copy and the
    ``any`` masks."""
    held = _held(run, s) + 8 * s.words * s.n + 4 * s.n + 8 * (s.words + 1) * s.n
    return _Need(driver=held + max(_ways(s) * s.stream, 8 * s.n + 8 * s.n + (s.words + 1) * s.n))


def _state(run: PartitionConfig, s: _Shape) -> _Need:
    """pipeline.store.continuation: the finished assignment (``replicas``, ``master``,
    ``labels``) written to ``state.zarr`` chunk by chunk, and ``master.npy``."""
    arrays = _held(run, s) + 8 * s.words * s.n + 12 * s.n
    state = arrays / _RATIO["state"]
    return _Need(driver=arrays + 4 * CHUNK_BYTES, written=state + 4 * s.n, kept=state)


def _route(s: _Shape) -> _Need:
    """pipeline.store.route: a task maps its shard's ``int16`` partitions and holds a
    batch as ``int64`` columns, its records (``int32`` pairs while N <= 2**31, else
    ``int64``: ``r`` B), ``int64`` partitions, the argsort and the grouped records
    (``34 + 2r`` B per row); a halo also maps ``master`` int32[N] and groups the copies.
    Each edge row is written once (``r`` B), plus its halo copies; the decoded edge copy
    it read is then deleted."""
    record = edge_record(s.n <= 2**31).itemsize
    task = 2 * s.e_s + (34 + 2 * record) * s.b
    if s.halo_copies:
        task += 4 * s.n + 57 * s.b * s.halo_copies
    return _Need(task=task, tasks=s.edge_shards, written=record * s.e * (1 + s.halo_copies),
                 removed=decoded_row(s.n) * s.e)


def _finalize_edges(s: _Shape) -> _Need:
    """pipeline.store.finalize.finalize_edges, per partition: its routed records, read
    and concatenated (32 B per edge row), then ``src``/``dst`` and their part-local ids;
    the mapped ``master`` int32[N] and its comparison, ``present`` bool[N],
    ``local_of_global`` int64[N]; ``global_nid``, ``indptr``, the counts (24 B per node)."""
    task = 32 * s.e_p + 14 * s.n + 24 * s.n_p
    stores = s.k * (s.n_p * (8 / _RATIO["global_nid"] + 8 / _RATIO["indptr"] + 1 / _RATIO["flags"])
                    + s.e_p * (4 / _RATIO["indices"] + (1 / _RATIO["flags"] if s.halo_copies else 0)))
    return _Need(task=task, tasks=s.k, written=stores + s.k * 8 * s.n_p, kept=stores)


def _finalize_nodes(s: _Shape) -> _Need:
    """pipeline.store.finalize.finalize_nodes_from_table: ``sweeps`` tasks (one per
    worker; a process's threads share one), each sweeping the decoded node table for
    ``k / sweeps`` partitions: per partition a one-chunk buffer of each of ``x``, ``y``
    and ``split`` (and two more of ``x``, :mod:`storage.direct_chunks`) and a slice of
    its ids; two steps of the table (16 MiB of features with their labels and splits:
    the one served and the one read ahead) and the ids taken from one."""
    sweeps = max(1, min(s.k, s.sweeps))
    per_sweep = math.ceil(s.k / sweeps)
    step_rows = min(s.n, _SWEEP_BYTES // (4 * max(1, s.d)))  # a step reads at most the table
    # x: the block being filled and the two that storage.direct_chunks writes from.
    buffers = (3 * min(s.n_p * 4 * s.d, CHUNK_BYTES) + min(s.n_p * 8, CHUNK_BYTES) + min(s.n_p, CHUNK_BYTES)
               + 8 * 65_536)
    task = per_sweep * buffers + 2 * step_rows * (4 * s.d + 9) + 8 * min(s.n_p, step_rows)
    stores = s.k * s.n_p * (4 * s.d / _RATIO["x"] + 8 / _RATIO["y"] + 1 / _RATIO["flags"])
    return _Need(task=task, tasks=sweeps, written=stores, kept=stores)


def _node_map(s: _Shape) -> _Need:
    """pipeline.store.commit.node_map_from_ids (write_node_map on a resumed run):
    ``master_part`` and ``part_local`` int64[N], one partition's ``global_nid`` and
    masters at a time, 1M-row Parquet tables."""
    node_map = _NODE_MAP_BYTES * s.n
    return _Need(driver=16 * s.n + 9 * s.n_p + 16 * s.n / s.k + 48 * MIB, written=node_map, kept=node_map)


def _stage_needs(run: PartitionConfig, s: _Shape) -> list[tuple[str, _Need]]:
    """The stages of a partition run, in order, with what each holds."""
    clustering = run.uses_communities or run.algo == "metis"
    # No degrees stage: the validator's edge pass counts them and partition() reuses them.
    needs = [("validate", _validate(run, s)), ("attribute clustering", _kmeans(run, s))]
    if clustering:
        name = "metis" if run.algo == "metis" else "structural clustering"
        needs.append((name, _clustering(run, s)))
    if run.uses_communities:
        needs.append(("mapping", _mapping(s)))
    needs.append(("assignment", _assignment(run, s)))
    if run.uses_two_phase_fallback:
        # It starts beside attribute clustering and runs on beside clustering, mapping, assignment.
        asep_peak = max(need.driver for name, need in needs[1:])
        needs.append(("two-phase fallback", _fallback(run, s, asep_peak)))
    # The state is written on a driver thread beside the route and the edge stores.
    state = _state(run, s)
    needs += [("masters", _masters(run, s)),
              ("metrics", _metrics(run, s)), ("state", state), ("route", replace(_route(s), driver=state.driver)),
              ("finalize edges", replace(_finalize_edges(s), driver=state.driver)),
              # The node map is built on a driver thread beside the node rows' sweep.
              ("finalize nodes", replace(_finalize_nodes(s), driver=_node_map(s).driver)),
              ("node map", _node_map(s))]
    return needs


def _compose(needs: list[tuple[str, _Need]], *, base: int, workers: int, threads: int,
             remote: bool) -> tuple[StagePlan, ...]:
    """Baselines plus arrays, stage by stage; where the tasks run decides who holds them.

    The driver keeps :data:`RETAINED` of its largest arrays so far. With worker processes
    its later arrays reuse that memory first (the big arrays are fresh mappings); with
    the tasks on its own threads, their buffers land in per-thread malloc arenas and
    each stage adds to what the earlier ones left.
    """
    stages = []
    largest = 0.0
    for i, (name, need) in enumerate(needs):
        arrays = need.driver
        pool = 0.0
        if workers and not remote:
            pool = workers * (WORKER_BASE if i else WORKER_FRESH) + min(workers, need.tasks) * need.task
        elif not remote:
            arrays += min(threads, need.tasks) * need.task
        if workers or remote:
            driver = base + SCHEDULER_BASE + max(arrays, RETAINED * largest)
        else:
            driver = base + RETAINED * largest + arrays
        largest = max(largest, arrays)
        stages.append(StagePlan(name=name, driver=int(driver), workers=int(pool), written=int(need.written)))
    return tuple(stages)


def plan_run(
    sizes: InputSizes,
    config: PartitionConfig,
    *,
    halo: int = 0,
    workers: int = 0,
    threads: int | None = None,
    remote: bool = False,
    replication_factor: float | None = None,
    driver_base: int | None = None,
) -> RunPlan:
    """The plan of partitioning an input of ``sizes`` with ``config`` (no I/O).

    Parameters
    ----------
    sizes
        |V|, |E|, d and the shard sizes (:func:`input_sizes`).
    config
        The configuration; planned as the run resolves it (``effective()``).
    halo
        0 or 1 (``--halo``): 1 plans one halo copy per edge row (two for undirected
        inputs), the most there can be.
    workers
        Local Dask worker processes; 0 runs the tasks on ``threads`` driver threads.
    threads
        Threads of the local scheduler with ``workers = 0`` (default: the CPU count).
    remote
        The tasks run on a remote cluster: only the driver is planned.
    replication_factor
        A known RF (from an earlier run); default :func:`planning_rf`.
    driver_base
        The driver process's resident bytes before the run (default
        :data:`DRIVER_BASE`, a fresh ``asepr`` process).

    Returns
    -------
    RunPlan
    """
    run = config.effective()
    undirected = sizes.undirected if run.undirected is None else bool(run.undirected)
    if replication_factor is None:
        rf, rf_source = planning_rf(sizes.num_nodes, sizes.num_edges, run.num_parts), \
            "random hashing at the mean degree, an upper bound for the streaming algorithms"
    elif not 1.0 <= replication_factor <= max(1, run.num_parts):
        raise InputError(format_problem("--plan-rf", f"a replication factor in [1, k = {run.num_parts}]",
                                        repr(replication_factor)))
    else:
        rf, rf_source = float(replication_factor), "given"
    d = max(1, sizes.feat_dim)
    d_emb = run.projection_dim if d > run.projection_threshold else d
    shape = _Shape(
        n=sizes.num_nodes, e=sizes.num_edges, k=run.num_parts, epsilon=run.epsilon, d=d, d_emb=d_emb,
        b=min(run.batch_rows, max(1, sizes.max_edge_shard_rows)), rf=rf,
        halo_copies=(2.0 if undirected else 1.0) if halo else 0.0,
        n_s=max(1, sizes.max_node_shard_rows), e_s=max(1, sizes.max_edge_shard_rows),
        node_shards=max(1, sizes.node_shards), edge_shards=max(1, sizes.edge_shards),
        node_read=NODE_READ_FACTOR * sizes.max_node_shard_bytes,
        label_threads=label_threads(),
        sweeps=workers or 1,
    )
    threads = threads or os.cpu_count() or 1
    needs = _stage_needs(run, shape)
    base = DRIVER_BASE if driver_base is None else int(driver_base)
    stages = _compose(needs, base=base, workers=workers, threads=threads, remote=remote)
    # Everything staged coexists until the commit, but for what a stage removes (after
    # its own writes): the peak over the stages.
    staging = on_disk = 0.0
    for _, need in needs:
        on_disk += need.written
        staging = max(staging, on_disk)
        on_disk -= need.removed
    committed = sum(need.kept for _, need in needs)
    notes = []
    if run.algo == "metis":
        notes.append("metis partitions in memory; its own working memory is estimated, not derived")
    if remote:
        notes.append("the Dask workers are remote: their memory is not part of this machine's plan")
    return RunPlan(
        sizes=sizes, config=run, stages=stages, replication_factor=rf, rf_source=rf_source,
        workers=0 if remote else workers, threads=threads, remote=remote, halo=int(halo),
        staging_bytes=int(staging), committed_bytes=int(committed), notes=tuple(notes),
    )


def plan_partition(
    source: str | Path | InputDir,
    out: str | Path,
    config: PartitionConfig,
    *,
    halo: int = 0,
    workers: int = 0,
    remote: bool = False,
    replication_factor: float | None = None,
    storage_options: dict | None = None,
) -> RunPlan:
    """The plan of ``asepr partition SOURCE OUT`` on this machine, with its free resources.

    Reads only ``meta.json`` and the Parquet footers of ``source``, and writes nothing.

    Parameters
    ----------
    source
        The input directory (or an opened :class:`~storage.input.InputDir`).
    out
        The output directory (it need not exist): its filesystem's free disk is checked.
    config, halo, workers, remote, replication_factor
        As :func:`plan_run`; ``config`` is resolved against the input's ``meta.json``.

    Returns
    -------
    RunPlan
    """
    source = open_input(source, storage_options)
    sizes = input_sizes(source)
    plan = plan_run(sizes, config.resolved(source), halo=halo, workers=workers, remote=remote,
                    replication_factor=replication_factor, driver_base=process_baseline())
    return plan.with_resources(out)


# --- the resources and the check ----------------------------------------------------------------


def _existing(path: str | Path) -> Path:
    """``path`` or its nearest existing ancestor (an output directory may not exist yet)."""
    p = Path(path).absolute()
    while not p.exists() and p != p.parent:
        p = p.parent
    return p


def process_baseline() -> int:
    """The driver's baseline if this process runs the partitioning: its resident bytes
    now plus :data:`KERNELS_BASE`."""
    import psutil

    return int(psutil.Process().memory_info().rss) + KERNELS_BASE


def free_disk_bytes(path: str | Path) -> int:
    """Free bytes (for an unprivileged writer) on the filesystem that holds ``path``."""
    return int(shutil.disk_usage(_existing(path)).free)


def _cgroup_free() -> int | None:
    """What the cgroup (v2) memory limit leaves, when one is set."""
    try:
        limit = Path("/sys/fs/cgroup/memory.max").read_text().strip()
        if limit == "max":
            return None
        used = int(Path("/sys/fs/cgroup/memory.current").read_text().strip())
        return max(0, int(limit) - used)
    except (OSError, ValueError):
        return None


def free_memory_bytes() -> int:
    """Memory available to a new run: the kernel's ``MemAvailable``, capped by a cgroup limit."""
    import psutil

    available = int(psutil.virtual_memory().available)
    limit = _cgroup_free()
    return available if limit is None else min(available, limit)


def check_plan(plan: RunPlan) -> None:
    """Refuse a run whose plan does not fit this machine (:meth:`RunPlan.shortfalls`).

    Raises
    ------
    AseprError
        The planned peak memory exceeds the available memory, or the planned disk
        exceeds the free disk of the output's filesystem. The message
        names what is needed, what is free, and ``--ignore-plan``.
    """
    found = plan.shortfalls()
    if found:
        raise AseprError(
            format_problem(
                f"asepr partition {plan.out}: the memory and disk plan",
                "a run that fits the available memory and the free disk",
                "; ".join(found),
                f"free memory or disk, lower --workers or --batch-rows, write to a larger filesystem, "
                f"give a known replication factor with --plan-rf (the plan "
                f"assumed {plan.replication_factor:.2f}), or pass --ignore-plan to run anyway.",
            )
        )
