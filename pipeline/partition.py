"""``asepr.pipeline.partition``: the whole ASEP (or baseline) run, stage by stage.

Stages (docs/design.md#data-flow): validate → ② degrees (Dask) → ③ attribute clusters (Dask) →
④ structural clusters (stream) → ⑤ community → partition map → ⑥ edge assignment
(stream) → masters (stream) → metrics (stream). Nothing holds all edges: the
streaming stages keep O(N) state and the edge → partition result goes to disk, one
``int16`` array per input edge shard, aligned with the shard's rows.

The input is opened once (:func:`asepr.storage.inputs.directory.open_input`) and its shards passed to
every stage. The Dask stages run on ``client`` when given and on dask's threaded
scheduler otherwise; setting up a cluster (``LocalCluster``, a scheduler address) is
the caller's business (``workflows``).
"""

from __future__ import annotations

import logging
import os
import shutil
import tempfile
import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from asepr.pipeline.assign import (
    AssignState,
    EdgePartSink,
    KernelSettings,
    edge_parts_path,
    iter_assigned,
    stream_assign,
)
from asepr.pipeline.assign.hybrid import HybridInfo, assignment_needs, hybrid_stream_assign
from asepr.pipeline.assign.restream import restream_assign
from asepr.pipeline.config import PartitionConfig
from asepr.pipeline.planning.needs import Need, RunShape
from asepr.pipeline.stages.attr_cluster import AttrClusters, attribute_clusters
from asepr.pipeline.stages.attr_column import column_clusters
from asepr.pipeline.stages.attr_lift import AttributeLift, attribute_lift
from asepr.pipeline.stages.degrees import Degrees, compute_degrees
from asepr.pipeline.stages.mapping import CommunityMapping, attr_homes, map_communities, vertex_terms
from asepr.pipeline.stages.master_pass import stream_masters
from asepr.pipeline.stages.masters import master_miss, popcounts
from asepr.pipeline.stages.metis import metis_membership
from asepr.pipeline.stages.metrics import drift_metrics, locality_batch, partition_metrics, share_metrics
from asepr.pipeline.stages.struct_cluster import (
    Communities,
    clustering_needs,
    published_clusters,
    structural_clusters,
)
from asepr.pipeline.stream import iter_edge_batches, map_shard_ranges
from asepr.storage.errors import InputError, format_problem
from asepr.storage.inputs.directory import InputDir, open_input, open_parquet
from asepr.storage.inputs.node_table import NodeTable
from asepr.storage.inputs.npy import load_npy
from asepr.storage.integrity.report import ValidationReport
from asepr.storage.integrity.validate import validate_input
from asepr.storage.locations.fs import Shard
from asepr.storage.partitions.reader import read_node_column
from asepr.storage.resources import StageClock, peak_rss_bytes, stage

__all__ = ["Assignment", "fallback_needs", "partition"]

log = logging.getLogger(__name__)


@dataclass
class Assignment:
    """The result of a partitioning run: edge → partition (on disk), vertex state, metrics."""

    config: PartitionConfig
    num_nodes: int
    num_edges: int
    edge_shards: list[Shard]
    node_shards: list[Shard]
    workdir: str
    degree: np.ndarray
    replicas: np.ndarray
    loads: np.ndarray
    master: np.ndarray
    attr: AttrClusters
    communities: Communities | None
    mapping: CommunityMapping | None
    metrics: dict[str, Any]
    timings: dict[str, float] = field(default_factory=dict)
    owns_workdir: bool = False
    #: Labels per node (-1 unknown), for the metrics and the persisted state.
    labels: np.ndarray | None = None
    #: The kernel settings as run: incremental ingest continues with the same ones.
    kernel: KernelSettings | None = None
    #: (local, total) 1-hop incidences behind ``metrics["one_hop_locality"]``.
    locality: tuple[int, int] = (0, 0)

    def edge_parts(self, shard_index: int) -> np.ndarray:
        """Partition id of every row of edge shard ``shard_index`` (memory-mapped)."""
        return load_npy(edge_parts_path(self.workdir, shard_index), mmap_mode="r")

    def iter_assigned(self, batch_rows: int = 1 << 20):
        """Yield ``(src, dst, part)`` batches in stream order."""
        return iter_assigned(self.edge_shards, self.workdir, batch_rows)

    def close(self) -> None:
        if self.owns_workdir:
            shutil.rmtree(self.workdir, ignore_errors=True)

    def __enter__(self) -> "Assignment":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


