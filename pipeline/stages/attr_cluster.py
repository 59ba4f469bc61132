"""Stage ③: attribute clustering, a sampled fit then one labelling pass (docs/design.md#attribute-clustering).

Every node gets an ``attr_cluster_id`` in ``0..C-1``, either from spherical k-means
over its feature vector (:func:`attribute_clusters`, here) or from a categorical node
column (:func:`pipeline.stages.attr_column.column_clusters`).

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
2. **Fit** on the sample, in the client (:func:`pipeline.stages.kmeans.fit_sample`):
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

``asepr partition`` hands over the validator's decoded node table
(:mod:`storage.node_table`): steps 1 and 3 then read its raw rows on threads of the
client instead of decoding the shards, draw the same rows (by shard-order row number)
and so give the same clusters.

Everything random comes from ``np.random.SeedSequence(seed)``, and the fit runs in the
client on a sample that does not depend on how the shards are read. So a seed and a
shard list give the same clusters under any scheduler, any number of workers and any
``batch_rows``. Embeddings are computed in float64 and rounded once, so a row gets the
same bits whatever batch it is read in (BLAS sums in an order that depends on the matrix
shape and thread count). Each row is then scored against the centroids on its own
(:func:`pipeline.stages.kmeans.nearest`). Mostly-zero rows (bag-of-words features) are
projected by a numba kernel from their non-zeros only.
"""

from __future__ import annotations

import logging
import math
import os
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import dask
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from pipeline.dask_ops import captured, compute, first_error, share, task_prefix
from pipeline.stages.checks import check_float, check_int
from pipeline.stages.kmeans import assign_nearest, embed, fit_sample, nearest
from storage.errors import InputError, format_problem
from storage.fs import Shard
from storage.resources import StageClock, stage
from storage.schema import FeatureLayout, check_node_schema, feature_matrix
from storage.input import open_parquet
from storage.node_table import NodeTable

if TYPE_CHECKING:
    import distributed

__all__ = [
    "READ_COST",
    "RESTARTS",
    "SAMPLE_BYTES",
    "SAMPLE_PER_CLUSTER",
    "AttrClusters",
    "AttrModel",
    "attribute_clusters",
    "label_threads",
    "sample_rows",
    "scatter_labels",
]

log = logging.getLogger(__name__)

#: Target uncompressed bytes per record batch when reading features.
_BATCH_BYTES = 64 << 20
#: The sample holds at least this many rows per cluster (``docs/results/kmeans``).
SAMPLE_PER_CLUSTER = 1024
#: At most this many bytes of embedded sample rows (``float32 [m, d']``).
SAMPLE_BYTES = 128 << 20
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


def _where(shard: Shard, first: int, last: int) -> str:
    return f"file {shard.url}, rows {first}..{last}"


def _checked_features(batch: pa.RecordBatch, layout: FeatureLayout, shard: Shard, feat_dim: int,
                      rows: tuple[int, int]) -> np.ndarray:
    """The batch's ``[b, d]`` features, or InputError naming the file rows ``rows``."""
    feat = _features(batch, layout, shard, rows[0])
    if feat.shape[1] != feat_dim:
        raise InputError(
            format_problem(
                f"{_where(shard, *rows)}, column '{layout.columns[0]}'",
                f"feature width {feat_dim} (as in the other node shards)",
                f"width {feat.shape[1]}",
                "every node shard must store vectors of the same width d.",
            )
        )
    return feat


def _checked_embed(feat: np.ndarray, projection: np.ndarray | None, layout: FeatureLayout,
                   shard: Shard, rows: tuple[int, int]) -> np.ndarray:
    """:func:`embed`, or InputError when a row is not finite."""
    x = embed(feat, projection)
    if not np.isfinite(x).all():
        raise InputError(
            format_problem(
                f"{_where(shard, *rows)}, column '{layout.columns[0]}'",
                "finite features",
                "NaN or inf values",
                "run `asepr validate` on the input and fix what it reports.",
            )
        )
    return x


