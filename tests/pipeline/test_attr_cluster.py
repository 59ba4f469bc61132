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

from pipeline.stages.attr_cluster import AttrClusters, AttrModel, attribute_clusters
from pipeline.stages.kmeans import kmeans_pp
from pipeline.stages.attr_column import column_clusters
from storage.errors import InputError, SchemaError
from storage.fs import discover_shards
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
    result = attribute_clusters(shards, len(feat), NUM_BLOBS, seed=3, spill_dir=str(tmp_path))
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
    # inertia never increases, and the final figure is the last one
    history = np.array(result.inertia_history)
    assert len(history) == result.passes + 1
    assert np.all(np.diff(history) <= 1e-6 * history[0])
    assert result.inertia == history[-1]
    assert result.converged and result.passes <= 10
    assert list(tmp_path.iterdir()) == []  # spill directory removed


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
    with caplog.at_level(logging.INFO, logger="pipeline.stages.attr_cluster"):
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


def test_errors_and_spill_cleanup_on_failure(tmp_path, blob_inputs):
    shards, feat, _ = blob_inputs[16]
    with pytest.raises(InputError, match="num_clusters"):
        attribute_clusters(shards, len(feat), 0)
    with pytest.raises(InputError, match="rows"):
        attribute_clusters(shards, len(feat) + 1, 3)
    # mismatched feature widths between shards fail, and leave no spill behind
    (tmp_path / "nodes").mkdir()
    pq.write_table(node_table([0, 1], np.ones((2, 3))), tmp_path / "nodes" / "part-0.parquet")
    pq.write_table(
        node_table([2, 3], np.ones((2, 4)), layout="list"), tmp_path / "nodes" / "part-1.parquet"
    )
    spill = tmp_path / "spill"
    spill.mkdir()
    with pytest.raises(InputError, match="width"):
        attribute_clusters(discover_shards(tmp_path / "nodes"), 4, 2, spill_dir=str(spill))
    assert list(spill.iterdir()) == []
    # a missing id fails after the passes, also without leftovers
    (tmp_path / "gap").mkdir()
    pq.write_table(node_table([0, 1, 5], np.eye(3)), tmp_path / "gap" / "part-0.parquet")
    with pytest.raises(InputError, match=r"\[0, 3\)"):
        attribute_clusters(discover_shards(tmp_path / "gap"), 3, 2, spill_dir=str(spill))
    assert list(spill.iterdir()) == []
    model = AttrModel(np.eye(2, dtype=np.float32), None, 2)
    with pytest.raises(InputError, match=r"\[n, 2\]"):
        model.predict(np.ones((3, 5)))


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


def test_cora_if_the_importer_is_available(tmp_path, datasets_dir):
    from storage.importers import import_dataset

    source = datasets_dir / "cora" / "cora.npz"
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