@dataclass
class _Steering:
    """What steers the kernel besides the degrees: attribute weights, communities, homes."""

    alpha: float
    beta: float
    keep_attr_together: bool
    lift: AttributeLift | None = None
    communities: Communities | None = None
    mapping: CommunityMapping | None = None
    #: Per vertex: its community's partition and volume, its attribute cluster's home.
    vertex_part: np.ndarray | None = None
    vertex_volume: np.ndarray | None = None
    vertex_home: np.ndarray | None = None
    #: The two-phase fallback's outcome (:func:`_two_phase_fallback`), when it ran.
    fallback: dict[str, Any] | None = None
    #: The restream's replicas per pass and the pass kept (``Restream.as_metrics``).
    restream: dict[str, Any] | None = None
    #: What the hybrid held (``memory_budget > 0``; kept even when the fallback won).
    hybrid: HybridInfo | None = None
    #: Bytes of the assignment kernel's packed per-vertex rows.
    state_bytes: int = 0
    #: The chosen stream's masters and rows, when the fallback chose by them (shares).
    masters: tuple[np.ndarray, np.ndarray] | None = None


# --- the stages -------------------------------------------------------------------------------


def _config_for(num_parts: int | None, algo: str | None, config: PartitionConfig | None) -> PartitionConfig:
    if config is None:
        if num_parts is None:
            raise ValueError("partition() needs num_parts or config")
        return PartitionConfig(num_parts=num_parts, algo=algo or "asep")
    if num_parts is not None or algo is not None:
        return replace(config, num_parts=num_parts or config.num_parts, algo=algo or config.algo)
    return config


def _num_nodes(source: InputDir, report: ValidationReport | None) -> int:
    if report is not None:
        return report.num_nodes
    if source.num_nodes is None:
        raise InputError(
            format_problem(
                f"input {source.url}",
                "a validation report or 'num_nodes' in meta.json when validate=False",
                "neither",
                "call partition() with validate=True (the default).",
            )
        )
    return int(source.num_nodes)


def _attribute_clusters(run: PartitionConfig, source: InputDir, num_nodes: int, client) -> AttrClusters:
    """③: a categorical column's values, or k-means of the features."""
    if run.attr_column:
        return column_clusters(source.node_shards, num_nodes, run.attr_column, client=client)
    return attribute_clusters(
        source.node_shards, num_nodes, run.attr_clusters, seed=run.seed,
        max_passes=run.kmeans_max_passes, tol=run.kmeans_tol,
        sample_size=run.kmeans_sample, projection_dim=run.projection_dim,
        projection_threshold=run.projection_threshold, client=client, table=source.node_table,
    )


def _attribute_weights(run: PartitionConfig, edge_shards: list[Shard], degree: np.ndarray,
                       attr_ids: np.ndarray) -> _Steering:
    """alpha, beta and keep-together, scaled by the measured attribute lift (ASEP only)."""
    steering = _Steering(alpha=run.alpha, beta=run.beta, keep_attr_together=run.keep_attr_together)
    if run.uses_attributes:
        # Measured and reported always (a 2M-edge prefix); it scales the attribute
        # weights only when lift_reference > 0.
        lift = attribute_lift(edge_shards, degree, attr_ids, batch_rows=run.batch_rows)
        factor = lift.scale(run.lift_reference)
        steering.lift = lift
        steering.alpha, steering.beta = run.alpha * factor, run.beta * factor
        steering.keep_attr_together = run.keep_attr_together and factor > 0
        log.info(
            "attribute lift %.3f (homophily %.3f, chance %.3f): alpha %.3f, beta %.3f",
            lift.lift, lift.homophily, lift.chance, steering.alpha, steering.beta,
        )
    return steering


