"""The streaming synthetic graph generator: counts, ids, determinism, model properties."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from asepr.pipeline.inputs.synth import SynthConfig, generate
from asepr.storage.errors import InputError, StoreError

SMALL = {"num_nodes": 2_000, "num_edges": 20_000, "num_classes": 4, "dim": 8}


def _read(out: Path) -> tuple[dict, dict[str, np.ndarray], dict[str, np.ndarray]]:
    meta = json.loads((out / "meta.json").read_text())
    edges = pq.read_table(out / "edges")
    nodes = pq.read_table(out / "nodes")
    e = {name: edges.column(name).to_numpy() for name in edges.column_names}
    n = {name: nodes.column(name).to_numpy() for name in nodes.column_names if name != "feat"}
    dim = nodes.schema.field("feat").type.list_size
    n["feat"] = nodes.column("feat").combine_chunks().flatten().to_numpy().reshape(-1, dim)
    return meta, e, n


@pytest.fixture(scope="module")
def small(tmp_path_factory) -> tuple[Path, SynthConfig]:
    out = tmp_path_factory.mktemp("synth") / "small"
    config = SynthConfig(**SMALL, seed=7)
    generate(out, config, shard_rows=6_000)
    return out, config


def test_layout_counts_and_meta(small):
    out, config = small
    meta, e, n = _read(out)
    assert sorted(p.name for p in out.iterdir()) == ["edges", "meta.json", "nodes"]
    assert meta["shards"]["edges"] == sorted(p.name for p in (out / "edges").iterdir())
    assert meta["shards"]["nodes"] == sorted(p.name for p in (out / "nodes").iterdir())
    assert len(e["src"]) == len(e["dst"]) == config.num_edges == meta["num_edges"]
    assert len(n["id"]) == config.num_nodes == meta["num_nodes"]
    assert n["feat"].shape == (config.num_nodes, config.dim) and meta["feat_dim"] == config.dim
    assert n["feat"].dtype == np.float32 and np.isfinite(n["feat"]).all()
    assert meta["name"] == "synth" and meta["undirected"] is True
    assert meta["num_classes"] == config.num_classes
    assert meta["split"] == {"kind": "random", "fractions": [0.6, 0.2, 0.2], "seed": 7}
    source = meta["source"]
    assert source["format"] == "synth"
    for key in ("num_nodes", "num_edges", "num_classes", "dim", "homophily", "seed",
                "exponent", "noise", "category_purity"):
        assert source[key] == getattr(config, key)


def test_ids_labels_splits_categories(small):
    out, config = small
    _, e, n = _read(out)
    np.testing.assert_array_equal(n["id"], np.arange(config.num_nodes))
    for col in ("src", "dst"):
        assert e[col].dtype == np.int64
        assert e[col].min() >= 0 and e[col].max() < config.num_nodes
    assert not np.any(e["src"] == e["dst"])
    assert n["label"].dtype == np.int64 and n["split"].dtype == np.int8
    assert n["category"].dtype == np.int64
    # Classes are balanced and not sorted (nor blocked) by id.
    assert np.bincount(n["label"]).tolist() == [config.num_nodes // config.num_classes] * 4
    assert np.mean(n["label"][1:] == n["label"][:-1]) < 0.5
    shares = np.bincount(n["split"], minlength=3) / config.num_nodes
    np.testing.assert_allclose(shares, [0.6, 0.2, 0.2], atol=0.04)
    agree = np.mean(n["category"] == n["label"])
    # P(category == class) = purity + (1 - purity) / C.
    assert abs(agree - (0.8 + 0.2 / config.num_classes)) < 0.04
    assert n["category"].min() >= 0 and n["category"].max() < config.num_classes


def test_products_like_split(tmp_path):
    config = SynthConfig(**{**SMALL, "split": (0.08, 0.02, 0.9)})
    meta = generate(tmp_path / "g", config)
    _, _, n = _read(tmp_path / "g")
    shares = np.bincount(n["split"], minlength=3) / config.num_nodes
    np.testing.assert_allclose(shares, [0.08, 0.02, 0.9], atol=0.03)
    assert meta["split"]["fractions"] == [0.08, 0.02, 0.9]
    # Only the split changes: the graph and the other node columns are the default's.
    generate(tmp_path / "d", SynthConfig(**SMALL))
    _, e_d, n_d = _read(tmp_path / "d")
    _, e, _ = _read(tmp_path / "g")
    np.testing.assert_array_equal(e["src"], e_d["src"])
    np.testing.assert_array_equal(n["feat"], n_d["feat"])
    assert not np.array_equal(n["split"], n_d["split"])


def test_shards_bounded_by_shard_rows(small):
    out, _ = small
    meta, _, _ = _read(out)
    assert len(meta["shards"]["edges"]) == 4  # 20,000 rows at 6,000 a shard
    for name in meta["shards"]["edges"]:
        assert pq.ParquetFile(out / "edges" / name).metadata.num_rows <= 6_000


def _file_bytes(out: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(out)): p.read_bytes() for p in sorted(out.rglob("*")) if p.is_file()
    }


def test_seeded_run_is_byte_identical(tmp_path, small):
    out, config = small
    again = tmp_path / "again"
    generate(again, config, shard_rows=6_000)
    first, second = _file_bytes(out), _file_bytes(again)
    assert sorted(first) == sorted(second)
    assert len(first) >= 6
    for name in first:
        assert first[name] == second[name], name


def test_other_seed_differs_and_shard_rows_changes_only_the_cut(tmp_path, small):
    out, config = small
    _, e0, n0 = _read(out)
    other = tmp_path / "other"
    generate(other, SynthConfig(**SMALL, seed=8), shard_rows=6_000)
    _, e1, n1 = _read(other)
    assert not np.array_equal(e0["src"], e1["src"])
    assert not np.array_equal(n0["label"], n1["label"])
    recut = tmp_path / "recut"
    meta = generate(recut, config, shard_rows=50_000)
    assert len(meta["shards"]["edges"]) == 1
    _, e2, n2 = _read(recut)
    for key in e0:
        np.testing.assert_array_equal(e0[key], e2[key])
    for key in n0:
        np.testing.assert_array_equal(n0[key], n2[key])


def test_many_generation_blocks(tmp_path, monkeypatch):
    from asepr.pipeline.inputs import synth

    monkeypatch.setattr(synth, "EDGE_BLOCK", 3_000)
    config = SynthConfig(num_nodes=500, num_edges=10_001, num_classes=3, dim=2, seed=1)
    meta = generate(tmp_path / "g", config, shard_rows=4_000)
    _, e, _ = _read(tmp_path / "g")
    assert meta["num_edges"] == len(e["src"]) == 10_001
    assert not np.any(e["src"] == e["dst"])
    # Blocks draw from different streams: no block repeats the first one.
    assert not np.array_equal(e["src"][:3_000], e["src"][3_000:6_000])


@pytest.mark.parametrize("homophily", [0.2, 0.9])
def test_homophily(tmp_path, homophily):
    config = SynthConfig(
        num_nodes=5_000, num_edges=50_000, num_classes=5, dim=4, homophily=homophily, seed=3
    )
    generate(tmp_path / "h", config)
    _, e, n = _read(tmp_path / "h")
    measured = np.mean(n["label"][e["src"]] == n["label"][e["dst"]])
    assert abs(measured - homophily) < 0.03


def test_degrees_are_heavy_tailed(tmp_path):
    config = SynthConfig(num_nodes=20_000, num_edges=100_000, num_classes=4, dim=2, seed=5)
    generate(tmp_path / "d", config)
    _, e, _ = _read(tmp_path / "d")
    degree = np.bincount(e["src"], minlength=20_000) + np.bincount(e["dst"], minlength=20_000)
    assert degree.max() > 10 * degree.mean()
    # The structural cutoff keeps the largest degree near sqrt(2M) (447 here).
    assert degree.max() < 3 * np.sqrt(2 * config.num_edges)
    # Hill estimator over the top 5 % of degrees, as a density exponent 1 + 1/mean(log).
    top = np.sort(degree)[::-1][:1_001].astype(np.float64)
    gamma = 1.0 + 1.0 / np.mean(np.log(top[:-1] / top[-1]))
    assert 1.7 <= gamma <= 2.6, gamma
    # Parallel edges stay rare.
    lo, hi = np.minimum(e["src"], e["dst"]), np.maximum(e["src"], e["dst"])
    assert 1 - len(np.unique(lo * 20_000 + hi)) / len(lo) < 0.05


def test_features_carry_the_class(tmp_path):
    config = SynthConfig(num_nodes=3_000, num_edges=3_000, num_classes=6, dim=16, noise=2.0)
    generate(tmp_path / "f", config)
    _, _, n = _read(tmp_path / "f")
    x, y, split = n["feat"], n["label"], n["split"]
    centroids = np.stack([x[(split == 0) & (y == c)].mean(axis=0) for c in range(6)])
    test = split == 2
    dist = ((x[test, None, :] - centroids[None, :, :]) ** 2).sum(axis=-1)
    accuracy = np.mean(dist.argmin(axis=1) == y[test])
    assert accuracy > 3 / 6  # chance is 1/6


def test_one_class_means_every_edge_is_intra_class(tmp_path):
    config = SynthConfig(num_nodes=50, num_edges=500, num_classes=1, dim=3, homophily=0.0)
    meta = generate(tmp_path / "one", config)
    _, e, n = _read(tmp_path / "one")
    assert meta["num_edges"] == 500 and not np.any(e["src"] == e["dst"])
    assert np.all(n["label"] == 0)


def test_dense_graph_and_tiny_classes(tmp_path):
    # N = 2C and M >> N^2: the cutoff falls to 1 (uniform propensities), and every
    # intra-class edge joins the two nodes of its class.
    config = SynthConfig(num_nodes=8, num_edges=2_000, num_classes=4, dim=1, homophily=0.5)
    generate(tmp_path / "dense", config)
    _, e, n = _read(tmp_path / "dense")
    assert not np.any(e["src"] == e["dst"])
    intra = n["label"][e["src"]] == n["label"][e["dst"]]
    assert abs(intra.mean() - 0.5) < 0.06


def test_existing_output_is_refused(small):
    out, config = small
    with pytest.raises(StoreError, match="overwrite"):
        generate(out, config)


@pytest.mark.parametrize(
    "changes, flag",
    [
        ({"num_nodes": -5}, "--nodes"),
        ({"num_nodes": 1}, "--nodes"),
        ({"num_nodes": 10.0}, "--nodes"),
        ({"num_edges": 0}, "--edges"),
        ({"num_classes": 0}, "--classes"),
        ({"num_classes": 3_000}, "--classes"),
        ({"num_classes": 1_001}, "--classes"),
        ({"dim": 0}, "--dim"),
        ({"homophily": 1.5}, "--homophily"),
        ({"homophily": -0.1}, "--homophily"),
        ({"homophily": float("nan")}, "--homophily"),
        ({"exponent": 1.0}, "--exponent"),
        ({"noise": -1.0}, "--noise"),
        ({"noise": float("inf")}, "--noise"),
        ({"seed": -1}, "--seed"),
        ({"seed": True}, "--seed"),
        ({"category_purity": 2}, "--category-purity"),
        ({"split": (0.5, 0.5, 0.5)}, "--split"),
        ({"split": (0.0, 0.5, 0.5)}, "--split"),
        ({"split": (1.1, -0.1, 0.0)}, "--split"),
        ({"split": (0.5, 0.5)}, "--split"),
        ({"split": (0.5, float("nan"), 0.5)}, "--split"),
    ],
)
def test_invalid_config(changes, flag):
    with pytest.raises(InputError) as info:
        SynthConfig(**{**SMALL, **changes})
    message = str(info.value)
    assert flag in message and "expected" in message
    assert "found" in message and repr(next(iter(changes.values()))) in message


def test_invalid_generate_arguments(tmp_path):
    with pytest.raises(InputError, match="--shard-rows"):
        generate(tmp_path / "x", SynthConfig(**SMALL), shard_rows=0)
    with pytest.raises(InputError, match="SynthConfig"):
        generate(tmp_path / "x", dict(SMALL))
    assert not (tmp_path / "x").exists()


@settings(deadline=None, max_examples=12)
@given(
    num_nodes=st.integers(2, 60),
    num_edges=st.integers(1, 300),
    classes=st.integers(1, 30),
    homophily=st.floats(0.0, 1.0),
    exponent=st.floats(1.05, 4.0),
    seed=st.integers(0, 2**32),
)
def test_property_small_graphs_are_valid(
    tmp_path_factory, num_nodes, num_edges, classes, homophily, exponent, seed
):
    classes = min(classes, num_nodes // 2)
    config = SynthConfig(
        num_nodes=num_nodes, num_edges=num_edges, num_classes=classes, dim=2,
        homophily=homophily, exponent=exponent, seed=seed,
    )
    out = tmp_path_factory.mktemp("prop") / "g"
    meta = generate(out, config, shard_rows=97)
    _, e, n = _read(out)
    assert meta["num_edges"] == len(e["src"]) == num_edges
    assert len(n["id"]) == num_nodes
    assert not np.any(e["src"] == e["dst"])
    assert e["src"].min() >= 0 and max(e["src"].max(), e["dst"].max()) < num_nodes
    if homophily in (0.0, 1.0) and classes > 1:
        intra = n["label"][e["src"]] == n["label"][e["dst"]]
        assert np.all(intra == (homophily == 1.0))
