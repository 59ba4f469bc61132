"""Spherical k-means, the in-memory math: embedding, nearest centroids, seeding, updates.

:mod:`pipeline.stages.attr_cluster` runs k-means out of core as Dask passes over spilled
shards; every step that touches numbers is here: :func:`embed` (the seeded projection,
then L2 normalisation), :func:`assign_nearest` (largest cosine), :func:`kmeans_pp`
(the seeding, on a sample) and :func:`update_centroids` (normalised sums, empty
clusters re-seeded). Everything is float64 inside and rounded once, so a row gets the
same bits whatever batch it is read in.
"""

from __future__ import annotations

import math

import numba
import numpy as np

__all__ = ["ASSIGN_ROWS", "assign_nearest", "embed", "kmeans_pp", "sq_dist", "update_centroids"]

#: Rows per ``X @ C.T`` block: bounds the ``[rows, C]`` score matrix.
ASSIGN_ROWS = 8192
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


def assign_nearest(x: np.ndarray, centroids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Nearest centroid (largest dot product) of each row, in row blocks.

    Returns ``(labels int32, best dot float64)``; ties go to the lower cluster id. The
    scores are float64 for the same reason as in :func:`embed`.
    """
    n = len(x)
    labels = np.empty(n, dtype=np.int32)
    best = np.empty(n, dtype=np.float64)
    c_t = np.ascontiguousarray(centroids.T, dtype=np.float64)
    for a in range(0, n, ASSIGN_ROWS):
        scores = np.asarray(x[a : a + ASSIGN_ROWS], dtype=np.float64) @ c_t
        lab = scores.argmax(axis=1)
        labels[a : a + ASSIGN_ROWS] = lab
        best[a : a + ASSIGN_ROWS] = scores[np.arange(len(lab)), lab]
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
