"""Stage ③: attribute clustering (spherical k-means over shards, or a categorical column)."""

from __future__ import annotations

import logging
import tempfile
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from asepr.pipeline.stages.attr_cluster import (
    RESTARTS,
    SAMPLE_BYTES,
    SAMPLE_PER_CLUSTER,
    AttrClusters,
    AttrModel,
    attribute_clusters,
    sample_rows,
)
from asepr.pipeline.stages.attr_column import column_clusters
from asepr.pipeline.stages.attr_rows import scatter_labels
from asepr.pipeline.stages.kmeans import fit_sample, kmeans_pp
from asepr.storage.errors import InputError, SchemaError
from asepr.storage.locations.fs import discover_shards
from tests.storage.helpers import node_table

NUM_BLOBS = 5


def blobs(n: int, dim: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """``NUM_BLOBS`` well-separated Gaussian blobs (in direction) and their labels."""
    rng = np.random.default_rng(seed)
    centers = rng.normal(size=(NUM_BLOBS, dim))
    centers *= 4.0 / np.linalg.norm(centers, axis=1, keepdims=True) * np.sqrt(dim) / 2
    blob = rng.integers(0, NUM_BLOBS, n)
    feat = centers[blob] + rng.normal(size=(n, dim))
    return feat.astype(np.float32), blob


def write_nodes(
    root: Path,
    feat: np.ndarray,
    *,
    num_shards: int = 3,
    layout: str = "fixed",
    extra: dict[str, pa.Array] | None = None,
    seed: int = 0,
) -> list:
    """Node shards holding a random permutation of the ids (ids need not be in order)."""
    (root / "nodes").mkdir(parents=True)
    order = np.random.default_rng(seed + 1).permutation(len(feat))
    for i, idx in enumerate(np.array_split(order, num_shards)):
        table = node_table(idx, feat[idx], layout=layout)
        for name, values in (extra or {}).items():
            table = table.append_column(name, values.take(pa.array(idx)))
        pq.write_table(table, root / "nodes" / f"part-{i:05d}.parquet")
    return discover_shards(root / "nodes")


def full_inertia(model: AttrModel, feat: np.ndarray, labels: np.ndarray) -> float:
    """The squared distances of every embedded row to its labelled centroid, summed."""
    diff = model.embed(feat).astype(np.float64) - model.centroids.astype(np.float64)[labels]
    return float(np.einsum("ij,ij->", diff, diff))


def purity(pred: np.ndarray, truth: np.ndarray) -> float:
    """min(cluster purity, blob purity): 1.0 only for a one-to-one match."""
    table = np.zeros((pred.max() + 1, truth.max() + 1), dtype=np.int64)
    np.add.at(table, (pred, truth), 1)
    return min(table.max(axis=1).sum(), table.max(axis=0).sum()) / len(pred)


@pytest.fixture(scope="module")
def blob_inputs(tmp_path_factory):
    out = {}
    for dim in (16, 300):
        feat, blob = blobs(1500, dim, seed=dim)
        root = tmp_path_factory.mktemp(f"blobs{dim}")
        out[dim] = (write_nodes(root, feat), feat, blob)
    return out


@pytest.mark.parametrize("dim", [16, 300])
def test_recovers_blobs(blob_inputs, dim, tmp_path):
    shards, feat, blob = blob_inputs[dim]
    result = attribute_clusters(shards, len(feat), NUM_BLOBS, seed=3)
    assert isinstance(result, AttrClusters)
    assert result.source == "kmeans" and result.num_clusters == NUM_BLOBS
    assert result.attr_cluster_id.dtype == np.int32 and result.attr_cluster_id.shape == (len(feat),)
    assert purity(result.attr_cluster_id, blob) >= 0.95
    model = result.model
    assert isinstance(model, AttrModel) and model.feat_dim == dim
    assert model.centroids.dtype == np.float32 and model.centroids.shape[0] == NUM_BLOBS
    np.testing.assert_allclose(np.linalg.norm(model.centroids, axis=1), 1.0, atol=1e-5)
    if dim > 256:  # the default projection_threshold, projecting to projection_dim = 256
        assert model.projection is not None and model.projection.shape == (dim, 256)
        assert model.centroids.shape[1] == 256
    else:
        assert model.projection is None and model.centroids.shape[1] == dim
    # the final assignment is reproducible from the model alone (incremental ingest)
    np.testing.assert_array_equal(model.predict(feat), result.attr_cluster_id)
    # the sample is every row here: the history is exact and never increases, and the
    # final figure is the full-data inertia of the labels
    history = np.array(result.inertia_history)
    assert len(history) == result.passes + 1
    assert np.all(np.diff(history) <= 1e-6 * history[0])
    assert result.inertia == history[-1]
    assert result.inertia == pytest.approx(full_inertia(model, feat, result.attr_cluster_id), rel=1e-9)
    assert result.converged and result.passes <= 10


def test_deterministic_for_a_seed(blob_inputs):
    shards, feat, _ = blob_inputs[300]
    a = attribute_clusters(shards, len(feat), 8, seed=11, max_passes=3)
    b = attribute_clusters(shards, len(feat), 8, seed=11, max_passes=3, batch_rows=97)
    np.testing.assert_array_equal(a.attr_cluster_id, b.attr_cluster_id)
    np.testing.assert_array_equal(a.model.centroids, b.model.centroids)
    np.testing.assert_array_equal(a.model.projection, b.model.projection)
    assert a.inertia_history == b.inertia_history
    c = attribute_clusters(shards, len(feat), 8, seed=12, max_passes=3)
    assert not np.array_equal(a.model.projection, c.model.projection)


def test_distributed_client_gives_the_same_clusters(blob_inputs, client):
    shards, feat, _ = blob_inputs[300]
    local = attribute_clusters(shards, len(feat), 7, seed=5, max_passes=4, sample_size=500)
    remote = attribute_clusters(
        shards, len(feat), 7, seed=5, max_passes=4, sample_size=500, client=client
    )
    np.testing.assert_array_equal(remote.attr_cluster_id, local.attr_cluster_id)
    np.testing.assert_array_equal(remote.model.centroids, local.model.centroids)
    assert remote.inertia_history == local.inertia_history
    col = column_clusters(shards, len(feat), "id", client=client)
    np.testing.assert_array_equal(col.attr_cluster_id, np.arange(len(feat)))


def test_all_feature_layouts_give_the_same_clusters(tmp_path):
    feat, _ = blobs(400, 12, seed=7)
    results = []
    for layout in ("fixed", "list", "columns"):
        shards = write_nodes(tmp_path / layout, feat, layout=layout)
        results.append(attribute_clusters(shards, len(feat), 4, seed=2, max_passes=5))
    for other in results[1:]:
        np.testing.assert_array_equal(other.attr_cluster_id, results[0].attr_cluster_id)
        np.testing.assert_array_equal(other.model.centroids, results[0].model.centroids)


def test_sampled_init_and_projection_threshold(blob_inputs):
    shards, feat, blob = blob_inputs[16]
    # a sample smaller than N, and a projection even though d is small
    result = attribute_clusters(
        shards,
        len(feat),
        NUM_BLOBS,
        seed=1,
        sample_size=200,
        projection_threshold=8,
        projection_dim=8,
    )
    assert result.model.projection.shape == (16, 8)
    assert purity(result.attr_cluster_id, blob) >= 0.9
    np.testing.assert_array_equal(result.model.predict(feat), result.attr_cluster_id)


def test_clamps_clusters_to_nodes_and_distinct_points(tmp_path, caplog):
    feat = np.repeat(np.eye(3, dtype=np.float32) * [[1.0], [2.0], [3.0]], [4, 3, 3], axis=0)
    shards = write_nodes(tmp_path / "a", feat, num_shards=2)
    with caplog.at_level(logging.INFO, logger="asepr.pipeline.stages.attr_cluster"):
        result = attribute_clusters(shards, len(feat), 50, seed=0)
    assert result.num_clusters == 3
    assert "clamped" in caplog.text
    assert purity(result.attr_cluster_id, np.repeat([0, 1, 2], [4, 3, 3])) == 1.0

    few = np.random.default_rng(0).normal(size=(4, 5)).astype(np.float32)
    result = attribute_clusters(write_nodes(tmp_path / "b", few, num_shards=2), 4, 9)
    assert result.num_clusters == 4
    assert sorted(result.attr_cluster_id.tolist()) == [0, 1, 2, 3]


def test_zero_feature_rows_and_empty_shard(tmp_path):
    feat, _ = blobs(200, 6, seed=4)
    feat[::10] = 0.0
    (tmp_path / "nodes").mkdir()
    pq.write_table(node_table(np.arange(100), feat[:100]), tmp_path / "nodes" / "part-0.parquet")
    pq.write_table(node_table(np.arange(0), feat[:0]), tmp_path / "nodes" / "part-1.parquet")
    pq.write_table(
        node_table(np.arange(100, 200), feat[100:]), tmp_path / "nodes" / "part-2.parquet"
    )
    result = attribute_clusters(discover_shards(tmp_path / "nodes"), 200, NUM_BLOBS)
    assert np.isfinite(result.model.centroids).all()
    assert result.attr_cluster_id.min() >= 0 and result.attr_cluster_id.max() < NUM_BLOBS
    np.testing.assert_array_equal(result.model.predict(feat), result.attr_cluster_id)
    assert (result.model.embed(feat[:1] * 0) == 0).all()


def test_errors(tmp_path, blob_inputs):
    shards, feat, _ = blob_inputs[16]
    with pytest.raises(InputError, match="num_clusters"):
        attribute_clusters(shards, len(feat), 0)
    with pytest.raises(InputError, match="rows"):
        attribute_clusters(shards, len(feat) + 1, 3)
    # mismatched feature widths between shards fail
    (tmp_path / "nodes").mkdir()
    pq.write_table(node_table([0, 1], np.ones((2, 3))), tmp_path / "nodes" / "part-0.parquet")
    pq.write_table(
        node_table([2, 3], np.ones((2, 4)), layout="list"), tmp_path / "nodes" / "part-1.parquet"
    )
    with pytest.raises(InputError, match="width"):
        attribute_clusters(discover_shards(tmp_path / "nodes"), 4, 2)
    # a missing id fails when the labels are scattered
    (tmp_path / "gap").mkdir()
    pq.write_table(node_table([0, 1, 5], np.eye(3)), tmp_path / "gap" / "part-0.parquet")
    with pytest.raises(InputError, match=r"\[0, 3\)"):
        attribute_clusters(discover_shards(tmp_path / "gap"), 3, 2)
    model = AttrModel(np.eye(2, dtype=np.float32), None, 2)
    with pytest.raises(InputError, match=r"\[n, 2\]"):
        model.predict(np.ones((3, 5)))


def test_scatter_labels_places_labels_and_rejects_repeated_or_missing_ids(tmp_path):
    shards = discover_shards(_two_node_shards(tmp_path))
    ids = [np.array([3, 0, 4]), np.array([1, 2])]
    labels = [np.array([7, 8, 9]), np.array([5, 6])]
    placed = scatter_labels(list(zip(ids, labels)), shards, 5, "test")
    assert placed.tolist() == [8, 5, 6, 7, 9]
    # repeated within one shard, across shards, and an id without a row
    for bad_ids, match in (([np.array([3, 0, 3]), np.array([1, 2])], "exactly once"),
                           ([np.array([3, 0, 4]), np.array([1, 4])], "exactly once"),
                           ([np.array([3, 0, 4]), np.array([1])], r"without a row, e\.g\. 2")):
        parts = [(i, np.zeros(len(i), dtype=np.int32)) for i in bad_ids]
        with pytest.raises(InputError, match=match) as err:
            scatter_labels(parts, shards, 5, "test")
        assert "part-" in str(err.value) or "node shards" in str(err.value)


def _two_node_shards(tmp_path: Path) -> Path:
    (tmp_path / "nodes").mkdir()
    pq.write_table(node_table([3, 0, 4], np.ones((3, 2))), tmp_path / "nodes" / "part-0.parquet")
    pq.write_table(node_table([1, 2], np.ones((2, 2))), tmp_path / "nodes" / "part-1.parquet")
    return tmp_path / "nodes"


def test_column_clusters_strings_ints_dictionary_and_nulls(tmp_path):
    n = 40
    rng = np.random.default_rng(0)
    words = np.array(["pear", "apple", "fig", None], dtype=object)[rng.integers(0, 4, n)]
    ints = rng.integers(-3, 3, n) * 100
    extra = {
        "fruit": pa.array(words.tolist(), type=pa.string()),
        "level": pa.array(ints),
        "dept": pa.array(words.tolist(), type=pa.string()).dictionary_encode(),
    }
    shards = write_nodes(tmp_path, rng.normal(size=(n, 3)), extra=extra)
    result = column_clusters(shards, n, "fruit")
    assert result.source == "column:fruit" and result.model is None
    expected_order = {"apple": 0, "fig": 1, "pear": 2, None: 3}
    np.testing.assert_array_equal(result.attr_cluster_id, [expected_order[w] for w in words])
    assert result.num_clusters == 4 and result.attr_cluster_id.dtype == np.int32
    by_dict = column_clusters(shards, n, "dept")
    np.testing.assert_array_equal(by_dict.attr_cluster_id, result.attr_cluster_id)
    levels = column_clusters(shards, n, "level")
    np.testing.assert_array_equal(levels.attr_cluster_id, np.searchsorted(np.unique(ints), ints))
    assert levels.num_clusters == len(np.unique(ints))


def test_column_clusters_missing_or_bad_column(tmp_path):
    shards = write_nodes(
        tmp_path, np.ones((6, 2)), num_shards=2, extra={"tag": pa.array(["a"] * 6)}
    )
    with pytest.raises(SchemaError) as info:
        column_clusters(shards, 6, "dept")
    message = str(info.value)
    assert "part-00000.parquet" in message and "'dept'" in message and "'tag'" in message
    with pytest.raises(SchemaError, match="categorical"):
        column_clusters(shards, 6, "feat")


@settings(deadline=None, max_examples=20)
@given(
    values=st.lists(st.one_of(st.none(), st.integers(-5, 5)), min_size=1, max_size=30),
    num_shards=st.integers(1, 4),
)
def test_column_clusters_property(values, num_shards):
    n = len(values)
    with tempfile.TemporaryDirectory() as tmp:
        shards = write_nodes(
            Path(tmp),
            np.ones((n, 2)),
            num_shards=min(num_shards, n),
            extra={"c": pa.array(values, type=pa.int32())},
        )
        result = column_clusters(shards, n, "c")
    distinct = sorted({v for v in values if v is not None})
    code = {v: i for i, v in enumerate(distinct)}
    code[None] = len(distinct)
    assert result.num_clusters == len(distinct) + (None in values)
    assert result.attr_cluster_id.tolist() == [code[v] for v in values]


@settings(deadline=None, max_examples=20)
@given(seed=st.integers(0, 2**31), k=st.integers(1, 12))
def test_kmeans_pp_picks_distinct_sample_points(seed, k):
    rng = np.random.default_rng(seed)
    points = rng.normal(size=(40, 4)).astype(np.float32)
    points /= np.linalg.norm(points, axis=1, keepdims=True)
    centers = kmeans_pp(points, k, np.random.default_rng(seed))
    assert centers.shape == (k, 4)
    rows = {tuple(c) for c in centers}
    assert len(rows) == k  # D² sampling never re-picks a chosen point while others remain
    assert rows <= {tuple(p) for p in points}


def test_cora_attribute_and_label_clusters(tmp_path):
    from asepr.storage.importers import import_dataset
    from asepr.workflows.demo import bundled_cora

    source = bundled_cora()
    meta = import_dataset("gnn-npz", source, tmp_path / "cora", shard_rows=1000)
    shards = discover_shards(tmp_path / "cora" / "nodes")
    n = meta["num_nodes"]
    result = attribute_clusters(shards, n, 7, seed=0, max_passes=5)
    assert result.model.projection.shape == (1433, 256)
    assert np.bincount(result.attr_cluster_id, minlength=7).min() > 0
    table = pq.read_table(tmp_path / "cora" / "nodes")
    ids = table.column("id").to_numpy()
    feat = np.stack(table.column("feat").to_numpy(zero_copy_only=False)).astype(np.float32)
    np.testing.assert_array_equal(result.model.predict(feat), result.attr_cluster_id[ids])
    by_label = column_clusters(shards, n, "label")
    assert by_label.num_clusters == 7


# --- the sampled fit (more rows than the sample) ------------------------------------


def sorted_blobs(root: Path, n: int, dim: int, num_blobs: int, *, num_shards: int = 4,
                 row_group_size: int = 97, seed: int = 0) -> tuple[list, np.ndarray]:
    """Overlapping blobs written sorted by blob, in small row groups: a sample that
    follows the file's order (its first row groups, say) misses whole blobs."""
    rng = np.random.default_rng(seed)
    centers = rng.normal(size=(num_blobs, dim)) * 1.5
    blob = np.sort(rng.integers(0, num_blobs, n))
    feat = (centers[blob] + rng.normal(size=(n, dim))).astype(np.float32)
    (root / "nodes").mkdir(parents=True)
    for i, idx in enumerate(np.array_split(np.arange(n), num_shards)):
        pq.write_table(node_table(idx, feat[idx]), root / "nodes" / f"part-{i:05d}.parquet",
                       row_group_size=row_group_size)
    return discover_shards(root / "nodes"), feat


@pytest.fixture(scope="module")
def sorted_input(tmp_path_factory):
    return sorted_blobs(tmp_path_factory.mktemp("sorted"), 30_000, 24, 12)


def test_sampled_fit_within_one_percent_of_full_lloyd(sorted_input):
    shards, feat = sorted_input
    n, clusters = len(feat), 8
    m = sample_rows(n, clusters, 24, 24, 2000, 10, RESTARTS)
    assert m < n  # the sampled path: labels come from a second read
    result = attribute_clusters(shards, n, clusters, seed=4, sample_size=2000)
    labels = result.attr_cluster_id
    assert labels.min() >= 0 and labels.max() < clusters and len(np.unique(labels)) == clusters
    np.testing.assert_array_equal(result.model.predict(feat), labels)
    # the reported inertia is the full-data inertia of the final labels
    assert result.inertia == pytest.approx(full_inertia(result.model, feat, labels), rel=1e-9)
    history = np.array(result.inertia_history)
    assert len(history) == result.passes + 1 and history[-1] == result.inertia
    assert np.all(np.diff(history[:-1]) <= 1e-9 * history[0])
    # a full Lloyd on every row, to convergence, is better by less than 1 %
    x = result.model.embed(feat)
    full = fit_sample(x, clusters, restarts=3, max_iter=300, tol=1e-7, seq=np.random.SeedSequence(1))
    assert full.converged
    assert result.inertia <= 1.01 * full.inertia
    # the seeds are sampled rows from all over the sorted file
    seeds = attribute_clusters(shards, n, clusters, seed=4, sample_size=2000, max_passes=0, restarts=1)
    assert seeds.passes == 0 and seeds.inertia_history == (seeds.inertia,)
    rows = {tuple(r) for r in x}
    assert all(tuple(c) in rows for c in seeds.model.centroids)


def test_sampled_path_independent_of_batches_and_workers(sorted_input, client):
    shards, feat = sorted_input
    kwargs = dict(seed=2, sample_size=500, max_passes=5)
    a = attribute_clusters(shards, len(feat), 3, **kwargs)
    b = attribute_clusters(shards, len(feat), 3, batch_rows=61, **kwargs)
    c = attribute_clusters(shards, len(feat), 3, client=client, **kwargs)
    for other in (b, c):
        np.testing.assert_array_equal(other.attr_cluster_id, a.attr_cluster_id)
        np.testing.assert_array_equal(other.model.centroids, a.model.centroids)
        assert other.inertia_history == a.inertia_history
    assert a.inertia == pytest.approx(full_inertia(a.model, feat, a.attr_cluster_id), rel=1e-9)


def test_sampled_path_zero_rows_and_bad_rows(tmp_path):
    shards, feat = sorted_blobs(tmp_path / "ok", 6000, 8, 4, num_shards=3)
    feat_zero = feat.copy()
    feat_zero[::7] = 0.0
    (tmp_path / "zero" / "nodes").mkdir(parents=True)
    for i, idx in enumerate(np.array_split(np.arange(len(feat)), 3)):
        pq.write_table(node_table(idx, feat_zero[idx]), tmp_path / "zero" / "nodes" / f"part-{i}.parquet",
                       row_group_size=50)
    zero_shards = discover_shards(tmp_path / "zero" / "nodes")
    assert sample_rows(len(feat), 4, 8, 8, 100, 10, RESTARTS) < len(feat)
    result = attribute_clusters(zero_shards, len(feat), 4, seed=0, sample_size=100)
    assert np.isfinite(result.model.centroids).all()
    np.testing.assert_allclose(np.linalg.norm(result.model.centroids, axis=1), 1.0, atol=1e-5)
    np.testing.assert_array_equal(result.model.predict(feat_zero), result.attr_cluster_id)
    assert result.inertia == pytest.approx(full_inertia(result.model, feat_zero, result.attr_cluster_id),
                                           rel=1e-9)
    # a NaN anywhere fails, sampled or not (the labelling pass reads every row)
    for row in (0, 2500, 5999):
        bad = feat.copy()
        bad[row, 3] = np.nan
        root = tmp_path / f"nan{row}" / "nodes"
        root.mkdir(parents=True)
        pq.write_table(node_table(np.arange(len(bad)), bad), root / "part-0.parquet", row_group_size=50)
        with pytest.raises(InputError, match="finite"):
            attribute_clusters(discover_shards(root), len(bad), 4, seed=0, sample_size=100)


def test_sample_rows():
    # few rows: all of them
    assert sample_rows(5_000, 16, 32, 32, 20_000, 10, 3) == 5_000
    # narrow rows: a sample (a second read is cheap), at least SAMPLE_PER_CLUSTER per cluster
    assert sample_rows(5_000_000, 16, 32, 32, 20_000, 10, 3) == 20_000
    assert sample_rows(5_000_000, 64, 32, 32, 20_000, 10, 3) == SAMPLE_PER_CLUSTER * 64
    # wide rows that fit the byte budget once embedded: every row, read once
    assert sample_rows(34_493, 16, 8415, 256, 20_000, 10, 3) == 34_493
    # ... but not when there are too many of them
    assert sample_rows(10_000_000, 16, 8415, 256, 20_000, 10, 3) == 20_000
    # the byte budget caps the sample; C rows at least
    assert sample_rows(10**9, 4, 32, 256, 10**8, 10, 3) == SAMPLE_BYTES // (4 * 256)
    assert sample_rows(10**9, 200_000, 32, 256, 10, 10, 3) == 200_000


# --- from the validator's decoded node table ----------------------------------------


def decoded_table(shards: list, directory: Path):
    """The decoded node table of ``shards`` (as the validator writes it), opened."""
    from asepr.storage.inputs.node_table import NodeTable, NodeTableWriter

    directory.mkdir()
    n = sum(pq.ParquetFile(s.path).metadata.num_rows for s in shards)
    writer = NodeTableWriter(directory, n)
    for shard in shards:
        table = pq.read_table(shard.path)
        feat = np.stack(table.column("feat").to_numpy(zero_copy_only=False)).astype(np.float32)
        writer.add(table.column("id").to_numpy(), feat, None, None)
    writer.close()
    return NodeTable(directory, n, writer.feat_dim)


@pytest.mark.parametrize("case", ["every row, ids shuffled", "sampled, projected, ids shuffled",
                                  "sampled, ids in order"])
def test_decoded_table_gives_the_same_clusters(blob_inputs, sorted_input, tmp_path, case):
    # The sample draws the same rows from the table as from the shards (by row number,
    # through the table's row order when the ids are not 0..N-1), so the clusters, the
    # centroids and the sample's history are the same bits; the full-data inertia is
    # the same sum in another grouping.
    if case.startswith("every"):
        shards, feat, _ = blob_inputs[16]
        kwargs = dict(seed=3, max_passes=4)
    elif "projected" in case:
        feat, _ = blobs(8000, 16, seed=9)
        shards = write_nodes(tmp_path / "in", feat)
        kwargs = dict(seed=5, max_passes=4, sample_size=200, projection_threshold=8, projection_dim=8)
    else:
        shards, feat = sorted_input
        kwargs = dict(seed=2, sample_size=500, max_passes=5, batch_rows=4096)
    n = len(feat)
    table = decoded_table(shards, tmp_path / "table")
    assert table.has_order == ("shuffled" in case)
    width = kwargs.get("projection_dim", 256) if feat.shape[1] > kwargs.get("projection_threshold", 256) \
        else feat.shape[1]
    every = sample_rows(n, 6, feat.shape[1], width, kwargs.get("sample_size", 20_000),
                        kwargs["max_passes"], RESTARTS) == n
    assert every == case.startswith("every")
    plain = attribute_clusters(shards, n, 6, **kwargs)
    fast = attribute_clusters(shards, n, 6, table=table, **kwargs)
    np.testing.assert_array_equal(fast.attr_cluster_id, plain.attr_cluster_id)
    np.testing.assert_array_equal(fast.model.centroids, plain.model.centroids)
    assert fast.inertia_history[:-1] == plain.inertia_history[:-1]
    assert fast.inertia == pytest.approx(plain.inertia, rel=1e-12)
    assert fast.inertia == pytest.approx(full_inertia(fast.model, feat, fast.attr_cluster_id), rel=1e-9)
