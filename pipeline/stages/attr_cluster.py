"""Stage ③: attribute clustering, out of core, as Dask map-reduce passes (DESIGN.md §4.2).

Every node gets an ``attr_cluster_id`` in ``0..C-1``, either from spherical k-means
over its feature vector (:func:`attribute_clusters`, here) or from a categorical node
column (:func:`pipeline.stages.attr_column.column_clusters`).

k-means, step by step
---------------------
0. **Scan** (one task per node shard): row count and feature width from the Parquet
   footer (``list`` features: from the first row).
1. **Embed and spill** (one task per shard): features are projected when
   ``d > projection_threshold`` (a seeded Gaussian ``[d, d']`` matrix scaled by
   ``1/sqrt(d')``), then L2-normalised (zero rows stay zero). Each task writes its
   embedded rows and their ids to a private spill directory, so later passes neither
   redo the projection nor hold ``N·d'`` floats in the client, and returns its share of a
   uniform sample: the client draws ``sample_size`` global row numbers without
   replacement from one seeded generator and hands each shard its own.
2. **k-means++** on the sample, in the client (greedy D² sampling with
   ``2 + ln C`` candidates per step and incremental min-distance updates).
3. **Passes** (one task per shard, tree-summed): assign each embedded row to the centroid
   of largest cosine (``argmax X·Cᵀ`` in row blocks), return per-cluster vector sums,
   counts and the squared-distance inertia. A centroid becomes its normalised sum
   (spherical k-means); an empty one is re-seeded from the sample point farthest from
   its nearest centroid. Stop when no centroid moves by ``tol`` or more (Euclidean), or
   after ``max_passes``. The inertia never increases from one pass to the next.
4. **Labels** (one task per shard): the final assignment, scattered by ``global_nid``
   into ``attr_cluster_id[N]`` by the client.

Everything random comes from ``np.random.SeedSequence(seed)``, and every sum has a
fixed tree shape, so a seed and a shard list give the same clusters under any scheduler
and any number of workers. Embeddings and scores are computed in float64 and rounded
once, so a row gets the same bits whatever batch it is read in (BLAS sums in an order
that depends on the matrix shape and thread count). Mostly-zero rows (bag-of-words
features) are projected by a numba kernel from their non-zeros only.

Spill layout (a private directory under ``spill_dir``, removed at the end, on error
too; it must be visible to every Dask worker, which a ``LocalCluster`` guarantees)::

    asepr-attr-XXXXXXXX/
      shard-00000.emb.npy   float32 [n_shard, d']   embedded features, in file order
      shard-00000.ids.npy   int64   [n_shard]       global_nid of each row
      ...
"""

from __future__ import annotations

import logging
import math
import os
import shutil
import tempfile
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import dask
import numpy as np
import pyarrow as pa

from pipeline.dask_ops import (
    captured,
    compute,
    first_error,
    share,
    task_prefix,
    tree_reduce,
)
from pipeline.stages.checks import check_float, check_int
from pipeline.stages.kmeans import ASSIGN_ROWS, assign_nearest, embed, kmeans_pp, update_centroids
from storage.errors import InputError, format_problem
from storage.fs import Shard
from storage.resources import StageClock, stage
from storage.schema import FeatureLayout, check_node_schema, feature_matrix
from storage.input import open_parquet

if TYPE_CHECKING:
    import distributed

__all__ = ["AttrClusters", "AttrModel", "attribute_clusters", "scatter_labels"]

log = logging.getLogger(__name__)

#: Rows of a spilled shard read at once by a pass (a multiple of ``ASSIGN_ROWS``).
_STATS_ROWS = 8 * ASSIGN_ROWS
#: Target uncompressed bytes per record batch when reading features.
_BATCH_BYTES = 64 << 20


# --- the model ---------------------------------------------------------------------