def _communities(run: PartitionConfig, edge_shards: list[Shard], degree: np.ndarray, attr_ids: np.ndarray,
                 steering: _Steering, clock: StageClock) -> None:
    """④ and ⑤ (or the METIS reference): the per-vertex terms of ``steering``."""
    k = run.num_parts
    if run.uses_communities:
        published = not run.uses_attributes  # 2ps-l, 2ps-hdrf
        if published:
            communities = published_clusters(edge_shards, degree, k, batch_rows=run.batch_rows)
        else:
            communities = structural_clusters(
                edge_shards, degree, attr_ids, k, steering.alpha,
                passes=run.cluster_passes, batch_rows=run.batch_rows,
            )
        clock.add("clustering kernel", communities.kernel_seconds)
        clock.tick("structural clustering")
        mapping = map_communities(
            communities.volume, attr_ids, k, epsilon=run.epsilon,
            keep_attr_together=run.uses_attributes and steering.keep_attr_together,
            community_id=communities.community_id, degree=degree, higher_id_first=published, shares=run.shares,
        )
        steering.communities, steering.mapping = communities, mapping
        steering.vertex_part, steering.vertex_volume, steering.vertex_home = vertex_terms(
            mapping, communities.community_id, communities.volume, attr_ids if run.uses_attributes else None)
        clock.tick("mapping")
    elif run.algo == "metis":
        steering.vertex_part = metis_membership(edge_shards, len(degree), k, run.seed, run.batch_rows,
                                                shares=run.shares)
        steering.vertex_volume = degree
        clock.tick("metis")


def _assign(run: PartitionConfig, edge_shards: list[Shard], degrees: Degrees, steering: _Steering,
            workdir: Path, clock: StageClock, attr_ids: np.ndarray | None = None
            ) -> tuple[np.ndarray, np.ndarray, KernelSettings]:
    """⑥: stream every edge through the kernel, or with ``run.memory_budget`` the hybrid
    (:func:`~asepr.pipeline.assign.hybrid.hybrid_stream_assign`); returns ``(replicas, loads, settings)``."""
    settings = KernelSettings.for_run(run, degrees.num_edges, alpha=steering.alpha, beta=steering.beta,
                                      keep_attr_together=steering.keep_attr_together)
    state = AssignState(run.num_parts, degrees.degree, steering.vertex_part, steering.vertex_volume,
                        steering.vertex_home)
    steering.vertex_part = steering.vertex_volume = steering.vertex_home = None  # copied into the rows
    steering.state_bytes = int(state.vstate.nbytes)
    sink = EdgePartSink(workdir, [open_parquet(s).metadata.num_rows for s in edge_shards])
    if run.memory_budget > 0:
        info = hybrid_stream_assign(state, edge_shards, degrees.degree, settings, sink,
                                    budget_bytes=run.memory_budget, attr_ids=attr_ids, batch_rows=run.batch_rows)
        steering.hybrid = info
        seconds = info.kernel_seconds
        clock.add("expansion", info.expansion_seconds)
    else:
        batches = lambda: iter_edge_batches(edge_shards, run.batch_rows)  # noqa: E731
        if run.uses_restream:
            state, seconds, record = restream_assign(
                state, batches, settings, sink,
                lambda directory, replicas: stream_masters(edge_shards, directory, replicas, run,
                                                           degrees.num_edges)[0],
                passes=run.restream_passes)
            steering.restream = record.as_metrics()
        else:
            seconds = stream_assign(state, batches, settings, sink)
    clock.add("assignment kernel", seconds)
    clock.tick("assignment")
    # Keep the O(N*W) replica bitsets only; the packed rows go with the state.
    return state.replicas, state.loads, settings


@dataclass
class _FallbackStream:
    """2PS-HDRF's stream of the two-phase fallback, as it finished in ``directory``."""

    steering: _Steering
    directory: Path
    result: tuple[np.ndarray, np.ndarray, KernelSettings]
    timings: dict[str, float]
    seconds: float


def _fallback_stream(run: PartitionConfig, edge_shards: list[Shard], degrees: Degrees,
                     workdir: Path) -> _FallbackStream:
    """Cluster and stream the edges as 2PS-HDRF does, its edge partitions in a new
    subdirectory of ``workdir`` (removed on an error).

    Nothing here needs the attribute clusters (2PS-HDRF packs communities by volume
    alone), so the stream can start before they exist; its mapping's attribute homes
    are left for :func:`_two_phase_fallback` to place.
    """
    start = time.perf_counter()
    alt_run = run.two_phase_config()
    alt = _Steering(alpha=0.0, beta=0.0, keep_attr_together=False)
    alt_dir = Path(tempfile.mkdtemp(prefix="two-phase-fallback-", dir=workdir))
    alt_clock = StageClock()
    try:
        _communities(alt_run, edge_shards, degrees.degree, None, alt, alt_clock)
        result = _assign(alt_run, edge_shards, degrees, alt, alt_dir, alt_clock)
    except BaseException:
        shutil.rmtree(alt_dir, ignore_errors=True)
        raise
    return _FallbackStream(alt, alt_dir, result, alt_clock.timings, time.perf_counter() - start)