def _all_rows(pf: pq.ParquetFile, shard: Shard, feat_dim: int, projection: np.ndarray | None,
              batch_rows: int) -> Iterator[tuple[int, np.ndarray, np.ndarray]]:
    """``(first row, global_nid, embedded rows)`` of every row of a node shard, batch by
    batch, checked (at most the footer's row count, which the caller may allocate)."""
    layout, _, _ = check_node_schema(pf.schema_arrow, shard.url)
    n = pf.metadata.num_rows
    row0 = 0
    for batch in pf.iter_batches(batch_size=_rows_per_batch(feat_dim, batch_rows),
                                 columns=["id", *layout.columns]):
        b = batch.num_rows
        rows = (row0, row0 + b - 1)
        if row0 + b > n:
            raise InputError(
                format_problem(_where(shard, *rows), f"{n} rows (the footer's count)", "more rows")
            )
        id_col = batch.column("id")
        if id_col.null_count:
            raise InputError(
                format_problem(f"{_where(shard, *rows)}, column 'id'", "no null ids",
                               f"{id_col.null_count} null(s)")
            )
        feat = _checked_features(batch, layout, shard, feat_dim, rows)
        ids = id_col.to_numpy().astype(np.int64, copy=False)
        yield row0, ids, _checked_embed(feat, projection, layout, shard, rows)
        row0 += b
    if row0 != n:
        raise InputError(
            format_problem(f"file {shard.url}", f"{n} rows (the footer's count)", f"{row0}")
        )


def _picked_rows(shard: Shard, feat_dim: int, projection: np.ndarray | None, picks: np.ndarray,
                 batch_rows: int) -> np.ndarray:
    """The embedded rows ``picks`` (sorted file row numbers) of a node shard, in order.

    Only the feature column of the row groups that hold a pick is decoded, one row group
    at a time; only the picked rows are embedded and checked.
    """
    pf = open_parquet(shard)
    layout, _, _ = check_node_schema(pf.schema_arrow, shard.url)
    width = projection.shape[1] if projection is not None else feat_dim
    out = np.empty((len(picks), width), dtype=np.float32)
    starts = _row_group_starts(pf.metadata)
    group_of = np.searchsorted(starts, picks, side="right") - 1
    if len(picks) and (picks[-1] >= starts[-1] or picks[0] < 0):
        raise InputError(format_problem(f"file {shard.url}", f"{starts[-1]} rows (the footer's "
                                        "count)", f"a row {int(picks[-1])} to sample"))
    done = 0
    for g in np.unique(group_of):
        row0 = int(starts[g])
        for batch in pf.iter_batches(batch_size=_rows_per_batch(feat_dim, batch_rows),
                                     row_groups=[int(g)], columns=list(layout.columns)):
            b = batch.num_rows
            hi = done + int(np.searchsorted(picks[done:], row0 + b))
            if hi > done:
                rows = (int(picks[done]), int(picks[hi - 1]))
                feat = _checked_features(batch, layout, shard, feat_dim, (row0, row0 + b - 1))
                out[done:hi] = _checked_embed(feat[picks[done:hi] - row0], projection, layout,
                                              shard, rows)
                done = hi
            row0 += b
    if done != len(picks):
        raise InputError(format_problem(f"file {shard.url}", f"{starts[-1]} rows (the footer's "
                                        "count)", f"fewer rows in its row groups (no row "
                                        f"{int(picks[done])})"))
    return out


def _row_group_starts(meta: pq.FileMetaData) -> np.ndarray:
    """``int64 [groups + 1]``: the first file row of each row group, then the row count."""
    sizes = [meta.row_group(g).num_rows for g in range(meta.num_row_groups)]
    return np.r_[0, np.cumsum(sizes, dtype=np.int64)].astype(np.int64)


def _sample_shard(shard: Shard, feat_dim: int, projection: np.ndarray | None,
                  picks: np.ndarray | None,
                  batch_rows: int) -> tuple[np.ndarray | None, np.ndarray]:
    """Step 1 for one shard: ``(None, picked rows)``, or ``(global_nid, every row)`` when
    ``picks`` is None (the sample is every row)."""
    if picks is not None:
        return None, _picked_rows(shard, feat_dim, projection, picks, batch_rows)
    pf = open_parquet(shard)
    n = pf.metadata.num_rows
    ids = np.empty(n, dtype=np.int64)
    width = projection.shape[1] if projection is not None else feat_dim
    emb = np.empty((n, width), dtype=np.float32)
    for row0, batch_ids, x in _all_rows(pf, shard, feat_dim, projection, batch_rows):
        ids[row0 : row0 + len(x)] = batch_ids
        emb[row0 : row0 + len(x)] = x
    return ids, emb