@dataclass(frozen=True, eq=False)
class AttrModel:
    """Everything incremental ingest needs to place a new node in a cluster.

    Attributes
    ----------
    centroids
        ``float32 [C, d']``, unit-norm rows.
    projection
        ``float32 [d, d']`` seeded Gaussian random projection scaled by ``1/sqrt(d')``,
        or None when the features are used as they are (``d' = d``).
    feat_dim
        ``d``, the width of the raw feature vectors.
    """

    centroids: np.ndarray
    projection: np.ndarray | None
    feat_dim: int

    @property
    def num_clusters(self) -> int:
        return int(self.centroids.shape[0])

    def _check(self, feat: np.ndarray) -> np.ndarray:
        feat = np.asarray(feat, dtype=np.float32)
        if feat.ndim != 2 or feat.shape[1] != self.feat_dim:
            raise InputError(
                format_problem(
                    "AttrModel features",
                    f"a [n, {self.feat_dim}] matrix (the width the model was fitted on)",
                    f"shape {feat.shape}",
                )
            )
        return feat

    def embed(self, feat: np.ndarray) -> np.ndarray:
        """``float32 [n, d']``: the projected (if any), L2-normalised rows of ``feat``."""
        return embed(self._check(feat), self.projection)

    def predict(self, feat: np.ndarray) -> np.ndarray:
        """``int32 [n]``: the nearest centroid (largest cosine) of each row of ``feat``."""
        return assign_nearest(self.embed(feat), self.centroids)[0]


@dataclass(frozen=True, eq=False)
class AttrClusters:
    """The attribute cluster of every node.

    Attributes
    ----------
    attr_cluster_id
        ``int32 [N]`` indexed by ``global_nid``.
    model
        The fitted :class:`AttrModel`; None when a categorical column was used.
    num_clusters
        C actually used (k-means may clamp the requested C to N or to the number of
        distinct embedded points).
    passes
        k-means update passes run (0 for a column).
    inertia
        Sum of squared distances between embedded rows and their centroids, under
        the final assignment (0.0 for a column).
    converged
        Whether the centroids stopped moving (shift < ``tol``) within ``max_passes``.
    source
        ``"kmeans"`` or ``"column:<name>"``.
    inertia_history
        The inertia of every pass, then that of the final assignment.
    """

    attr_cluster_id: np.ndarray
    model: AttrModel | None
    num_clusters: int
    passes: int
    inertia: float
    converged: bool
    source: str
    inertia_history: tuple[float, ...] = field(default=())


# --- shard tasks -------------------------------------------------------------------


