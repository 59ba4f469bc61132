"""Spherical k-means, the in-memory math: embedding, nearest centroids, seeding, fitting.

:mod:`asepr.pipeline.stages.attr_cluster` fits the centroids on an in-memory sample and labels
the shards in one Dask pass; every step that touches numbers is here: :func:`embed` (the
seeded projection, then L2 normalisation), :func:`assign_nearest` (largest cosine),
:func:`row_inertia` (each row's squared distance to its centroid), :func:`kmeans_pp`
(the seeding), :func:`cluster_stats` and :func:`update_centroids` (one Lloyd step:
normalised sums, empty clusters re-seeded) and :func:`fit_sample` (restarts of k-means++
then Lloyd to convergence, on the sample). Everything is float64 inside and rounded
once, so a row gets the same bits whatever batch it is read in.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numba
import numpy as np

__all__ = [
    "SampleFit",
    "assign_nearest",
    "cluster_stats",
    "embed",
    "fit_sample",
    "kmeans_pp",
    "lloyd",
    "nearest",
    "sq_dist",
    "update_centroids",
]

#: Rows with at most this share of non-zero features are projected sparsely.
_SPARSE_DENSITY = 0.05


def embed(feat: np.ndarray, projection: np.ndarray | None) -> np.ndarray:
    """Project (if any), then L2-normalise rows; zero rows stay zero. Returns a new array.

    The arithmetic is float64 and rounded to float32 once at the end: BLAS sums in an
    order that depends on the matrix shape and thread count, and float64 makes those
    differences vanish in the rounding, so a row embeds to the same bits whether it is
    read in a batch of 1 or 65,536 rows, on any worker.
    """
    if projection is None:
        x = np.asarray(feat, dtype=np.float64)
    else:
        x = _project(feat, projection)
    norm = np.sqrt(np.einsum("ij,ij->i", x, x))
    scale = np.divide(1.0, norm, out=np.zeros_like(norm), where=norm > 0)
    return (x * scale[:, None]).astype(np.float32)


@numba.njit(cache=True, nogil=True)
def _project_sparse_rows(feat, rows, projection, out):  # pragma: no cover - numba
    """``out[r] = feat[rows[r]] @ projection``, skipping zeros, summed in column order."""
    d = feat.shape[1]
    width = projection.shape[1]
    for r in range(rows.shape[0]):
        i = rows[r]
        for j in range(d):
            v = feat[i, j]
            if v != 0.0:
                vv = np.float64(v)
                for k in range(width):
                    out[r, k] += vv * projection[j, k]


def _project(feat: np.ndarray, projection: np.ndarray) -> np.ndarray:
    """``feat @ projection`` in float64.

    Rows that are mostly zeros (bag-of-words: Cora, Amazon, Coauthor, MUSAE) go through a
    numba kernel that costs O(nnz·d') and never widens them to float64; the others
    through one float64 BLAS product. The choice is per row, so a row's embedding does
    not depend on the rows read with it.
    """
    n, d = feat.shape
    out = np.zeros((n, projection.shape[1]), dtype=np.float64)
    sparse = np.count_nonzero(feat, axis=1) <= _SPARSE_DENSITY * d
    rows = np.flatnonzero(sparse)
    if len(rows):
        feat_c = np.ascontiguousarray(feat, dtype=np.float32)
        proj64 = np.ascontiguousarray(projection, dtype=np.float64)
        part = np.zeros((len(rows), projection.shape[1]), dtype=np.float64)
        _project_sparse_rows(feat_c, rows.astype(np.int64), proj64, part)
        out[rows] = part
    dense = np.flatnonzero(~sparse)
    if len(dense):
        out[dense] = np.asarray(feat[dense], dtype=np.float64) @ projection.astype(np.float64)
    return out


#: Rows scored together by the assignment kernel: independent sums keep the FPU busy.
_ROW_BLOCK = 8


@numba.njit(cache=True, nogil=True)
def _nearest_rows(x, c_t, labels, best, dist):  # pragma: no cover - numba
    """Per row: the largest ``x·c`` (float64, summed in feature order; ties to the lower
    id), that score and the squared distance ``|x - c|²``, written to the outputs.

    Rows go :data:`_ROW_BLOCK` at a time only for speed: each row's sums are the same
    whatever block it is in.
    """
    n, width = x.shape
    num_clusters = c_t.shape[1]
    scores = np.zeros((_ROW_BLOCK, num_clusters))
    for i0 in range(0, n, _ROW_BLOCK):
        rows = min(_ROW_BLOCK, n - i0)
        scores[:] = 0.0
        for t in range(width):
            for r in range(rows):
                v = np.float64(x[i0 + r, t])
                for j in range(num_clusters):
                    scores[r, j] += v * c_t[t, j]
        for r in range(rows):
            top = 0
            for j in range(1, num_clusters):
                if scores[r, j] > scores[r, top]:
                    top = j
            d2 = 0.0
            for t in range(width):
                diff = np.float64(x[i0 + r, t]) - c_t[t, top]
                d2 += diff * diff
            labels[i0 + r] = top
            best[i0 + r] = scores[r, top]
            dist[i0 + r] = d2


def nearest(x: np.ndarray, centroids: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(labels int32, best dot float64, squared distance float64)`` of each row.

    The nearest centroid is the one of largest dot product (largest cosine for unit
    rows); ties go to the lower cluster id. Each row is scored on its own, in float64
    and in feature order, so its label and distance do not depend on the rows read with
    it, the batch size or the thread count (a BLAS product would: its summation order
    follows the matrix shape); with a few dozen clusters it is also faster than BLAS.
    """
    n = len(x)
    labels = np.empty(n, dtype=np.int32)
    best = np.empty(n, dtype=np.float64)
    dist = np.empty(n, dtype=np.float64)
    if n:
        c_t = np.ascontiguousarray(np.asarray(centroids, dtype=np.float64).T)
        _nearest_rows(np.ascontiguousarray(x, dtype=np.float32), c_t, labels, best, dist)
    return labels, best, dist


def assign_nearest(x: np.ndarray, centroids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(labels int32, best dot float64)``: the nearest centroid of each row (:func:`nearest`)."""
    labels, best, _ = nearest(x, centroids)
    return labels, best


def sq_dist(points: np.ndarray, p_sq: np.ndarray, centers: np.ndarray) -> np.ndarray:
    """``float64 [len(centers), len(points)]`` squared Euclidean distances, clipped at 0."""
    c_sq = np.einsum("ij,ij->i", centers, centers, dtype=np.float64)
    d2 = p_sq[None, :] + c_sq[:, None] - 2.0 * (centers @ points.T).astype(np.float64)
    return np.maximum(d2, 0.0)


def kmeans_pp(points: np.ndarray, num_clusters: int, rng: np.random.Generator) -> np.ndarray:
    """Greedy k-means++ seeding (D² sampling, ``2 + ln C`` candidates per step)."""
    n = len(points)
    p_sq = np.einsum("ij,ij->i", points, points, dtype=np.float64)
    chosen = [int(rng.integers(n))]
    closest = sq_dist(points, p_sq, points[chosen])[0]
    trials = 2 + int(math.log(num_clusters))
    for _ in range(1, num_clusters):
        cum = np.cumsum(closest)
        total = cum[-1]
        if total <= 0:
            # Every point coincides with a centre: duplicates are unavoidable.
            chosen.append(int(rng.integers(n)))
            continue
        cand = np.minimum(np.searchsorted(cum, rng.random(trials) * total, side="right"), n - 1)
        d2 = np.minimum(closest[None, :], sq_dist(points, p_sq, points[cand]))
        best = int(np.argmin(d2.sum(axis=1)))
        chosen.append(int(cand[best]))
        closest = d2[best]
    return np.array(points[chosen], dtype=np.float32)


def update_centroids(
    sums: np.ndarray, counts: np.ndarray, old: np.ndarray, sample: np.ndarray
) -> tuple[np.ndarray, int]:
    """New unit centroids from the cluster sums; returns ``(centroids, re-seeded)``."""
    norm = np.sqrt(np.einsum("ij,ij->i", sums, sums))
    ok = (counts > 0) & (norm > 0)
    new = old.copy()
    new[ok] = (sums[ok] / norm[ok, None]).astype(np.float32)
    empty = np.flatnonzero(~ok)
    reseeded = 0
    if len(empty) and len(sample):
        p_sq = np.einsum("ij,ij->i", sample, sample, dtype=np.float64)
        others = np.flatnonzero(ok)
        closest = (
            sq_dist(sample, p_sq, new[others]).min(axis=0)
            if len(others)
            else np.full(len(sample), np.inf)
        )
        for j in empty:
            far = int(np.argmax(closest))
            if not closest[far] > 0:
                break
            new[j] = sample[far]
            closest = np.minimum(closest, sq_dist(sample, p_sq, new[j : j + 1])[0])
            reseeded += 1
    return new, reseeded


@numba.njit(cache=True, nogil=True)
def _add_rows(x, labels, sums):  # pragma: no cover - numba
    """``sums[labels[i]] += x[i]`` in float64, in row order."""
    for i in range(x.shape[0]):
        j = labels[i]
        for t in range(x.shape[1]):
            sums[j, t] += np.float64(x[i, t])


def cluster_stats(x: np.ndarray, centroids: np.ndarray) -> tuple[np.ndarray, np.ndarray, float]:
    """One Lloyd assignment of ``x``: ``(float64 [C, d'] sums, int64 [C] counts, inertia)``.

    Sums are taken in row order and the inertia with :func:`math.fsum`, so the result
    depends on the rows only, never on threads.
    """
    num_clusters, width = centroids.shape
    x = np.ascontiguousarray(x, dtype=np.float32)
    labels, _, dist = nearest(x, centroids)
    sums = np.zeros((num_clusters, width), dtype=np.float64)
    _add_rows(x, labels, sums)
    counts = np.bincount(labels, minlength=num_clusters).astype(np.int64)
    return sums, counts, math.fsum(dist)


@dataclass(frozen=True, eq=False)
class SampleFit:
    """Centroids fitted on a sample by :func:`lloyd` (or :func:`fit_sample`).

    Attributes
    ----------
    centroids
        ``float32 [C, d']``.
    iterations
        Lloyd updates run.
    converged
        Whether the last update moved no centroid by ``tol`` or more.
    history
        The sample inertia of the assignment before each update.
    inertia
        The sample inertia of the final centroids (at most ``history[-1]``).
    """

    centroids: np.ndarray
    iterations: int
    converged: bool
    history: tuple[float, ...]
    inertia: float


def lloyd(points: np.ndarray, centroids: np.ndarray, *, max_iter: int, tol: float,
          reseed_from: np.ndarray) -> SampleFit:
    """Spherical Lloyd iterations on in-memory ``points`` from ``centroids``.

    Each step assigns every point to its nearest centroid, then moves each centroid to
    its cluster's normalised sum (an empty cluster is re-seeded from the point of
    ``reseed_from`` farthest from its nearest centroid). Stops when no centroid moves by
    ``tol`` or more (Euclidean), or after ``max_iter`` steps. The sample inertia never
    increases from one step to the next.
    """
    history: list[float] = []
    converged = False
    for _ in range(max_iter):
        sums, counts, inertia = cluster_stats(points, centroids)
        history.append(inertia)
        new, _ = update_centroids(sums, counts, centroids, reseed_from)
        shift = float(np.sqrt(np.einsum("ij,ij->i", new - centroids, new - centroids)).max())
        centroids = new
        if shift < tol:
            converged = True
            break
    final = cluster_stats(points, centroids)[2]
    return SampleFit(centroids=centroids, iterations=len(history), converged=converged,
                     history=tuple(history), inertia=float(final))


def fit_sample(points: np.ndarray, num_clusters: int, *, restarts: int, max_iter: int, tol: float,
               seq: np.random.SeedSequence) -> SampleFit:
    """The best of ``restarts`` runs of k-means++ then :func:`lloyd` on ``points``.

    Zero rows take part in the sample inertia but are never chosen as centroids. Each
    restart has its own child of ``seq``; the lowest final sample inertia wins (the
    first on a tie). With no non-zero point, any ``C`` unit centroids are returned.
    """
    nonzero = points[np.einsum("ij,ij->i", points, points) > 0]
    width = points.shape[1]
    if not len(nonzero):
        centroids = np.zeros((num_clusters, width), dtype=np.float32)
        centroids[np.arange(num_clusters), np.arange(num_clusters) % width] = 1.0
        return SampleFit(centroids, 0, True, (), float(len(points)))
    best: SampleFit | None = None
    for child in seq.spawn(restarts):
        start = kmeans_pp(nonzero, num_clusters, np.random.default_rng(child))
        fit = lloyd(points, start, max_iter=max_iter, tol=tol, reseed_from=nonzero)
        if best is None or fit.inertia < best.inertia:
            best = fit
    return best