def _label_rows(x: np.ndarray, centroids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(int32 labels, float64 squared distances)`` of embedded rows: nearest centroid."""
    labels, _, dist = nearest(x, centroids)
    return labels, dist


def _label_shard(shard: Shard, feat_dim: int, projection: np.ndarray | None, centroids: np.ndarray,
                 batch_rows: int) -> tuple[np.ndarray, np.ndarray, float]:
    """Step 3 for one shard: ``(global_nid, attr_cluster_id, inertia)``; the inertia is the
    exactly rounded sum of the rows' squared distances, whatever the batches."""
    pf = open_parquet(shard)
    n = pf.metadata.num_rows
    ids = np.empty(n, dtype=np.int64)
    labels = np.empty(n, dtype=np.int32)
    dist = np.empty(n, dtype=np.float64)
    for row0, batch_ids, x in _all_rows(pf, shard, feat_dim, projection, batch_rows):
        ids[row0 : row0 + len(x)] = batch_ids
        labels[row0 : row0 + len(x)], dist[row0 : row0 + len(x)] = _label_rows(x, centroids)
    return ids, labels, math.fsum(dist)


def scatter_labels(
    parts: list[tuple[np.ndarray, np.ndarray]], shards: list[Shard], num_nodes: int, what: str
) -> np.ndarray:
    """Place per-shard ``(global_nid, cluster id)`` into one ``int32 [N]`` array."""
    attr_cluster_id = np.full(num_nodes, -1, dtype=np.int32)
    seen = np.zeros(num_nodes, dtype=bool)
    # Row of each id within its shard: of repeated ids only the last row keeps its own
    # (O(rows), without the sort np.unique would need).
    position = np.empty(num_nodes, dtype=np.int32)
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
        rows = np.arange(len(ids), dtype=np.int32)
        position[ids] = rows
        if seen[ids].any() or not np.array_equal(position[ids], rows):
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
    """The fixed context of one k-means run: the shards, where tasks run, how they read."""

    shards: list[Shard]
    client: distributed.Client | None
    prefix: str
    batch_rows: int
    table: NodeTable | None = None


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
    batch_rows: int = 65_536,
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
        The validator's decoded copy of these shards (:mod:`storage.node_table`): the
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
        job = _Job(node_shards, client, task_prefix("attr"), batch_rows, table)
        result = _kmeans_impl(job, num_nodes, num_clusters, seed, max_passes, tol, sample_size,
                              restarts, projection_dim, projection_threshold)
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


def _shared(value: np.ndarray | None, job: _Job, name: str):
    """``value`` as one graph node or scattered future (:func:`share`); None stays None."""
    return None if value is None else share(value, job.client, f"{job.prefix}-{name}")


def _draw_sample(job: _Job, rows: np.ndarray, feat_dim: int, projection: np.ndarray | None,
                 n_sample: int, seq: np.random.SeedSequence) -> tuple[np.ndarray, list | None]:
    """Step 1: ``(sample, per-shard (ids, rows))``; the second is None unless the sample is
    every row, when it holds each shard's embedded rows for step 3."""
    total = int(rows.sum())
    every = n_sample == total
    rng = np.random.default_rng(seq)
    picks = None if every else np.sort(rng.choice(total, size=n_sample, replace=False))
    if job.table is not None:
        return _table_sample(job.table, projection, picks)
    offsets = np.r_[0, np.cumsum(rows)]
    proj_node = _shared(projection, job, "projection")
    tasks = []
    for i, shard in enumerate(job.shards):
        local = None
        if not every:
            local = picks[(picks >= offsets[i]) & (picks < offsets[i + 1])] - offsets[i]
        tasks.append(
            dask.delayed(_sample_shard)(
                shard, feat_dim, proj_node, local, job.batch_rows,
                dask_key_name=f"{job.prefix}-sample-{i}",
            )
        )
    pieces = compute(tasks, job.client)
    sample = np.concatenate([x for _, x in pieces])
    return sample, (pieces if every else None)


def _label_all(job: _Job, projection: np.ndarray | None, centroids: np.ndarray, feat_dim: int,
               num_nodes: int, kept: list | None) -> tuple[np.ndarray, float]:
    """Step 3: ``(attr_cluster_id, full-data inertia)``; in the client when ``kept`` holds
    every shard's embedded rows, else one Dask task per shard."""
    if kept is None and job.table is not None:
        return _table_labels(job, projection, centroids)
    if kept is not None:
        labelled = []
        for ids, x in kept:
            labels, dist = _label_rows(x, centroids)
            labelled.append((ids, labels, math.fsum(dist)))
    else:
        proj_node = _shared(projection, job, "projection-labels")
        cent_node = share(centroids, job.client, f"{job.prefix}-centroids")
        labelled = compute(
            [
                dask.delayed(_label_shard)(shard, feat_dim, proj_node, cent_node, job.batch_rows,
                                           dask_key_name=f"{job.prefix}-labels-{i}")
                for i, shard in enumerate(job.shards)
            ],
            job.client,
        )
    if job.table is not None:  # every row, from the table: one piece
        attr_cluster_id = np.full(num_nodes, -1, dtype=np.int32)
        attr_cluster_id[labelled[0][0]] = labelled[0][1]
    else:
        attr_cluster_id = scatter_labels([(ids, lab) for ids, lab, _ in labelled], job.shards,
                                         num_nodes, "k-means")
    return attr_cluster_id, math.fsum(x for _, _, x in labelled)


def _table_scan(table: NodeTable, num_nodes: int) -> tuple[np.ndarray, int]:
    """Step 0 from the decoded table: its rows and width."""
    if table.num_nodes != num_nodes or table.feat_dim < 1:
        raise InputError(format_problem(
            f"decoded node table {table.directory}", f"{num_nodes:,} rows of width >= 1",
            f"{table.num_nodes:,} rows of width {table.feat_dim}", "rerun the command: the copy is rewritten."))
    return np.array([num_nodes], dtype=np.int64), table.feat_dim


def _table_embed(feat: np.ndarray, projection: np.ndarray | None, table: NodeTable) -> np.ndarray:
    x = embed(feat, projection)
    if not np.isfinite(x).all():
        raise InputError(format_problem(f"decoded node table {table.directory}", "finite embedded features",
                                        "NaN or inf values", "rerun the command: the copy is rewritten."))
    return x


def _table_sample(table: NodeTable, projection: np.ndarray | None,
                  picks: np.ndarray | None) -> tuple[np.ndarray, list | None]:
    """Step 1 from the decoded table: the rows ``picks`` (shard-order row numbers; None:
    every row, kept with their ids as one piece for step 3)."""
    rows = np.arange(table.num_nodes, dtype=np.int64) if picks is None else picks
    ids = table.ids_of_rows(rows)
    if picks is None and not table.has_order:
        feat = table.rows(0, table.num_nodes)
    else:
        (feat,) = table.gather(ids, ("x",))
    sample = _table_embed(feat, projection, table)
    return sample, ([(ids, sample)] if picks is None else None)


def label_threads() -> int:
    """Threads that label the decoded node table: the cores, at most 4."""
    return max(1, min(4, os.cpu_count() or 1))


def _table_labels(job: _Job, projection: np.ndarray | None, centroids: np.ndarray) -> tuple[np.ndarray, float]:
    """Step 3 from the decoded table: blocks of ids on threads; ``(attr_cluster_id, inertia)``."""
    table = job.table
    n = table.num_nodes
    attr_cluster_id = np.empty(n, dtype=np.int32)
    block = _rows_per_batch(table.feat_dim, job.batch_rows)

    def label(start: int) -> float:
        stop = min(n, start + block)
        labels, dist = _label_rows(_table_embed(table.rows(start, stop), projection, table), centroids)
        attr_cluster_id[start:stop] = labels
        return math.fsum(dist)

    with ThreadPoolExecutor(max_workers=label_threads()) as pool:
        sums = list(pool.map(label, range(0, n, block)))
    return attr_cluster_id, math.fsum(sums)


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


def _kmeans_impl(job: _Job, num_nodes: int, num_clusters: int, seed: int, max_passes: int,
                 tol: float, sample_size: int, restarts: int, projection_dim: int,
                 projection_threshold: int) -> AttrClusters:
    """Steps 0-3 of the module docstring."""
    seq_projection, seq_sample, seq_init = np.random.SeedSequence(seed).spawn(3)
    clock = StageClock()
    rows, feat_dim = _scan(job, num_nodes) if job.table is None else _table_scan(job.table, num_nodes)
    total = int(rows.sum())
    if num_clusters > num_nodes:
        log.info("attribute clusters: C = %d clamped to N = %d", num_clusters, num_nodes)
        num_clusters = num_nodes
    projection = _random_projection(feat_dim, projection_dim, projection_threshold, seq_projection)
    width = projection_dim if projection is not None else feat_dim
    clock.tick("scan")

    n_sample = sample_rows(total, num_clusters, feat_dim, width, sample_size, max_passes, restarts)
    sample, kept = _draw_sample(job, rows, feat_dim, projection, n_sample, seq_sample)
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
    attr_cluster_id, inertia = _label_all(job, projection, fit.centroids, feat_dim, num_nodes, kept)
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
