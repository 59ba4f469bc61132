"""The in-memory k-means math of asepr.pipeline.stages.kmeans: assignment, Lloyd, the sampled fit."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from asepr.pipeline.stages.kmeans import cluster_stats, fit_sample, kmeans_pp, lloyd, nearest


def unit_rows(rng: np.random.Generator, n: int, dim: int) -> np.ndarray:
    x = rng.normal(size=(n, dim)).astype(np.float32)
    return (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float32)


@settings(deadline=None, max_examples=30)
@given(seed=st.integers(0, 2**31), n=st.integers(1, 60), dim=st.integers(1, 40), k=st.integers(1, 9),
       cut=st.integers(0, 60))
def test_nearest_is_the_brute_force_argmax_and_row_by_row(seed, n, dim, k, cut):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, dim)).astype(np.float32)
    centroids = rng.normal(size=(k, dim)).astype(np.float32)
    labels, best, dist = nearest(x, centroids)
    scores = x.astype(np.float64) @ centroids.astype(np.float64).T
    assert labels.dtype == np.int32 and labels.shape == (n,)
    np.testing.assert_allclose(best, scores.max(axis=1), rtol=1e-12, atol=1e-12)
    # the label is a best score (a tie may break either way in the last bit)
    assert np.all(scores[np.arange(n), labels] >= scores.max(axis=1) - 1e-9)
    diff = x.astype(np.float64) - centroids.astype(np.float64)[labels]
    np.testing.assert_allclose(dist, np.einsum("ij,ij->i", diff, diff), rtol=1e-12, atol=1e-12)
    # a row gets the same bits whatever rows it is scored with
    cut = min(cut, n)
    for part, sl in ((nearest(x[:cut], centroids), slice(0, cut)), (nearest(x[cut:], centroids), slice(cut, n))):
        np.testing.assert_array_equal(part[0], labels[sl])
        np.testing.assert_array_equal(part[1], best[sl])
        np.testing.assert_array_equal(part[2], dist[sl])


def test_nearest_ties_go_to_the_lower_cluster_and_empty_input():
    centroids = np.array([[1.0, 0.0], [1.0, 0.0], [0.0, 1.0]], dtype=np.float32)
    labels, _, _ = nearest(np.array([[1.0, 0.0], [0.0, 1.0], [0.0, 0.0]], dtype=np.float32), centroids)
    assert labels.tolist() == [0, 2, 0]
    labels, best, dist = nearest(np.zeros((0, 2), dtype=np.float32), centroids)
    assert len(labels) == len(best) == len(dist) == 0


def test_cluster_stats_matches_a_plain_reference():
    rng = np.random.default_rng(3)
    x = unit_rows(rng, 500, 6)
    centroids = unit_rows(rng, 4, 6)
    sums, counts, inertia = cluster_stats(x, centroids)
    labels = (x.astype(np.float64) @ centroids.astype(np.float64).T).argmax(axis=1)
    ref = np.zeros((4, 6))
    np.add.at(ref, labels, x.astype(np.float64))
    np.testing.assert_allclose(sums, ref, rtol=1e-12, atol=1e-12)
    np.testing.assert_array_equal(counts, np.bincount(labels, minlength=4))
    diff = x.astype(np.float64) - centroids.astype(np.float64)[labels]
    assert inertia == pytest.approx(float(np.einsum("ij,ij->", diff, diff)), rel=1e-12)


@settings(deadline=None, max_examples=20)
@given(seed=st.integers(0, 2**31), k=st.integers(1, 8))
def test_lloyd_inertia_never_increases(seed, k):
    rng = np.random.default_rng(seed)
    x = unit_rows(rng, 300, 5)
    start = kmeans_pp(x, k, np.random.default_rng(seed))
    fit = lloyd(x, start, max_iter=15, tol=0.0, reseed_from=x)
    history = np.array(fit.history + (fit.inertia,))
    assert len(fit.history) == fit.iterations <= 15
    assert np.all(np.diff(history) <= 1e-9 * history[0])
    np.testing.assert_allclose(np.linalg.norm(fit.centroids, axis=1), 1.0, atol=1e-5)
    assert fit.inertia == cluster_stats(x, fit.centroids)[2]


def test_fit_sample_keeps_the_best_restart_and_handles_zero_rows():
    rng = np.random.default_rng(0)
    x = unit_rows(rng, 2000, 8)
    x[::5] = 0.0
    seq = np.random.SeedSequence(7)
    best = fit_sample(x, 6, restarts=4, max_iter=20, tol=1e-6, seq=seq)
    singles = [
        lloyd(x, kmeans_pp(x[np.einsum("ij,ij->i", x, x) > 0], 6, np.random.default_rng(child)),
              max_iter=20, tol=1e-6, reseed_from=x[np.einsum("ij,ij->i", x, x) > 0]).inertia
        for child in np.random.SeedSequence(7).spawn(4)
    ]
    assert best.inertia == min(singles)
    # every zero row costs exactly 1 (its distance to a unit centroid)
    _, _, dist = nearest(x[::5], best.centroids)
    np.testing.assert_allclose(dist, 1.0, rtol=1e-6)
    # all rows zero: any unit centroids, and nothing to fit
    zeros = fit_sample(np.zeros((10, 3), dtype=np.float32), 4, restarts=2, max_iter=5, tol=0.0, seq=seq)
    np.testing.assert_allclose(np.linalg.norm(zeros.centroids, axis=1), 1.0)
    assert zeros.iterations == 0 and zeros.inertia == 10.0
