"""The external edge shuffle keeps every row and column and copies side files."""

from __future__ import annotations

import json

import numpy as np
import pyarrow.parquet as pq

from asepr.pipeline.inputs.shuffle import shuffle_edges
from tests.storage.helpers import edge_table, node_table


def test_shuffle_is_a_seeded_permutation_of_all_columns(tmp_path):
    root = tmp_path / "in"
    (root / "edges").mkdir(parents=True)
    (root / "nodes").mkdir()
    rng = np.random.default_rng(0)
    src, dst = rng.integers(0, 50, 1000), rng.integers(0, 50, 1000)
    weight = rng.random(1000).astype(np.float32)
    for i, idx in enumerate(np.array_split(np.arange(1000), 3)):
        pq.write_table(edge_table(src[idx], dst[idx], weight=weight[idx]),
                       root / "edges" / f"part-{i:05d}.parquet")
    pq.write_table(node_table(np.arange(50), np.ones((50, 2)), np.zeros(50), np.zeros(50)),
                   root / "nodes" / "part-00000.parquet")
    (root / "meta.json").write_text(json.dumps({"name": "t", "num_nodes": 50}))
    (root / "id_map.parquet").write_bytes(b"side file")

    shuffle_edges(root, tmp_path / "a", seed=1, bucket_rows=300)
    shuffle_edges(root, tmp_path / "b", seed=1, bucket_rows=300)
    a = pq.read_table(tmp_path / "a" / "edges")
    b = pq.read_table(tmp_path / "b" / "edges")
    assert a.equals(b)
    assert a.column_names == ["src", "dst", "weight"]
    original = sorted(zip(src.tolist(), dst.tolist(), weight.tolist()))
    shuffled = list(zip(*(a[c].to_pylist() for c in a.column_names)))
    assert sorted(shuffled) == original
    assert shuffled != list(zip(src.tolist(), dst.tolist(), weight.tolist()))
    assert (tmp_path / "a" / "id_map.parquet").read_bytes() == b"side file"
    assert json.loads((tmp_path / "a" / "meta.json").read_text())["shuffle"]["seed"] == 1
