"""``asepr.pipeline.planning.plan``: the memory and disk plan of an ``asepr partition`` run, before it starts.

The plan is computed from |V| and |E| (``meta.json`` and the Parquet footers), two
estimates from samples of the input (:mod:`asepr.pipeline.planning.plan_inputs`: the features' stored
size and the replication factor), k, the feature width d and the :class:`~asepr.pipeline.config.PartitionConfig`
(algorithm, batch rows, k-means and projection settings), the halo and where the Dask
tasks run. It gives, per stage, the peak resident memory of the driver process and of
the local Dask workers, and the bytes the stage writes. ``asepr partition`` prints it
and refuses to start when it does not fit (:func:`check_plan`) unless ``--ignore-plan``.

The model
---------
Each stage declares what its code holds at its high-water mark and what it writes,
next to its code (a ``*_needs`` function returning a :class:`asepr.pipeline.planning.needs.Need`:
``itemsize × |V|`` per O(|V|) array, ``batch_rows`` times the bytes per row for
per-batch buffers); the plan adds them up, stage by stage, with the process baselines:

* the driver's: its resident size when it plans (interpreter and imported modules) plus
  the numba kernels a run loads, the scheduler and client of a local cluster, and one
  edge stream (:func:`asepr.pipeline.stream.iter_edge_batches`: two batches queued, the
  kernel's, the decoder's and the row group the Parquet reader holds);
* each local worker process's, plus the arrays of the one task it runs
  (``threads_per_worker=1``); with ``--workers 0`` the tasks run on threads of the
  driver and their arrays add to the driver's. Pages of a memory-mapped spill file
  that a task touched count as resident while it is mapped.

Three terms come from the allocators rather than from the arrays, and their constants
were fitted on measured runs (``docs/results/plan``): the memory a process keeps after
freeing it (:data:`RETAINED`; :func:`_compose` says how later stages reuse it), the
worker baselines, and what reading a node shard costs (:data:`NODE_READ_FACTOR`).

The replication factor RF is unknown before the run. The plan estimates it from a
sample of the edge stream (:func:`asepr.pipeline.planning.plan_inputs.estimate_rf`: a streaming
algorithm that replicates at least as much as the one planned, run on up to 2M edge
rows, extrapolated when that is a share of the stream, at most random hashing's bound
``k (1 - (1 - 1/k) ** (2|E|/|V|))``), unless a known RF is given (``--plan-rf``); the
plan prints which. RF sets the masters' counters and the node rows of the stores.

Disk: everything is staged under ``OUT/`` until the commit (the decoded node table
``|V|·(4d + 9)``, edge partitions 2 B per edge, routed edges 8 B per edge row and halo
copy (16 B past 2**31 nodes), the ``global_nid`` lists, the new stores, ``state.zarr``,
the node map; the decoded edge copy, 8 B per edge, only until the route has read it),
so the output's filesystem needs their sum; attribute clustering writes nothing (it
fits on an in-memory sample, then labels the decoded table in one pass). Store sizes
use the compression ratios measured in :mod:`asepr.storage.partitions.store`, except the
features', which depends on the graph and is measured with the store's codec on a
sample of node rows (:func:`asepr.pipeline.planning.plan_inputs.feature_store_ratio`), and count the
blocks the stores' directories and files take (:data:`asepr.pipeline.planning.needs.STORE_TREE`).
How close the plan comes: ``docs/results/plan-accuracy``.
"""

from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass, field, replace
from pathlib import Path

from asepr.pipeline.assign.hybrid import assignment_needs
from asepr.pipeline.config import PartitionConfig
from asepr.pipeline.planning.machine import free_disk_bytes, free_memory_bytes
from asepr.pipeline.planning.needs import MIB, Need, RunShape
from asepr.pipeline.partition import fallback_needs
from asepr.pipeline.partition_run import validate_needs
from asepr.pipeline.planning.plan_inputs import (
    InputSizes,
    RFEstimate,
    estimate_rf,
    feature_store_ratio,
    input_sizes,
    planning_rf,
)
from asepr.pipeline.stages.attr_cluster import kmeans_needs
from asepr.pipeline.stages.attr_column import column_needs
from asepr.pipeline.stages.attr_rows import label_threads
from asepr.pipeline.stages.mapping import mapping_needs
from asepr.pipeline.stages.masters import masters_needs
from asepr.pipeline.stages.metis import metis_needs
from asepr.pipeline.stages.metrics import metrics_needs
from asepr.pipeline.stages.struct_cluster import clustering_needs
from asepr.pipeline.store.commit import node_map_needs
from asepr.pipeline.store.continuation import state_needs
from asepr.pipeline.store.finalize import finalize_edges_needs, finalize_nodes_needs
from asepr.pipeline.store.route import route_needs
from asepr.pipeline.stream import stream_ways
from asepr.storage.errors import AseprError, InputError, format_problem
from asepr.storage.inputs.directory import InputDir, open_input
from asepr.storage.locations.location import is_local_url

