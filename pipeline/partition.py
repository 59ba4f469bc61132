"""``pipeline.partition``: the whole ASEP (or baseline) run, stage by stage.

Stages (DESIGN §1): validate → ② degrees (Dask) → ③ attribute clusters (Dask) →
④ structural clusters (stream) → ⑤ community → partition map → ⑥ edge assignment
(stream) → masters (stream) → metrics (stream). Nothing holds all edges: the
streaming stages keep O(N) state and the edge → partition result goes to disk, one
``int16`` array per input edge shard, aligned with the shard's rows.

The Dask stages run on ``client`` when given and on dask's threaded scheduler
otherwise; setting up a cluster (``LocalCluster``, a scheduler address) is the
caller's business (``workflows``).
"""

from __future__ import annotations

import logging
import shutil
import tempfile
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from pipeline.assign import MODES, AssignState
from pipeline.stages.attr_cluster import AttrClusters, attribute_clusters
from pipeline.stages.attr_column import column_clusters
from pipeline.stages.attr_lift import attribute_lift
from pipeline.config import PartitionConfig
from pipeline.stages.degrees import Degrees, compute_degrees
from pipeline.stages.mapping import CommunityMapping, map_communities
from pipeline.stages.masters import choose_masters, count_edges_per_replica, replica_offsets
from pipeline.stages.metrics import drift_metrics, locality_batch, partition_metrics
from pipeline.stream import iter_edge_batches, warmup_arrays
from pipeline.stages.struct_cluster import Communities, structural_clusters
from storage.errors import InputError, format_problem
from storage.fs import Shard, discover_shards
from storage.reader import read_node_column
from storage.resources import peak_rss_bytes, stage
from storage.input import input_paths, open_parquet, read_meta
from storage.report import ValidationReport
from storage.validate import validate_input

__all__ = ["Assignment", "edge_cap", "kernel_mode", "partition"]

log = logging.getLogger(__name__)


def edge_cap(num_edges: int, num_parts: int, epsilon: float) -> int:
    """The hard per-partition edge cap ``ceil((1 + epsilon) |E| / k)``."""
    return int(np.ceil((1.0 + epsilon) * num_edges / num_parts))


def kernel_mode(config: PartitionConfig) -> tuple[int, bool]:
    """``(mode, use_partial)`` of :func:`pipeline.assign.assign_batch` for an (effective) config."""
    if config.algo in ("asep", "2ps-l", "2ps-hdrf", "metis"):
        mode = MODES["all"] if config.scoring == "hdrf" else MODES["candidates"]
    elif config.algo == "hdrf":
        mode = MODES["all"]
    else:
        mode = MODES[config.algo]
    return mode, config.algo == "hdrf"


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
    #: The kernel settings as run (mode, use_partial, the lift-scaled alpha and beta,
    #: lam, seed, epsilon): incremental ingest continues with the same ones.
    kernel: dict[str, Any] = field(default_factory=dict)
    #: (local, total) 1-hop incidences behind ``metrics["one_hop_locality"]``.
    locality: tuple[int, int] = (0, 0)

    def edge_parts(self, shard_index: int) -> np.ndarray:
        """Partition id of every row of edge shard ``shard_index`` (memory-mapped)."""
        return np.load(Path(self.workdir) / f"edge-parts-{shard_index:05d}.npy", mmap_mode="r")

    def iter_assigned(self, batch_rows: int = 1 << 20):
        """Yield ``(src, dst, part)`` batches in stream order."""
        for batch in iter_edge_batches(self.edge_shards, batch_rows):
            parts = self.edge_parts(batch.shard_index)
            yield batch.src, batch.dst, np.asarray(parts[batch.row0 : batch.row0 + len(batch.src)])

    def close(self) -> None:
        if self.owns_workdir:
            shutil.rmtree(self.workdir, ignore_errors=True)

    def __enter__(self) -> "Assignment":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _metis_membership(edge_shards: list[Shard], degree: np.ndarray, num_parts: int, seed: int, batch_rows: int) -> np.ndarray:
    import pymetis

    n = len(degree)
    # In-memory CSR of the symmetrised graph: metis is a small-graph reference only.
    srcs, dsts = [], []
    for batch in iter_edge_batches(edge_shards, batch_rows):
        keep = batch.src != batch.dst
        srcs.append(batch.src[keep])
        dsts.append(batch.dst[keep])
    src = np.concatenate(srcs + [np.zeros(0, np.int64)])
    dst = np.concatenate(dsts + [np.zeros(0, np.int64)])
    a = np.concatenate([src, dst])
    b = np.concatenate([dst, src])
    key = np.unique(a * n + b)
    a, b = key // n, key % n
    xadj = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(np.bincount(a, minlength=n), out=xadj[1:])
    if num_parts == 1:
        return np.zeros(n, dtype=np.int32)
    opts = pymetis.Options(seed=seed)
    adjacency = pymetis.CSRAdjacency(xadj, b) if hasattr(pymetis, "CSRAdjacency") else None
    if adjacency is not None:
        _, membership = pymetis.part_graph(num_parts, adjacency, options=opts)
    else:
        _, membership = pymetis.part_graph(num_parts, xadj=xadj, adjncy=b, options=opts)
    return np.asarray(membership, dtype=np.int32)


