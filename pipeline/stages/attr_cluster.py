"""Stage ③: attribute clustering, a sampled fit then one labelling pass (docs/design.md#attribute-clustering).

Every node gets an ``attr_cluster_id`` in ``0..C-1``, either from spherical k-means
over its feature vector (:func:`attribute_clusters`, here) or from a categorical node
column (:func:`asepr.pipeline.stages.attr_column.column_clusters`).

k-means, step by step
---------------------
The cost follows a sample, not passes over the feature table: the node shards are read
at most twice, once for the sample (the feature column of the row groups that hold a
sampled row) and once to label every row, and nothing is spilled.

0. **Scan** (one task per node shard): row count and feature width from the Parquet
   footer (``list`` features: from the first row).
1. **Sample** (one task per shard): the client draws ``m`` global row numbers
   (:func:`sample_rows`) uniformly without replacement from one seeded generator and
   hands each shard its own. A task reads the feature column of the row groups that
   hold one of its rows and embeds only those rows: features are projected when
   ``d > projection_threshold`` (a seeded Gaussian ``[d, d']`` matrix scaled by
   ``1/sqrt(d')``), then L2-normalised (zero rows stay zero). The sample is uniform
   over rows whatever the file's order: every row is drawn with the same probability,
   and a row group is decoded only to reach the rows drawn in it. Reading a random
   subset of whole row groups would cost less, but it samples runs of neighbouring
   rows, which follows the file's order (an input sorted by class would lose whole
   clusters).
2. **Fit** on the sample, in the client (:func:`asepr.pipeline.stages.kmeans.fit_sample`):
   ``restarts`` runs of greedy k-means++ seeding (D² sampling, ``2 + ln C`` candidates
   per step), each followed by spherical Lloyd iterations: a centroid becomes its
   cluster's normalised sum, and an empty one is re-seeded from the sample point
   farthest from its nearest centroid. A run stops when no centroid moves by ``tol`` or
   more, or after ``max_passes`` updates. The run of lowest sample inertia wins.
3. **Labels** (one task per shard): every row is read, validated, embedded and given
   the centroid of largest cosine; the task returns the ids, the labels and the exactly
   rounded (``math.fsum``) sum of the rows' squared distances to their centroids. The
   client scatters the labels by ``global_nid`` into ``attr_cluster_id[N]``.

When the sample is every row (``m = N``: few rows, or wide rows whose second read would
cost more than fitting on all of them), step 1 keeps the embedded rows and their ids,
and step 3 labels them in the client: one read in all.

The steps read their rows through one row source (:mod:`asepr.pipeline.stages.attr_rows`),
whatever the input: the node shards, one Dask task per shard, or the validator's
decoded node table (:mod:`asepr.storage.inputs.node_table`) that ``asepr partition`` hands over,
read on threads of the client instead of decoding the shards. The table draws the same
rows (by shard-order row number) and so gives the same clusters.

Everything random comes from ``np.random.SeedSequence(seed)``, and the fit runs in the
client on a sample that does not depend on how the shards are read. So a seed and a
shard list give the same clusters under any scheduler, any number of workers and any
``batch_rows``. Embeddings are computed in float64 and rounded once, so a row gets the
same bits whatever batch it is read in (BLAS sums in an order that depends on the matrix
shape and thread count). Each row is then scored against the centroids on its own
(:func:`asepr.pipeline.stages.kmeans.nearest`). Mostly-zero rows (bag-of-words features) are
projected by a numba kernel from their non-zeros only.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from asepr.pipeline.dask_ops import task_prefix
from asepr.pipeline.planning.needs import Need, RunShape
from asepr.pipeline.stages.attr_rows import NodeRows, ShardRows, TableRows, rows_per_batch
from asepr.pipeline.stages.checks import check_float, check_int
from asepr.pipeline.stages.kmeans import assign_nearest, embed, fit_sample, nearest
from asepr.storage.errors import InputError, format_problem
from asepr.storage.inputs.node_table import NodeTable
from asepr.storage.locations.fs import Shard
from asepr.storage.resources import StageClock, stage

if TYPE_CHECKING:
    import distributed

    from asepr.pipeline.config import PartitionConfig

__all__ = [
    "BATCH_ROWS",
    "READ_COST",
    "RESTARTS",
    "SAMPLE_BYTES",
    "SAMPLE_PER_CLUSTER",
    "AttrClusters",
    "AttrModel",
    "attribute_clusters",
    "kmeans_needs",
    "sample_rows",
]

log = logging.getLogger(__name__)

#: The sample holds at least this many rows per cluster (``docs/results/kmeans``).
SAMPLE_PER_CLUSTER = 1024
#: At most this many bytes of embedded sample rows (``float32 [m, d']``).
SAMPLE_BYTES = 128 << 20
#: Rows per record batch when the caller sets none (also capped at about 64 MiB per batch).
BATCH_ROWS = 65_536
#: k-means++ seedings per fit (each followed by Lloyd on the sample).
RESTARTS = 3
#: Decoding one feature value from Parquet costs about as much CPU as this many float64
#: multiply-adds of the assignment kernel (9.4 ns and 0.22 ns per row-feature on the
#: development machine, ``docs/results/kmeans``).
READ_COST = 40


def sample_rows(num_nodes: int, num_clusters: int, feat_dim: int, width: int, sample_size: int,
                max_passes: int, restarts: int) -> int:
    """``m``, the rows the fit holds: every row, or a uniform sample (module docstring).

    Every row when ``N`` rows of ``float32 [N, d']`` fit in :data:`SAMPLE_BYTES` and a
    second read of a row (``READ_COST·d``) costs more than fitting on it
    (``d'·C`` per update, ``(max_passes + 1)·restarts`` updates): wide features read
    once. Otherwise ``max(sample_size, SAMPLE_PER_CLUSTER·C)`` rows, within those
    bytes, at least C and at most N.
    """
    budget = SAMPLE_BYTES // (4 * max(1, width))
    updates = (max_passes + 1) * restarts
    if num_nodes <= budget and READ_COST * feat_dim >= width * num_clusters * updates:
        return num_nodes
    wanted = max(sample_size, SAMPLE_PER_CLUSTER * num_clusters)
    return min(num_nodes, max(num_clusters, min(wanted, budget)))


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
        Lloyd updates run on the sample by the chosen restart (0 for a column); no
        update pass reads the shards.
    inertia
        The full-data inertia: the sum, over every node, of the squared Euclidean
        distance between its embedded row and its centroid under the final labels
        (0.0 for a column).
    converged
        Whether the chosen restart's centroids stopped moving (shift < ``tol``) within
        ``max_passes`` updates on the sample.
    source
        ``"kmeans"`` or ``"column:<name>"``.
    inertia_history
        The chosen restart's sample inertia before each update, scaled by ``N / m`` to
        estimate the full-data figure (non-increasing; exact when the sample is every
        row), then :attr:`inertia`.
    """

    attr_cluster_id: np.ndarray
    model: AttrModel | None
    num_clusters: int
    passes: int
    inertia: float
    converged: bool
    source: str
    inertia_history: tuple[float, ...] = field(default=())


# --- k-means -------------------------------------------------------------------------


def attribute_clusters(
    node_shards: list[Shard],
    num_nodes: int,
    num_clusters: int,
    *,
    seed: int = 0,
    max_passes: int = 10,
    tol: float = 1e-4,
    sample_size: int = 20_000,
    restarts: int = RESTARTS,
    projection_dim: int = 256,
    projection_threshold: int = 256,
    client: distributed.Client | None = None,
    batch_rows: int = BATCH_ROWS,
    table: NodeTable | None = None,
) -> AttrClusters:
    """Spherical k-means over the node features: fitted on a sample, then one labelling pass.

    See the module docstring for the steps. Peak memory: the sample (at most
    :data:`SAMPLE_BYTES`) in the client, plus ``attr_cluster_id`` and one shard's ids and
    labels; each task holds one batch and its shard's ids, labels and distances.

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
        Maximum Lloyd updates on the sample per restart (0: k-means++ centroids only).
    tol
        Stop when no centroid moves by ``tol`` or more (Euclidean, on the unit sphere).
    sample_size
        Rows drawn uniformly (without replacement) for the fit; raised to
        ``SAMPLE_PER_CLUSTER·C`` and capped at ``SAMPLE_BYTES`` (:func:`sample_rows`).
    restarts
        Independent k-means++ seedings, each followed by Lloyd; the lowest sample
        inertia wins.
    projection_dim, projection_threshold
        Features wider than ``projection_threshold`` are projected to ``projection_dim``.
    client
        A ``distributed.Client``; None runs on the local thread pool.
    batch_rows
        Maximum rows per record batch (also capped at about 64 MiB per batch).
    table
        The validator's decoded copy of these shards (:mod:`asepr.storage.inputs.node_table`): the
        sample and the labels read it, on threads of this process, instead of decoding
        the shards. The clusters are the same (the sample draws the same rows).

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
    restarts = check_int("restarts", restarts, 1)
    projection_dim = check_int("projection_dim", projection_dim, 1)
    projection_threshold = check_int("projection_threshold", projection_threshold, 0)
    batch_rows = check_int("batch_rows", batch_rows, 1)
    tol = check_float("tol", tol)
    if not node_shards:
        raise InputError(
            format_problem("attribute_clusters(node_shards=...)", "at least one node shard", "none")
        )
    with stage("attr_cluster", log) as info:
        source = (TableRows(table, batch_rows) if table is not None
                  else ShardRows(node_shards, client, task_prefix("attr"), batch_rows))
        result = _kmeans_impl(source, num_nodes, num_clusters, seed, max_passes, tol, sample_size,
                              restarts, projection_dim, projection_threshold)
        info.update(
            nodes=num_nodes,
            clusters=result.num_clusters,
            passes=result.passes,
            converged=result.converged,
            inertia=f"{result.inertia:.6g}",
        )
    return result


def _random_projection(feat_dim: int, projection_dim: int, projection_threshold: int,
                       seq: np.random.SeedSequence) -> np.ndarray | None:
    """The seeded Gaussian ``[d, d']`` projection scaled by ``1/sqrt(d')``; None when d is small."""
    if feat_dim <= projection_threshold:
        return None
    rng = np.random.default_rng(seq)
    return (rng.standard_normal((feat_dim, projection_dim)) / math.sqrt(projection_dim)).astype(np.float32)


def _sample_piece(piece, projection: np.ndarray | None,
                  picks: np.ndarray | None) -> tuple[np.ndarray | None, np.ndarray]:
    """Step 1 for one piece: ``(None, picked rows)``, or ``(ids, every row)`` when ``picks``
    is None (the sample is every row)."""
    if picks is None:
        return piece.every_row(projection)
    return None, piece.picked(picks, projection)


def _label_rows(x: np.ndarray, centroids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(int32 labels, float64 squared distances)`` of embedded rows: nearest centroid."""
    labels, _, dist = nearest(x, centroids)
    return labels, dist


def _label_piece(piece, projection: np.ndarray | None,
                 centroids: np.ndarray) -> tuple[np.ndarray, np.ndarray, float]:
    """Step 3 for one piece: ``(ids, attr_cluster_id, inertia)``; the inertia is the exactly
    rounded sum of the rows' squared distances, whatever the batches."""
    ids, labels, dist = [np.empty(0, dtype=np.int64)], [np.empty(0, dtype=np.int32)], [np.empty(0)]
    for batch_ids, x in piece.batches(projection):
        batch_labels, batch_dist = _label_rows(x, centroids)
        ids.append(batch_ids)
        labels.append(batch_labels)
        dist.append(batch_dist)
    return np.concatenate(ids), np.concatenate(labels), math.fsum(np.concatenate(dist))


def _draw_sample(source: NodeRows, rows: np.ndarray, feat_dim: int, projection: np.ndarray | None,
                 n_sample: int, seq: np.random.SeedSequence) -> tuple[np.ndarray, list | None]:
    """Step 1: ``(sample, per-piece (ids, rows))``; the second is None unless the sample is
    every row, when it holds each piece's embedded rows for step 3."""
    total = int(rows.sum())
    every = n_sample == total
    rng = np.random.default_rng(seq)
    picks = None if every else np.sort(rng.choice(total, size=n_sample, replace=False))
    offsets = np.r_[0, np.cumsum(rows)]
    projection_node = source.shared(projection, "projection")
    calls = []
    for i, piece in enumerate(source.sample_pieces(feat_dim)):
        local = None if every else picks[(picks >= offsets[i]) & (picks < offsets[i + 1])] - offsets[i]
        calls.append((piece, projection_node, local))
    pieces = source.run("sample", _sample_piece, calls)
    sample = np.concatenate([x for _, x in pieces])
    return sample, (pieces if every else None)


def _label_all(source: NodeRows, projection: np.ndarray | None, centroids: np.ndarray, feat_dim: int,
               num_nodes: int, kept: list | None) -> tuple[np.ndarray, float]:
    """Step 3: ``(attr_cluster_id, full-data inertia)``; in the client when ``kept`` holds
    every piece's embedded rows, else one task per piece."""
    if kept is not None:
        labelled = []
        for ids, x in kept:
            labels, dist = _label_rows(x, centroids)
            labelled.append((ids, labels, math.fsum(dist)))
    else:
        projection_node = source.shared(projection, "projection-labels")
        centroids_node = source.shared(centroids, "centroids")
        calls = [(piece, projection_node, centroids_node) for piece in source.label_pieces(feat_dim)]
        labelled = source.run("labels", _label_piece, calls)
    attr_cluster_id = source.place([(ids, labels) for ids, labels, _ in labelled], num_nodes)
    return attr_cluster_id, math.fsum(x for _, _, x in labelled)


def _distinct_rows(x: np.ndarray, enough: int) -> int:
    """The number of distinct rows of ``x``, or any number >= ``enough`` when there are that many.

    Equal rows have equal dot products with any vector (computed row by row, so the same
    way for every row), so the distinct dot products with a fixed vector are a lower
    bound; the exact count runs only when the bound is short.
    """
    direction = np.random.default_rng(0).standard_normal(x.shape[1])
    keys = np.einsum("ij,j->i", x, direction, dtype=np.float64)
    bound = len(np.unique(keys))
    return bound if bound >= enough else len(np.unique(x, axis=0))


def _kmeans_impl(source: NodeRows, num_nodes: int, num_clusters: int, seed: int, max_passes: int,
                 tol: float, sample_size: int, restarts: int, projection_dim: int,
                 projection_threshold: int) -> AttrClusters:
    """Steps 0-3 of the module docstring."""
    seq_projection, seq_sample, seq_init = np.random.SeedSequence(seed).spawn(3)
    clock = StageClock()
    rows, feat_dim = source.scan(num_nodes)
    total = int(rows.sum())
    if num_clusters > num_nodes:
        log.info("attribute clusters: C = %d clamped to N = %d", num_clusters, num_nodes)
        num_clusters = num_nodes
    projection = _random_projection(feat_dim, projection_dim, projection_threshold, seq_projection)
    width = projection_dim if projection is not None else feat_dim
    clock.tick("scan")

    n_sample = sample_rows(total, num_clusters, feat_dim, width, sample_size, max_passes, restarts)
    sample, kept = _draw_sample(source, rows, feat_dim, projection, n_sample, seq_sample)
    if kept is not None:
        distinct = _distinct_rows(sample[np.einsum("ij,ij->i", sample, sample) > 0], num_clusters)
        if 0 < distinct < num_clusters:
            log.info("attribute clusters: C = %d clamped to %d distinct embedded points",
                     num_clusters, distinct)
            num_clusters = distinct
    clock.tick(f"sample ({n_sample:,} rows)")

    fit = fit_sample(sample, num_clusters, restarts=restarts, max_iter=max_passes, tol=tol,
                     seq=seq_init)
    clock.tick(f"fit ({restarts} restart(s), {fit.iterations} update(s))")
    attr_cluster_id, inertia = _label_all(source, projection, fit.centroids, feat_dim, num_nodes, kept)
    clock.tick("labels")
    log.debug("attribute clusters: %s",
              ", ".join(f"{step} {s:.2f} s" for step, s in clock.timings.items()))
    scale = total / max(1, len(sample))
    return AttrClusters(
        attr_cluster_id=attr_cluster_id,
        model=AttrModel(centroids=fit.centroids, projection=projection, feat_dim=feat_dim),
        num_clusters=num_clusters,
        passes=fit.iterations,
        inertia=inertia,
        converged=fit.converged,
        source="kmeans",
        inertia_history=tuple(x * scale for x in fit.history) + (inertia,),
    )


def kmeans_needs(run: PartitionConfig, s: RunShape) -> Need:
    """Memory of :func:`attribute_clusters`, nothing written, from the decoded node table
    (what ``asepr partition`` runs): the driver gathers the ``m`` sampled rows (``float32
    [m, d]``) and fits on their embedding (a copy of its non-zero rows, the 20 B per row
    of an assignment, and k-means++'s ``2 + ln C`` float64 distance rows, three at a
    time); then ``label_threads`` threads each read a block of rows and embed it in
    float64 into ``attr_cluster_id`` int32[N], beside ``degree``. When the sample is every
    row (``m = N``) it also holds every embedded row and its id."""
    rows = min(s.n, rows_per_batch(s.d, BATCH_ROWS))
    m = sample_rows(s.n, run.attr_clusters, s.d, s.d_emb, run.kmeans_sample, run.kmeans_max_passes,
                    RESTARTS)
    every = m >= s.n
    fit = 8 * s.n + 4 * m * s.d + 2 * 4 * m * s.d_emb + m * (20 + 24 * (2 + math.log(run.attr_clusters)))
    kept = s.n * (8 + 4 * s.d_emb) if every else 0
    labels = 12 * s.n + s.label_threads * rows * (4 * s.d + 8 * s.d + 21 * s.d_emb + 20)
    return Need(driver=max(fit, labels + kept))