__all__ = [
    "InputSizes",
    "RFEstimate",
    "RunPlan",
    "StagePlan",
    "check_plan",
    "human_bytes",
    "input_sizes",
    "plan_partition",
    "plan_run",
    "planning_rf",
    "process_baseline",
]


# --- process baselines (measured on the synthetic graphs: docs/results/plan) ----------------
#: The stages whose kept bytes are the partition stores: with a remote output their
#: tasks write them into the object store, so they take no local scratch.
STORE_STAGES = frozenset({"finalize edges", "finalize nodes"})
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


def human_bytes(n: float) -> str:
    """``n`` bytes as B, KiB, MiB (one decimal), GiB or TiB (two decimals)."""
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(n) < 1024:
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.{2 if unit == 'GiB' else 1}f} {unit}"
        n /= 1024
    return f"{n:.2f} TiB"


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
    feature_ratio, feature_rows
        How many times smaller than float32 the stores hold the features, and the
        node rows that ratio was measured on (0: not measured, 1.0 assumed).
    workers, threads, remote
        Local worker processes (0: tasks on ``threads`` driver threads), or tasks on a
        remote cluster (not planned here).
    staging_bytes
        Everything staged under the output until the commit (its disk peak).
    committed_bytes
        What stays after the commit: the stores, ``state.zarr`` and the node map.
    scratch_bytes
        The local disk peak when the output is remote (:data:`STORE_STAGES` write
        their stores into the object store, never to the local disk).
    free_memory, free_disk
        Available memory and free disk of the output's filesystem, or of the local
        scratch directory ``disk_at`` for a remote output (None until
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
    scratch_bytes: int = 0
    out: str | None = None
    remote_output: bool = False
    disk_at: str | None = None
    free_memory: int | None = None
    free_disk: int | None = None
    notes: tuple[str, ...] = field(default=())
    feature_ratio: float = 1.0
    feature_rows: int = 0

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
        """Local disk the run needs: under the output, or in the scratch of a remote output."""
        return self.scratch_bytes if self.remote_output else self.staging_bytes

    def with_resources(self, out: str | Path, *, remote_output: bool = False,
                       scratch: str | Path | None = None) -> RunPlan:
        """This plan with the free memory and local disk of this machine filled in: the
        output's filesystem, or for a ``remote_output`` the local ``scratch`` directory
        (default: the system's temporary directory), never the object store."""
        disk_at = str(out) if not remote_output else str(scratch or tempfile.gettempdir())
        return replace(self, out=str(out), remote_output=remote_output, disk_at=disk_at,
                       free_memory=free_memory_bytes(), free_disk=free_disk_bytes(disk_at))

    def shortfalls(self) -> list[str]:
        """What does not fit: each need next to what is free (empty when it all fits)."""
        found = []
        if self.free_memory is not None and self.peak_bytes > self.free_memory:
            found.append(f"a peak memory of {human_bytes(self.peak_bytes)} (stage {self.peak.name}) "
                         f"with {human_bytes(self.free_memory)} available")
        if self.free_disk is not None and self.disk_bytes > self.free_disk:
            what = "local scratch (spills, decoded input, state, node map)" if self.remote_output else \
                "disk (spills, stores, state, node map)"
            found.append(f"{human_bytes(self.disk_bytes)} of {what} "
                         f"with {human_bytes(self.free_disk)} free at {self.disk_at}")
        return found

    def table(self) -> str:
        """The plan as printed by ``asepr partition`` (and ``--dry-run``)."""
        return _table(self)


def _stored(plan: RunPlan) -> str:
    """How the features will be stored, as the plan's first line says it."""
    if not plan.feature_rows:
        return "float32"
    if plan.feature_ratio <= 1.0:
        return f"float32, stored raw: the codec saves too little on a sample of {plan.feature_rows:,} rows"
    return f"float32, stored {plan.feature_ratio:.1f}x smaller as measured on a sample of {plan.feature_rows:,} rows"


def _table(plan: RunPlan) -> str:
    s, c = plan.sizes, plan.config
    if plan.remote:
        where = "tasks on a remote Dask cluster (not planned here)"
    elif plan.workers:
        where = f"{plan.workers} local worker process(es)"
    else:
        where = f"tasks on {plan.threads} thread(s) of this process"
    lines = [
        f"plan: {s.num_nodes:,} nodes, {s.num_edges:,} edges, d = {s.feat_dim} ({_stored(plan)}), k = {c.num_parts}, "
        f"{c.algo}, halo {plan.halo}, batch rows {c.batch_rows:,}; {where}",
        f"  RF planned {plan.replication_factor:.2f} ({plan.rf_source})",
        f"  {'stage':24s} {'driver':>10s} {'workers':>10s} {'peak RSS':>10s} {'written':>10s}",
    ]
    for st in plan.stages:
        lines.append(f"  {st.name:24s} {human_bytes(st.driver):>10s} {human_bytes(st.workers):>10s} "
                     f"{human_bytes(st.peak):>10s} {human_bytes(st.written):>10s}")
    lines.append(f"  {'total':24s} {'':>10s} {'':>10s} {human_bytes(plan.peak_bytes):>10s} "
                 f"{human_bytes(plan.written_bytes):>10s}")
    if plan.remote_output:
        lines.append(f"  peak memory {human_bytes(plan.peak_bytes)} (stage {plan.peak.name}); local scratch "
                     f"{human_bytes(plan.scratch_bytes)}; {human_bytes(plan.committed_bytes)} written to the store "
                     f"{plan.out}")
    else:
        lines.append(f"  peak memory {human_bytes(plan.peak_bytes)} (stage {plan.peak.name}); disk "
                     f"{human_bytes(plan.staging_bytes)} staged under the output until the commit, "
                     f"{human_bytes(plan.committed_bytes)} committed")
    if plan.free_memory is not None:
        lines.append(f"  available memory {human_bytes(plan.free_memory)}; free disk "
                     f"{human_bytes(plan.free_disk)} at {plan.disk_at}" + (" (scratch)" if plan.remote_output else ""))
        short = plan.shortfalls()
        lines.append("  does not fit: " + "; ".join(short) if short else "  fits this machine")
    lines += [f"  note: {n}" for n in plan.notes]
    return "\n".join(lines)


# --- the stages -------------------------------------------------------------------------------


def _stage_needs(run: PartitionConfig, s: RunShape) -> list[tuple[str, Need]]:
    """The stages of a partition run, in order, with what each declares it holds."""
    # No degrees stage: the validator's edge pass counts them and partition() reuses them.
    attributes = column_needs(run, s) if run.attr_column else kmeans_needs(run, s)
    needs = [("validate", validate_needs(run, s)), ("attribute clustering", attributes)]
    if run.algo == "metis":
        needs.append(("metis", metis_needs(s)))
    elif run.uses_communities:
        needs.append(("structural clustering", clustering_needs(run, s)))
    if run.uses_communities:
        needs.append(("mapping", mapping_needs(s)))
    needs.append(("assignment", assignment_needs(run, s)))
    if run.uses_two_phase_fallback:
        # It starts beside attribute clustering and runs on beside clustering, mapping, assignment.
        asep_peak = max(need.driver for name, need in needs[1:])
        needs.append(("two-phase fallback", fallback_needs(run, s, asep_peak)))
    # The state is written on a driver thread beside the route and the edge stores.
    state = state_needs(run, s)
    node_map = node_map_needs(s)
    needs += [("masters", masters_needs(run, s)),
              ("metrics", metrics_needs(run, s)), ("state", state), ("route", replace(route_needs(s), driver=state.driver)),
              ("finalize edges", replace(finalize_edges_needs(s), driver=state.driver)),
              # The node map is built on a driver thread beside the node rows' sweep.
              ("finalize nodes", replace(finalize_nodes_needs(s), driver=node_map.driver)),
              ("node map", node_map)]
    return needs


def _compose(needs: list[tuple[str, Need]], *, base: int, workers: int, threads: int,
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
    replication_factor: float | RFEstimate | None = None,
    driver_base: int | None = None,
    feature_ratio: float = 1.0,
    feature_rows: int = 0,
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
        A known RF (``--plan-rf``, from an earlier run), an estimate
        (:func:`asepr.pipeline.planning.plan_inputs.estimate_rf`), or None for random hashing's bound
        at the mean degree (:func:`planning_rf`).
    driver_base
        The driver process's resident bytes before the run (default
        :data:`DRIVER_BASE`, a fresh ``asepr`` process).
    feature_ratio, feature_rows
        How many times smaller the stores hold the features than float32
        (:func:`asepr.pipeline.planning.plan_inputs.feature_store_ratio`), and the rows it was
        measured on; the default 1.0 is the most disk they can take.

    Returns
    -------
    RunPlan
    """
    run = config.effective()
    undirected = sizes.undirected if run.undirected is None else bool(run.undirected)
    if replication_factor is None:
        rf, rf_source = planning_rf(sizes.num_nodes, sizes.num_edges, run.num_parts), \
            "random hashing at the mean degree, an upper bound for the streaming algorithms"
    elif isinstance(replication_factor, RFEstimate):
        rf, rf_source = replication_factor.value, "estimated: " + replication_factor.source
    elif not 1.0 <= replication_factor <= max(1, run.num_parts):
        raise InputError(format_problem("--plan-rf", f"a replication factor in [1, k = {run.num_parts}]",
                                        repr(replication_factor)))
    else:
        rf, rf_source = float(replication_factor), "given with --plan-rf"
    d = max(1, sizes.feat_dim)
    d_emb = run.projection_dim if d > run.projection_threshold else d
    shape = RunShape(
        n=sizes.num_nodes, e=sizes.num_edges, k=run.num_parts, epsilon=run.epsilon, d=d, d_emb=d_emb,
        b=min(run.batch_rows, max(1, sizes.max_edge_shard_rows)), rf=rf,
        halo_copies=(2.0 if undirected else 1.0) if halo else 0.0,
        n_s=max(1, sizes.max_node_shard_rows), e_s=max(1, sizes.max_edge_shard_rows),
        node_shards=max(1, sizes.node_shards), edge_shards=max(1, sizes.edge_shards),
        node_read=NODE_READ_FACTOR * sizes.max_node_shard_bytes,
        label_threads=label_threads(),
        sweeps=workers or 1,
        ways=max(1, min(stream_ways(), max(1, sizes.edge_shards))),
        x_ratio=max(1.0, float(feature_ratio)),
        top_share=max(run.shares) if run.shares else 0.0,
    )
    threads = threads or os.cpu_count() or 1
    needs = _stage_needs(run, shape)
    base = DRIVER_BASE if driver_base is None else int(driver_base)
    stages = _compose(needs, base=base, workers=workers, threads=threads, remote=remote)
    # Everything staged coexists until the commit, but for what a stage removes (after
    # its own writes): the peak over the stages.
    staging = on_disk = scratch = stored = 0.0
    for name, need in needs:
        on_disk += need.written
        staging = max(staging, on_disk)
        stored += need.kept if name in STORE_STAGES else 0.0
        scratch = max(scratch, on_disk - stored)
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
        staging_bytes=int(staging), committed_bytes=int(committed), scratch_bytes=int(scratch), notes=tuple(notes),
        feature_ratio=shape.x_ratio, feature_rows=int(feature_rows),
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
    scratch: str | Path | None = None,
) -> RunPlan:
    """The plan of ``asepr partition SOURCE OUT`` on this machine, with its free resources.

    Reads ``meta.json``, the Parquet footers, about one store chunk of node rows (the
    features' stored size) and up to :data:`asepr.pipeline.planning.plan_inputs.SAMPLE_EDGES` edge
    rows (the replication factor, unless ``replication_factor`` is given) of
    ``source``, and writes nothing.

    Parameters
    ----------
    source
        The input directory (or an opened :class:`~asepr.storage.inputs.directory.InputDir`).
    out
        The output directory (it need not exist): its filesystem's free disk is checked;
        for an object-store URL, the free disk of the local ``scratch`` directory.
    config, halo, workers, remote, replication_factor
        As :func:`plan_run`; ``config`` is resolved against the input's ``meta.json``.

    Returns
    -------
    RunPlan
    """
    base = process_baseline()  # before the samples load the kernels (KERNELS_BASE counts them)
    source = open_input(source, storage_options)
    sizes = input_sizes(source)
    resolved = config.resolved(source)
    ratio, rows = feature_store_ratio(source, sizes.feat_dim)
    rf = replication_factor if replication_factor is not None else estimate_rf(source, resolved, sizes)
    plan = plan_run(sizes, resolved, halo=halo, workers=workers, remote=remote, replication_factor=rf,
                    driver_base=base, feature_ratio=ratio, feature_rows=rows)
    return plan.with_resources(out, remote_output=not is_local_url(out, storage_options), scratch=scratch)


# --- the resources and the check ----------------------------------------------------------------


def process_baseline() -> int:
    """The driver's baseline if this process runs the partitioning: its resident bytes
    now plus :data:`KERNELS_BASE`."""
    import psutil

    return int(psutil.Process().memory_info().rss) + KERNELS_BASE


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