def _resolve_inputs(input_url, storage_options):
    edges_url, nodes_url = input_paths(input_url)
    edge_shards = discover_shards(edges_url, what="edge shards", storage_options=storage_options)
    node_shards = discover_shards(nodes_url, what="node shards", storage_options=storage_options)
    return edge_shards, node_shards


def partition(
    input_url: str | Path,
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
        An input directory (``edges/``, ``nodes/``, optional ``meta.json``).
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
    if config is None:
        if num_parts is None:
            raise ValueError("partition() needs num_parts or config")
        config = PartitionConfig(num_parts=num_parts, algo=algo or "asep")
    elif num_parts is not None or algo is not None:
        config = replace(config, num_parts=num_parts or config.num_parts, algo=algo or config.algo)
    timings: dict[str, float] = {}
    clock = time.perf_counter()

    def tick(name: str) -> None:
        nonlocal clock
        now = time.perf_counter()
        timings[name] = timings.get(name, 0.0) + now - clock
        clock = now

    meta = read_meta(input_url, storage_options) or {}
    if config.undirected is None:
        config = replace(config, undirected=bool(meta.get("undirected", False)))
    if report is None and validate:
        report = validate_input(
            input_url, undirected=config.undirected, check_duplicates=False,
            storage_options=storage_options,
        )
    tick("validate")
    edge_shards, node_shards = _resolve_inputs(input_url, storage_options)
    if report is None and "num_nodes" not in meta:
        raise InputError(
            format_problem(
                f"input {input_url}",
                "a validation report or 'num_nodes' in meta.json when validate=False",
                "neither",
                "call partition() with validate=True (the default).",
            )
        )
    num_nodes = report.num_nodes if report else int(meta["num_nodes"])
    k = config.num_parts
    run = config.effective()

    if degrees is None:
        degrees = compute_degrees(edge_shards, num_nodes, client=client, batch_rows=run.batch_rows)
    degree = degrees.degree
    num_edges = degrees.num_edges
    tick("degrees")

    if attr is None:
        if run.attr_column:
            attr = column_clusters(node_shards, num_nodes, run.attr_column, client=client)
        else:
            attr = attribute_clusters(
                node_shards, num_nodes, run.attr_clusters, seed=run.seed,
                max_passes=run.kmeans_max_passes, tol=run.kmeans_tol,
                sample_size=run.kmeans_sample, projection_dim=run.projection_dim,
                projection_threshold=run.projection_threshold, client=client,
            )
    attr_ids = np.ascontiguousarray(attr.attr_cluster_id, dtype=np.int32)
    tick("attribute clustering")

    communities = mapping = None
    vertex_part = vertex_volume = vertex_home = None
    alpha, beta, keep_together = run.alpha, run.beta, run.keep_attr_together
    lift = None
    if run.uses_attributes:
        # Measured and reported always (a 2M-edge prefix); it scales the attribute
        # weights only when lift_reference > 0.
        lift = attribute_lift(edge_shards, degree, attr_ids, batch_rows=run.batch_rows)
        factor = lift.scale(run.lift_reference)
        alpha, beta = alpha * factor, beta * factor
        keep_together = keep_together and factor > 0
        log.info(
            "attribute lift %.3f (homophily %.3f, chance %.3f): alpha %.3f, beta %.3f",
            lift.lift, lift.homophily, lift.chance, alpha, beta,
        )
    if run.uses_communities:
        struct_attr = attr_ids if run.uses_attributes else np.zeros(num_nodes, dtype=np.int32)
        communities = structural_clusters(
            edge_shards, degree, struct_attr, k, alpha,
            passes=run.cluster_passes, batch_rows=run.batch_rows,
        )
        timings["clustering kernel"] = communities.kernel_seconds
        tick("structural clustering")
        mapping = map_communities(
            communities.volume, attr_ids, k, epsilon=run.epsilon,
            keep_attr_together=run.uses_attributes and keep_together,
            community_id=communities.community_id, degree=degree,
        )
        # Resolve the community indirections per vertex once, so the kernel reads one
        # row per endpoint instead of chasing community -> partition on every edge.
        vertex_part = mapping.community_part[communities.community_id]
        vertex_volume = communities.volume[communities.community_id]
        if run.uses_attributes:
            vertex_home = mapping.attr_home[attr_ids]
        tick("mapping")
    elif run.algo == "metis":
        vertex_part = _metis_membership(edge_shards, degree, k, run.seed, run.batch_rows)
        vertex_volume = degree
        tick("metis")

    mode, use_partial = kernel_mode(run)
    beta = beta if run.uses_attributes else 0.0
    cap = edge_cap(num_edges, k, run.epsilon)

    owns = workdir is None
    workdir = Path(tempfile.mkdtemp(prefix="asepr-assign-") if owns else workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    state = AssignState(k, degree, vertex_part, vertex_volume, vertex_home)
    del vertex_part, vertex_volume, vertex_home
    try:
        shard_rows = [open_parquet(s).metadata.num_rows for s in edge_shards]
        # Plain sequential writes, not memmaps: dirty mapped pages would count in RSS
        # and grow with |E|. Batches arrive in shard order, so each file is appended.
        sink = _EdgePartSink(workdir, shard_rows)
        with stage("assignment", log) as info:
            kernel_args = dict(use_partial=use_partial, beta=beta, lam=run.hdrf_lambda,
                               cap=cap, seed=run.seed)
            for empty in warmup_arrays():  # compile outside the timed loop
                state.assign(empty, empty, np.zeros(0, np.int16), mode, **kernel_args)
            kernel_seconds = 0.0
            for batch in iter_edge_batches(edge_shards, run.batch_rows):
                out = np.empty(len(batch.src), dtype=np.int16)
                t0 = time.perf_counter()
                state.assign(batch.src, batch.dst, out, mode, **kernel_args)
                kernel_seconds += time.perf_counter() - t0
                sink.write(batch.shard_index, batch.row0, out)
            sink.finish()
            info.update(edges=num_edges, kernel_edges_per_s=int(num_edges / max(kernel_seconds, 1e-9)))
        timings["assignment kernel"] = kernel_seconds
        tick("assignment")

        replicas = state.replicas
        del state.vstate  # the packed rows are no longer needed; keep O(N*W) bitsets only
        result = Assignment(
            config=run, num_nodes=num_nodes, num_edges=num_edges, edge_shards=edge_shards,
            node_shards=node_shards, workdir=str(workdir), degree=degree,
            replicas=replicas, loads=state.loads, master=np.zeros(num_nodes, np.int32),
            attr=attr, communities=communities, mapping=mapping, metrics={},
            timings=timings, owns_workdir=owns,
        )
        offsets = replica_offsets(replicas)
        counts = np.zeros(offsets[-1], dtype=np.int64)
        for src, dst, part in result.iter_assigned(run.batch_rows):
            count_edges_per_replica(src, dst, part, replicas, offsets, counts)
        result.master = choose_masters(replicas, offsets, counts, k)
        del counts, offsets
        tick("masters")

        with stage("metrics", log):
            local = total = 0
            for batch in iter_edge_batches(edge_shards, run.batch_rows):
                a, b = locality_batch(batch.src, batch.dst, replicas, result.master)
                local += a
                total += b
            labels = read_node_column(node_shards, num_nodes, "label")
            result.metrics = partition_metrics(
                replicas, state.loads, result.master, attr_ids, labels, (local, total)
            )
        result.labels = labels
        result.locality = (int(local), int(total))
        result.kernel = {
            "mode": int(mode), "use_partial": bool(use_partial), "alpha": float(alpha),
            "beta": float(beta), "lam": float(run.hdrf_lambda), "seed": int(run.seed),
            "epsilon": float(run.epsilon), "keep_attr_together": bool(keep_together),
        }
        result.metrics["cap"] = cap
        result.metrics["drift"] = drift_metrics(
            state.loads, run.epsilon,
            mapping.community_part if mapping is not None else None,
            communities.volume if communities is not None else None,
        )
        if lift is not None:
            result.metrics["attribute_lift"] = {
                "lift": lift.lift, "homophily": lift.homophily, "chance": lift.chance,
                "alpha_effective": alpha, "beta_effective": beta,
            }
        tick("metrics")
        result.metrics["peak_rss_bytes"] = peak_rss_bytes()
        return result
    except BaseException:
        if owns:
            shutil.rmtree(workdir, ignore_errors=True)
        raise


class _EdgePartSink:
    """Writes ``edge-parts-XXXXX.npy`` (int16, one per edge shard) append-only."""

    def __init__(self, workdir: Path, shard_rows: list[int]):
        self.workdir = workdir
        self.shard_rows = shard_rows
        self._index = -1
        self._handle = None
        self._written = 0

    def _open(self, index: int) -> None:
        self.close()
        for skipped in range(self._index + 1, index):  # empty shards still get a file
            np.save(self.workdir / f"edge-parts-{skipped:05d}.npy", np.zeros(0, np.int16))
        self._index = index
        self._handle = open(self.workdir / f"edge-parts-{index:05d}.npy", "wb")
        header = {"descr": "<i2", "fortran_order": False, "shape": (self.shard_rows[index],)}
        np.lib.format.write_array_header_1_0(self._handle, header)
        self._written = 0

    def write(self, index: int, row0: int, parts: np.ndarray) -> None:
        if index != self._index:
            self._open(index)
        if row0 != self._written:
            raise RuntimeError(f"edge shard {index}: batch at row {row0}, expected {self._written}")
        self._handle.write(parts.astype("<i2", copy=False).tobytes())
        self._written += len(parts)

    def close(self) -> None:
        if self._handle is not None:
            self._handle.close()
            self._handle = None
            if self._written != self.shard_rows[self._index]:
                raise RuntimeError(
                    f"edge shard {self._index}: wrote {self._written} rows, "
                    f"expected {self.shard_rows[self._index]}"
                )

    def finish(self) -> None:
        self.close()
        self._open_rest()

    def _open_rest(self) -> None:
        for skipped in range(self._index + 1, len(self.shard_rows)):
            np.save(self.workdir / f"edge-parts-{skipped:05d}.npy", np.zeros(0, np.int16))