def _rows_per_batch(feat_dim: int, batch_rows: int) -> int:
    """``batch_rows`` capped so that one decoded batch holds about ``_BATCH_BYTES``.

    The width, not the Parquet byte counts, sets the cap: sparse features compress
    (and encode) to a fraction of their decoded size.
    """
    return max(1, min(batch_rows, _BATCH_BYTES // (8 + 4 * feat_dim)))


def _scan_shard(shard: Shard) -> tuple[int, int | None]:
    """``(rows, feature width)`` of a node shard; the width is None for an empty shard."""
    pf = open_parquet(shard)
    layout, _, _ = check_node_schema(pf.schema_arrow, shard.url)
    rows = pf.metadata.num_rows
    if layout.dim is not None:
        return rows, layout.dim
    for batch in pf.iter_batches(batch_size=1, columns=list(layout.columns)):
        if batch.num_rows:
            return rows, _features(batch, layout, shard, 0).shape[1]
    return rows, None


def _features(batch: pa.RecordBatch, layout: FeatureLayout, shard: Shard, row0: int) -> np.ndarray:
    try:
        return feature_matrix(batch, layout)
    except ValueError as exc:
        rows = f"rows {row0}..{row0 + batch.num_rows - 1}"
        raise InputError(
            format_problem(
                f"file {shard.url}, column '{layout.columns[0]}', {rows}",
                "one feature vector of the same width per node",
                str(exc),
                "run `asepr validate` on the input and fix what it reports.",
            )
        ) from exc


def _spill_paths(spill: str, index: int) -> tuple[str, str]:
    base = os.path.join(spill, f"shard-{index:05d}")
    return f"{base}.emb.npy", f"{base}.ids.npy"


def _embed_shard(
    shard: Shard,
    index: int,
    feat_dim: int,
    projection: np.ndarray | None,
    spill: str,
    sample_rows: np.ndarray,
    batch_rows: int,
) -> tuple[int, np.ndarray]:
    """Embed one node shard into the spill directory; return ``(rows, sample rows)``."""
    pf = open_parquet(shard)
    layout, _, _ = check_node_schema(pf.schema_arrow, shard.url)
    n = pf.metadata.num_rows
    width = projection.shape[1] if projection is not None else feat_dim
    emb_path, ids_path = _spill_paths(spill, index)
    if n == 0:
        np.save(emb_path, np.zeros((0, width), dtype=np.float32))
        np.save(ids_path, np.zeros(0, dtype=np.int64))
        return 0, np.zeros((0, width), dtype=np.float32)
    emb = np.lib.format.open_memmap(emb_path, mode="w+", dtype=np.float32, shape=(n, width))
    ids = np.lib.format.open_memmap(ids_path, mode="w+", dtype=np.int64, shape=(n,))
    row0 = 0
    columns = ["id", *layout.columns]
    try:
        for batch in pf.iter_batches(
            batch_size=_rows_per_batch(feat_dim, batch_rows), columns=columns
        ):
            b = batch.num_rows
            where = f"file {shard.url}, rows {row0}..{row0 + b - 1}"
            if row0 + b > n:
                raise InputError(
                    format_problem(where, f"{n} rows (the footer's count)", "more rows")
                )
            id_col = batch.column("id")
            if id_col.null_count:
                raise InputError(
                    format_problem(
                        f"{where}, column 'id'", "no null ids", f"{id_col.null_count} null(s)"
                    )
                )
            feat = _features(batch, layout, shard, row0)
            if feat.shape[1] != feat_dim:
                raise InputError(
                    format_problem(
                        f"{where}, column '{layout.columns[0]}'",
                        f"feature width {feat_dim} (as in the other node shards)",
                        f"width {feat.shape[1]}",
                        "every node shard must store vectors of the same width d.",
                    )
                )
            x = embed(feat, projection)
            if not np.isfinite(x).all():
                raise InputError(
                    format_problem(
                        f"{where}, column '{layout.columns[0]}'",
                        "finite features",
                        "NaN or inf values",
                        "run `asepr validate` on the input and fix what it reports.",
                    )
                )
            emb[row0 : row0 + b] = x
            ids[row0 : row0 + b] = id_col.to_numpy()
            row0 += b
        if row0 != n:
            raise InputError(
                format_problem(f"file {shard.url}", f"{n} rows (the footer's count)", f"{row0}")
            )
        emb.flush()
        ids.flush()
        sample = np.array(emb[sample_rows], dtype=np.float32)
    finally:
        del emb, ids
    return n, sample


def _load_emb(spill: str, index: int) -> np.ndarray:
    return np.load(_spill_paths(spill, index)[0], mmap_mode="r", allow_pickle=False)


def _shard_stats(
    spill: str, index: int, centroids: np.ndarray
) -> tuple[np.ndarray, np.ndarray, float]:
    """Per-cluster float64 vector sums, counts and inertia of one spilled shard."""
    num_clusters, width = centroids.shape
    sums = np.zeros((num_clusters, width), dtype=np.float64)
    counts = np.zeros(num_clusters, dtype=np.int64)
    inertia = 0.0
    c_sq = np.einsum("ij,ij->i", centroids, centroids, dtype=np.float64)
    emb = _load_emb(spill, index)
    for a in range(0, len(emb), _STATS_ROWS):
        x = np.asarray(emb[a : a + _STATS_ROWS])
        labels, best = assign_nearest(x, centroids)
        order = np.argsort(labels, kind="stable")
        sorted_labels = labels[order]
        starts = np.flatnonzero(np.r_[True, sorted_labels[1:] != sorted_labels[:-1]])
        sums[sorted_labels[starts]] += np.add.reduceat(x[order].astype(np.float64), starts, axis=0)
        counts += np.bincount(labels, minlength=num_clusters)
        inertia += _inertia(x, labels, best, c_sq)
    return sums, counts, inertia


def _inertia(x: np.ndarray, labels: np.ndarray, best: np.ndarray, c_sq: np.ndarray) -> float:
    x_sq = np.einsum("ij,ij->i", x, x, dtype=np.float64)
    return float(np.sum(x_sq + c_sq[labels] - 2.0 * best))


def _shard_labels(
    spill: str, index: int, centroids: np.ndarray
) -> tuple[np.ndarray, np.ndarray, float]:
    """``(global_nid, attr_cluster_id, inertia)`` of one spilled shard."""
    emb = _load_emb(spill, index)
    ids = np.load(_spill_paths(spill, index)[1], allow_pickle=False)
    labels = np.empty(len(emb), dtype=np.int32)
    inertia = 0.0
    c_sq = np.einsum("ij,ij->i", centroids, centroids, dtype=np.float64)
    for a in range(0, len(emb), _STATS_ROWS):
        x = np.asarray(emb[a : a + _STATS_ROWS])
        lab, best = assign_nearest(x, centroids)
        labels[a : a + len(x)] = lab
        inertia += _inertia(x, lab, best, c_sq)
    return ids, labels, inertia


def _add_stats(a, b):
    return a[0] + b[0], a[1] + b[1], a[2] + b[2]


def scatter_labels(
    parts: list[tuple[np.ndarray, np.ndarray]], shards: list[Shard], num_nodes: int, what: str
) -> np.ndarray:
    """Place per-shard ``(global_nid, cluster id)`` into one ``int32 [N]`` array."""
    attr_cluster_id = np.full(num_nodes, -1, dtype=np.int32)
    seen = np.zeros(num_nodes, dtype=bool)
    for shard, (ids, labels) in zip(shards, parts):
        bad = (ids < 0) | (ids >= num_nodes)
        if bad.any():
            raise InputError(
                format_problem(
                    f"file {shard.url}, column 'id'",
                    f"node ids in [0, {num_nodes})",
                    f"{int(bad.sum()):,} id(s) outside, e.g. {int(ids[bad][0])}",
                    "run `asepr validate` on the input and fix what it reports.",
                )
            )
        if seen[ids].any() or len(np.unique(ids)) != len(ids):
            raise InputError(
                format_problem(
                    f"file {shard.url}, column 'id'",
                    "each node id exactly once across all node shards",
                    "a repeated id",
                    "run `asepr validate` on the input and fix what it reports.",
                )
            )
        seen[ids] = True
        attr_cluster_id[ids] = labels
    if not seen.all():
        missing = np.flatnonzero(~seen)
        raise InputError(
            format_problem(
                f"node shards ({what})",
                f"one row for every node id in [0, {num_nodes})",
                f"{len(missing):,} id(s) without a row, e.g. {int(missing[0])}",
                "run `asepr validate` on the input and fix what it reports.",
            )
        )
    return attr_cluster_id


# --- k-means -------------------------------------------------------------------------


@dataclass(frozen=True)
class _Job:
    """The fixed context of one k-means run: the shards, where tasks run, where they spill."""

    shards: list[Shard]
    client: distributed.Client | None
    spill: str
    prefix: str
    batch_rows: int


def attribute_clusters(
    node_shards: list[Shard],
    num_nodes: int,
    num_clusters: int,
    *,
    seed: int = 0,
    max_passes: int = 10,
    tol: float = 1e-4,
    sample_size: int = 20_000,
    projection_dim: int = 256,
    projection_threshold: int = 256,
    client: distributed.Client | None = None,
    batch_rows: int = 65_536,
    spill_dir: str | None = None,
) -> AttrClusters:
    """Spherical k-means over the node features, out of core (see the module docstring).

    Parameters
    ----------
    node_shards
        The node shards (validated input), in a fixed order.
    num_nodes
        N; the shards must hold exactly one row per id in ``[0, N)``.
    num_clusters
        C (>= 1). Clamped to N, and to the number of distinct embedded points when the
        sample covers every node.
    seed
        Seeds the projection, the sample and k-means++.
    max_passes
        Maximum k-means update passes (0: k-means++ centroids only).
    tol
        Stop when no centroid moves by ``tol`` or more (Euclidean, on the unit sphere).
    sample_size
        Rows drawn uniformly (without replacement) for k-means++ and re-seeding.
    projection_dim, projection_threshold
        Features wider than ``projection_threshold`` are projected to ``projection_dim``.
    client
        A ``distributed.Client``; None runs on the local thread pool.
    batch_rows
        Maximum rows per record batch (also capped at about 64 MiB per batch).
    spill_dir
        Where the private spill directory goes (default: the system temp dir). It must
        be visible to every worker.

    Returns
    -------
    AttrClusters

    Raises
    ------
    InputError
        A bad argument, or input that is not valid (run ``asepr validate``).
    SchemaError
        A node shard lacks the ``id`` or feature columns.
    """
    num_nodes = check_int("num_nodes", num_nodes, 1)
    num_clusters = check_int("num_clusters", num_clusters, 1)
    seed = check_int("seed", seed, 0)
    max_passes = check_int("max_passes", max_passes, 0)
    sample_size = check_int("sample_size", sample_size, 1)
    projection_dim = check_int("projection_dim", projection_dim, 1)
    projection_threshold = check_int("projection_threshold", projection_threshold, 0)
    batch_rows = check_int("batch_rows", batch_rows, 1)
    tol = check_float("tol", tol)
    if not node_shards:
        raise InputError(
            format_problem("attribute_clusters(node_shards=...)", "at least one node shard", "none")
        )
    with stage("attr_cluster", log) as info:
        spill = tempfile.mkdtemp(prefix="asepr-attr-", dir=spill_dir)
        try:
            job = _Job(node_shards, client, spill, task_prefix("attr"), batch_rows)
            result = _kmeans_impl(job, num_nodes, num_clusters, seed, max_passes, tol, sample_size,
                                  projection_dim, projection_threshold)
        finally:
            shutil.rmtree(spill, ignore_errors=True)
        info.update(
            nodes=num_nodes,
            clusters=result.num_clusters,
            passes=result.passes,
            converged=result.converged,
            inertia=f"{result.inertia:.6g}",
        )
    return result


def _scan(job: _Job, num_nodes: int) -> tuple[np.ndarray, int]:
    """Step 0: the rows of every shard and the feature width d (the same in all)."""
    scans = first_error(
        compute(
            [
                dask.delayed(captured)(_scan_shard, s, dask_key_name=f"{job.prefix}-scan-{i}")
                for i, s in enumerate(job.shards)
            ],
            job.client,
        )
    )
    rows = np.array([r for r, _ in scans], dtype=np.int64)
    dims = {d for _, d in scans if d is not None}
    if len(dims) > 1:
        found = ", ".join(f"{s.url}: {d}" for s, (_, d) in zip(job.shards, scans) if d is not None)
        raise InputError(
            format_problem(
                "node shards, feature width",
                "one width d in every shard",
                found,
                "every node shard must store vectors of the same width d.",
            )
        )
    feat_dim = dims.pop() if dims else 0
    if feat_dim < 1:
        raise InputError(
            format_problem(
                "node shards, features", "feature vectors of width >= 1", f"width {feat_dim}"
            )
        )
    total = int(rows.sum())
    if total != num_nodes:
        raise InputError(
            format_problem(
                f"node shards ({len(job.shards)} file(s))",
                f"{num_nodes:,} rows (one per node)",
                f"{total:,} rows",
                "run `asepr validate` on the input and fix what it reports.",
            )
        )
    return rows, feat_dim


def _random_projection(feat_dim: int, projection_dim: int, projection_threshold: int,
                       seq: np.random.SeedSequence) -> np.ndarray | None:
    """The seeded Gaussian ``[d, d']`` projection scaled by ``1/sqrt(d')``; None when d is small."""
    if feat_dim <= projection_threshold:
        return None
    rng = np.random.default_rng(seq)
    return (rng.standard_normal((feat_dim, projection_dim)) / math.sqrt(projection_dim)).astype(np.float32)


def _embed_all(job: _Job, rows: np.ndarray, feat_dim: int, projection: np.ndarray | None,
               n_sample: int, seq: np.random.SeedSequence) -> np.ndarray:
    """Step 1: embed and spill every shard; returns the non-zero rows of a uniform sample."""
    total = int(rows.sum())
    picks = np.sort(np.random.default_rng(seq).choice(total, size=n_sample, replace=False))
    offsets = np.r_[0, np.cumsum(rows)]
    proj_node = share(projection, job.client, f"{job.prefix}-projection") if projection is not None else None
    tasks = []
    for i, shard in enumerate(job.shards):
        local = picks[(picks >= offsets[i]) & (picks < offsets[i + 1])] - offsets[i]
        tasks.append(
            dask.delayed(_embed_shard)(
                shard, i, feat_dim, proj_node, job.spill, local, job.batch_rows,
                dask_key_name=f"{job.prefix}-embed-{i}",
            )
        )
    embedded = compute(tasks, job.client)
    sample = np.concatenate([s for _, s in embedded])
    return sample[np.einsum("ij,ij->i", sample, sample) > 0]  # zero rows cannot be centroids


def _initial_centroids(sample: np.ndarray, num_clusters: int, width: int,
                       seq: np.random.SeedSequence) -> np.ndarray:
    """Step 2: k-means++ on the sample (any unit centroids when every feature vector is zero)."""
    if len(sample):
        return kmeans_pp(sample, num_clusters, np.random.default_rng(seq))
    centroids = np.zeros((num_clusters, width), dtype=np.float32)
    centroids[np.arange(num_clusters), np.arange(num_clusters) % width] = 1.0
    return centroids


def _passes(job: _Job, centroids: np.ndarray, sample: np.ndarray, max_passes: int,
            tol: float) -> tuple[np.ndarray, int, bool, list[float]]:
    """Step 3: update passes; returns ``(centroids, passes, converged, inertia per pass)``."""
    history: list[float] = []
    converged = False
    passes = 0
    for passes in range(1, max_passes + 1):
        cent_node = share(centroids, job.client, f"{job.prefix}-centroids-{passes}")
        parts = [
            dask.delayed(_shard_stats)(
                job.spill, i, cent_node, dask_key_name=f"{job.prefix}-stats-{passes}-{i}"
            )
            for i in range(len(job.shards))
        ]
        sums, counts, inertia = compute(
            tree_reduce(parts, _add_stats, f"{job.prefix}-stats-{passes}"), job.client
        )
        history.append(float(inertia))
        new, reseeded = update_centroids(sums, counts, centroids, sample)
        shift = float(np.sqrt(np.einsum("ij,ij->i", new - centroids, new - centroids)).max())
        log.debug(
            "attribute clusters: pass %d, inertia %.6g, shift %.3g, %d re-seeded",
            passes, inertia, shift, reseeded,
        )
        centroids = new
        if shift < tol:
            converged = True
            break
    return centroids, passes, converged, history


def _final_labels(job: _Job, centroids: np.ndarray, num_nodes: int) -> tuple[np.ndarray, float]:
    """Step 4: ``(attr_cluster_id, inertia)`` of the final assignment."""
    cent_node = share(centroids, job.client, f"{job.prefix}-centroids-final")
    labelled = compute(
        [
            dask.delayed(_shard_labels)(job.spill, i, cent_node, dask_key_name=f"{job.prefix}-labels-{i}")
            for i in range(len(job.shards))
        ],
        job.client,
    )
    attr_cluster_id = scatter_labels(
        [(ids, lab) for ids, lab, _ in labelled], job.shards, num_nodes, "k-means"
    )
    return attr_cluster_id, float(sum(x for _, _, x in labelled))


def _kmeans_impl(job: _Job, num_nodes: int, num_clusters: int, seed: int, max_passes: int, tol: float,
                 sample_size: int, projection_dim: int, projection_threshold: int) -> AttrClusters:
    """Steps 0-4 of the module docstring."""
    seq_projection, seq_sample, seq_init = np.random.SeedSequence(seed).spawn(3)
    clock = StageClock()
    rows, feat_dim = _scan(job, num_nodes)
    total = int(rows.sum())
    if num_clusters > num_nodes:
        log.info("attribute clusters: C = %d clamped to N = %d", num_clusters, num_nodes)
        num_clusters = num_nodes
    projection = _random_projection(feat_dim, projection_dim, projection_threshold, seq_projection)
    clock.tick("scan")

    n_sample = min(total, max(sample_size, num_clusters))
    sample = _embed_all(job, rows, feat_dim, projection, n_sample, seq_sample)
    if n_sample == total:
        distinct = len(np.unique(sample, axis=0))
        if 0 < distinct < num_clusters:
            log.info("attribute clusters: C = %d clamped to %d distinct embedded points", num_clusters, distinct)
            num_clusters = distinct
    clock.tick("embed+spill")

    width = projection_dim if projection is not None else feat_dim
    centroids = _initial_centroids(sample, num_clusters, width, seq_init)
    clock.tick("k-means++")
    centroids, passes, converged, history = _passes(job, centroids, sample, max_passes, tol)
    clock.tick(f"{passes} pass(es)")
    attr_cluster_id, final_inertia = _final_labels(job, centroids, num_nodes)
    clock.tick("labels")
    log.debug("attribute clusters: %s", ", ".join(f"{step} {s:.2f} s" for step, s in clock.timings.items()))
    history.append(final_inertia)
    return AttrClusters(
        attr_cluster_id=attr_cluster_id,
        model=AttrModel(centroids=centroids, projection=projection, feat_dim=feat_dim),
        num_clusters=num_clusters,
        passes=passes,
        inertia=final_inertia,
        converged=converged,
        source="kmeans",
        inertia_history=tuple(history),
    )