class _Fallback:
    """The two-phase fallback's stream, on a thread beside ASEP's own (``concurrent``) or
    run when :meth:`finish` asks for it.

    It needs no attribute clusters, so the thread starts before ASEP's k-means. Both
    streams are sequential and their kernels release the GIL, so on a machine with a
    spare core the fallback costs about the wall time by which it outlasts ASEP's
    k-means, clustering and stream, not its own (20M-edge ``asepr synth`` graph, k = 16,
    ``docs/results/scale``). The price is memory: both O(|V|) kernel states live at once
    (:mod:`asepr.pipeline.planning.plan` models it). The result does not depend on the order.
    """

    def __init__(self, run: PartitionConfig, edge_shards: list[Shard], degrees: Degrees, workdir: Path):
        self._args = (run, edge_shards, degrees, workdir)
        self._pool: ThreadPoolExecutor | None = None
        self._future: Future | None = None
        if run.concurrent_fallback:
            self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="asepr-two-phase-fallback")
            self._future = self._pool.submit(_fallback_stream, *self._args)

    def finish(self) -> _FallbackStream:
        """The finished stream (waiting for the thread, or running it now)."""
        if self._future is None:
            return _fallback_stream(*self._args)
        try:
            return self._future.result()
        finally:
            self.close()

    def close(self) -> None:
        """Wait for a running thread (it writes under the workdir) and drop it; after an
        error elsewhere its own result or error is discarded."""
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None


def _by_master_shares(run: PartitionConfig, edge_shards: list[Shard], degrees: Degrees, steering: _Steering,
                      streams: dict[str, tuple[Path, np.ndarray]], chosen: str) -> str:
    """With shares *(our choice)*: the stream whose masters can follow the shares within
    epsilon wins over one whose cannot (a stream that leaves too many vertices on one
    partition alone forces their masters there), else ``chosen`` stays. Keeps the
    winner's masters and rows in ``steering.masters`` for the masters stage."""
    found = {name: stream_masters(edge_shards, directory, replicas, run, degrees.num_edges)
             for name, (directory, replicas) in streams.items()}
    miss = {name: master_miss(master, run.shares) for name, (master, _) in found.items()}
    fits = {name: value <= run.epsilon for name, value in miss.items()}
    if fits["asep"] != fits["2ps-hdrf"]:
        chosen = "asep" if fits["asep"] else "2ps-hdrf"
        log.info("masters: only the %s stream's follow the shares within %g: keeping it", chosen, run.epsilon)
    steering.masters = found[chosen]
    steering.fallback.update(asep_master_miss=miss["asep"], two_phase_master_miss=miss["2ps-hdrf"])
    return chosen


def _two_phase_fallback(fallback: _Fallback, degrees: Degrees, attr_ids: np.ndarray, steering: _Steering,
                        workdir: Path, clock: StageClock, own: tuple[np.ndarray, np.ndarray, KernelSettings],
                        run: PartitionConfig, edge_shards: list[Shard]) -> tuple[np.ndarray, np.ndarray, KernelSettings]:
    """Keep 2PS-HDRF's assignment (:class:`_Fallback`) if it replicates fewer vertices
    (with shares, :func:`_by_master_shares` first).

    ``own`` is ASEP's ``(replicas, loads, settings)``, its edge partitions in
    ``workdir``. When the two-phase stream wins, its files replace them and
    ``steering`` takes its communities and mapping (an ingest continues with them and
    with its settings, as it would for a ``2ps-hdrf`` output); on a tie ASEP's stays.
    """
    alt = fallback.finish()
    try:
        # Its kernels' own time and its stream's wall time, beside ASEP's; the stage's
        # wall time (what the fallback added to the run's) is ticked below.
        for name in ("clustering kernel", "assignment kernel"):
            clock.add(f"fallback {name}", alt.timings.get(name, 0.0))
        clock.add("fallback stream", alt.seconds)
        alt_replicas, alt_loads, alt_settings = alt.result
        replicas_own, replicas_alt = int(popcounts(own[0]).sum()), int(popcounts(alt_replicas).sum())
        chosen = "2ps-hdrf" if replicas_alt < replicas_own else "asep"
        log.info("replicas: ASEP's stream %d, the two-phase stream %d: keeping %s", replicas_own, replicas_alt,
                 chosen)
        covered = max(1, int(np.count_nonzero(degrees.degree)))
        steering.fallback = {"chosen": chosen, "asep_rf": replicas_own / covered,
                             "two_phase_rf": replicas_alt / covered}
        if run.shares is not None:
            chosen = _by_master_shares(run, edge_shards, degrees, steering,
                                       {"asep": (workdir, own[0]), "2ps-hdrf": (alt.directory, alt_replicas)}, chosen)
            steering.fallback["chosen"] = chosen
        if chosen == "asep":
            return own
        for part_file in alt.directory.glob("edge-parts-*.npy"):
            os.replace(part_file, workdir / part_file.name)
        steering.alpha, steering.beta, steering.keep_attr_together = 0.0, 0.0, False
        communities, mapping = alt.steering.communities, alt.steering.mapping
        homes = attr_homes(mapping.community_part, attr_ids, communities.volume, len(alt_loads),
                           communities.community_id, degrees.degree)
        steering.communities, steering.mapping = communities, replace(mapping, attr_home=homes)
        return alt_replicas, alt_loads, alt_settings
    finally:
        shutil.rmtree(alt.directory, ignore_errors=True)
        clock.tick("two-phase fallback")


def _locality(edge_shards: list[Shard], rows: np.ndarray, batch_rows: int) -> tuple[int, int]:
    """(local, total) 1-hop incidences (:func:`~asepr.pipeline.stages.metrics.locality_batch`
    of the rows :func:`~asepr.pipeline.stages.master_pass.stream_masters` returns), ranges of the stream on threads."""
    def count(shards: range) -> tuple[int, int]:
        local = total = 0
        for batch in iter_edge_batches(edge_shards[shards.start:shards.stop], batch_rows, first_shard=shards.start):
            a, b = locality_batch(batch.src, batch.dst, rows, rows[:, -1])
            local += a
            total += b
        return local, total

    sums = map_shard_ranges(edge_shards, count)
    return sum(a for a, _ in sums), sum(b for _, b in sums)


def _measure(result: Assignment, rows: np.ndarray, attr_ids: np.ndarray, steering: _Steering,
             table: NodeTable | None) -> None:
    """The metrics of ``result`` (its ``metrics``, ``labels`` and ``locality``; ``rows`` from
    :func:`~asepr.pipeline.stages.master_pass.stream_masters`); the labels from ``table`` when there is one."""
    run = result.config
    with stage("metrics", log):
        local, total = _locality(result.edge_shards, rows, run.batch_rows)
        labels = (table.column("y") if table is not None
                  else read_node_column(result.node_shards, result.num_nodes, "label"))
        result.metrics = partition_metrics(
            result.replicas, result.loads, result.master, attr_ids, labels, (local, total)
        )
    result.labels = labels
    result.locality = (int(local), int(total))
    result.metrics["cap"] = result.kernel.cap
    result.metrics["drift"] = drift_metrics(
        result.loads, run.epsilon,
        steering.mapping.community_part if steering.mapping is not None else None,
        steering.communities.volume if steering.communities is not None else None, shares=run.shares,
    )
    if run.shares is not None:
        result.metrics["capacity"] = share_metrics(result.loads, result.metrics["masters"], run.shares)
    if steering.lift is not None:
        result.metrics["attribute_lift"] = {
            "lift": steering.lift.lift, "homophily": steering.lift.homophily, "chance": steering.lift.chance,
            "alpha_effective": steering.alpha, "beta_effective": result.kernel.beta,
        }
    if steering.restream is not None:
        result.metrics["restream"] = steering.restream
    if steering.fallback is not None:
        result.metrics["two_phase_fallback"] = steering.fallback
    if steering.hybrid is not None:
        result.metrics["hybrid"] = asdict(steering.hybrid)
    # The assignment's memory: the kernel's O(|V|) rows plus what the hybrid held.
    held = steering.hybrid.held_bytes if steering.hybrid is not None else 0
    result.metrics["assignment_memory_bytes"] = steering.state_bytes + held


# --- the run ------------------------------------------------------------------------------------


def partition(
    input_url: str | Path | InputDir,
    num_parts: int | None = None,
    *,
    algo: str | None = None,
    config: PartitionConfig | None = None,
    client=None,
    workdir: str | Path | None = None,
    attr: AttrClusters | None = None,
    degrees: Degrees | None = None,
    validate: bool = True,
    report: ValidationReport | None = None,
    storage_options: dict | None = None,
) -> Assignment:
    """Partition the input at ``input_url`` into k parts.

    Parameters
    ----------
    input_url
        An input directory (``edges/``, ``nodes/``, optional ``meta.json``), or one
        already opened (:func:`asepr.storage.inputs.directory.open_input`).
    num_parts, algo
        Shorthands for ``config.num_parts`` and ``config.algo``.
    config
        The full configuration (:class:`PartitionConfig`).
    client
        A ``distributed.Client`` for the Dask stages; None uses the threaded scheduler.
    workdir
        Where the edge → partition arrays go (a temporary directory, removed by
        ``Assignment.close()``, when None).
    attr, degrees
        Precomputed attribute clusters and degrees to reuse (benchmarks run many
        algorithms on one input).
    validate
        Run the streaming validator first (bad input fails before any work).
    report
        A validation report the caller already has; skips the validator.

    Returns
    -------
    Assignment
    """
    clock = StageClock()
    source = open_input(input_url, storage_options)
    config = _config_for(num_parts, algo, config).resolved(source)
    if report is None and validate:
        report = validate_input(source, undirected=config.undirected, check_duplicates=False)
    clock.tick("validate")
    num_nodes = _num_nodes(source, report)
    run = config.effective()
    if degrees is None and report is not None and report.degree is not None:
        # The validator's edge pass counted them already (the same rule as compute_degrees).
        degrees = Degrees(degree=report.degree, num_nodes=num_nodes, num_edges=report.num_edges)
    if degrees is None:
        degrees = compute_degrees(source.edge_shards, num_nodes, client=client, batch_rows=run.batch_rows)
    clock.tick("degrees")
    owns = workdir is None
    workdir = Path(tempfile.mkdtemp(prefix="asepr-assign-") if owns else workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    # The fallback's stream needs no attribute clusters: it starts beside their k-means.
    fallback = (_Fallback(run, source.edge_shards, degrees, workdir)
                if run.uses_two_phase_fallback else None)
    try:
        if attr is None:
            attr = _attribute_clusters(run, source, num_nodes, client)
        attr_ids = np.ascontiguousarray(attr.attr_cluster_id, dtype=np.int32)
        clock.tick("attribute clustering")
        steering = _attribute_weights(run, source.edge_shards, degrees.degree, attr_ids)
        _communities(run, source.edge_shards, degrees.degree, attr_ids, steering, clock)
        replicas, loads, settings = _assign(run, source.edge_shards, degrees, steering, workdir, clock,
                                            attr_ids if run.uses_attributes else None)
        if fallback is not None:
            replicas, loads, settings = _two_phase_fallback(fallback, degrees, attr_ids, steering, workdir, clock,
                                                            (replicas, loads, settings), run, source.edge_shards)
        master, rows = steering.masters or stream_masters(source.edge_shards, workdir, replicas, run,
                                                           degrees.num_edges)
        steering.masters = None
        clock.tick("masters")
        result = Assignment(
            config=run, num_nodes=num_nodes, num_edges=degrees.num_edges, edge_shards=source.edge_shards,
            node_shards=source.node_shards, workdir=str(workdir), degree=degrees.degree,
            replicas=replicas, loads=loads, master=master, attr=attr,
            communities=steering.communities, mapping=steering.mapping, metrics={},
            timings=clock.timings, owns_workdir=owns, kernel=settings,
        )
        _measure(result, rows, attr_ids, steering, source.node_table)
        del rows
        clock.tick("metrics")
        result.metrics["peak_rss_bytes"] = peak_rss_bytes()
        return result
    except BaseException:
        if fallback is not None:
            fallback.close()  # its thread writes under workdir
        if owns:
            shutil.rmtree(workdir, ignore_errors=True)
        raise


def fallback_needs(run: PartitionConfig, s: RunShape, asep_peak: float) -> Need:
    """Memory and disk of the two-phase fallback (ASEP): 2PS-HDRF's clustering and
    two-phase assignment, its edge partitions and first-phase file in a subdirectory
    (the first phase and the losing stream's partitions are removed).

    ``concurrent_fallback`` (default) runs it on a thread beside ASEP's attribute
    clustering, clustering, mapping and stream, so its largest step adds to
    ``asep_peak``, the largest of those (``degree`` is shared); sequentially it runs after
    them beside ASEP's ``replicas`` uint64[N, W] and communities (``community_id``,
    ``volume`` int64[N])."""
    twops = run.two_phase_config()
    own = max(clustering_needs(twops, s).driver, assignment_needs(twops, s).driver)
    if run.concurrent_fallback:
        driver = asep_peak + own - 12 * s.n
    else:
        driver = 8 * s.words * s.n + 16 * s.n + own
    return Need(driver=driver, written=4 * s.e, removed=4 * s.e)
