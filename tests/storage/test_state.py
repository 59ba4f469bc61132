"""``state.zarr``: the format, its checksums, and its commit together with the manifest."""

from __future__ import annotations

import re
import shutil

import numpy as np
import pytest
import zarr

import asepr.storage.partitions.state
from asepr.storage.errors import StoreError
from asepr.storage.partitions.manifest import OLD_DIR, STAGING_NAME
from asepr.storage.partitions.state import (
    OPTIONAL_STATE_ARRAYS,
    REQUIRED_STATE_ARRAYS,
    STATE_NAME,
    ingested_fingerprints,
    open_state,
    read_state,
    read_state_attrs,
    resolve_state_url,
    state_entry,
    state_identity,
    state_problems,
    write_state,
)

N, K = 50, 3


def _arrays(rng, optional: bool = True) -> dict[str, np.ndarray]:
    arrays = {
        "vertices/degree": rng.integers(0, 9, N).astype(np.int64),
        "vertices/attr_cluster_id": rng.integers(0, 4, N).astype(np.int32),
        "vertices/master": rng.integers(0, K, N).astype(np.int32),
        "vertices/label": rng.integers(-1, 3, N).astype(np.int64),
        "vertices/replicas": rng.integers(0, 2**K, (N, 1)).astype(np.uint64),
        "partitions/loads": np.array([5, 7, 6], np.int64),
        "attributes/home": np.array([0, 2, -1, 1], np.int32),
    }
    if optional:
        arrays.update({
            "vertices/community_id": rng.integers(0, N, N).astype(np.int64),
            "communities/volume": rng.integers(0, 20, N).astype(np.int64),
            "communities/part_id": rng.integers(-1, K, N).astype(np.int32),
            "attributes/centroids": rng.normal(size=(4, 6)).astype(np.float32),
            "attributes/projection": rng.normal(size=(10, 6)).astype(np.float32),
        })
    return arrays


def _attrs(generation: int = 1) -> dict:
    return {"generation": generation, "num_nodes": N, "num_parts": K, "num_edges": 18, "algorithm": "asep",
            "shards": [{"generation": 1, "kind": "edges", "url": "/in/e.parquet", "rows": 18, "sha256": "ab" * 32}]}


def _output(tmp_path, rng, generation: int = 1):
    out = tmp_path / "out"
    out.mkdir()
    checksum = write_state(out / STATE_NAME, _arrays(rng), _attrs(generation))
    manifest = {"format": "asepr-partitions", "format_version": 1, "generation": generation, "num_parts": K,
                "num_nodes": N, "partitions": [], "state": state_entry(generation, checksum)}
    return out, manifest


def test_write_then_read_round_trips_every_array_and_attribute(tmp_path, rng):
    arrays = _arrays(rng)
    checksum = write_state(tmp_path / STATE_NAME, arrays, _attrs())
    state = open_state(tmp_path / STATE_NAME)
    assert state.generation == 1 and state.num_nodes == N and state.num_parts == K and state.num_edges == 18
    assert state.checksum == checksum and checksum.startswith("sha256:")
    assert sorted(state.arrays) == sorted(arrays)
    for name, data in arrays.items():
        np.testing.assert_array_equal(state[name], data)
        assert state[name].dtype == data.dtype
    assert state.shards == _attrs()["shards"] and state.attrs["algorithm"] == "asep"
    assert state.attrs["replica_words"] == 1
    assert state_identity(tmp_path / STATE_NAME) == (1, checksum)
    assert state_problems(tmp_path / STATE_NAME) == []
    # Optional arrays may be absent; nothing is left beside the store.
    write_state(tmp_path / "min.zarr", _arrays(rng, optional=False), _attrs())
    assert sorted(open_state(tmp_path / "min.zarr").arrays) == sorted(REQUIRED_STATE_ARRAYS)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["min.zarr", STATE_NAME]


def test_the_layout_in_the_docstring_is_what_is_written(tmp_path, rng):
    doc = asepr.storage.partitions.state.__doc__
    tree = doc[doc.index("state.zarr/"): doc.index("``shards``")]
    documented = {}
    group = None
    for line in tree.splitlines():
        if m := re.match(r"^\s{6}(\w+)/\s*$", line):
            group = m.group(1)
        elif m := re.match(r"^\s{8}(\w+)\s+(\w+)\s+\[", line):
            documented[f"{group}/{m.group(1)}"] = m.group(2)
    layout = {**REQUIRED_STATE_ARRAYS, **OPTIONAL_STATE_ARRAYS}
    assert documented == {name: dtype.name for name, (dtype, _) in layout.items()}
    write_state(tmp_path / STATE_NAME, _arrays(rng), _attrs())
    group = zarr.open_group(str(tmp_path / STATE_NAME), mode="r")
    written = {f"{g}/{a}": group[g][a].dtype.name for g in ("vertices", "communities", "partitions", "attributes")
               for a in group[g].array_keys()}
    assert written == documented


def test_a_damaged_array_is_found_and_named(tmp_path, rng):
    write_state(tmp_path / STATE_NAME, _arrays(rng), _attrs())
    group = zarr.open_group(str(tmp_path / STATE_NAME), mode="r+")
    loads = group["partitions/loads"][...]
    loads[0] += 1
    group["partitions/loads"][...] = loads
    with pytest.raises(StoreError, match="array partitions/loads"):
        open_state(tmp_path / STATE_NAME)
    assert any("partitions/loads" in p for p in state_problems(tmp_path / STATE_NAME))


def test_arrays_that_do_not_fit_the_layout_are_refused(tmp_path, rng):
    arrays = _arrays(rng)
    arrays["vertices/degree"] = arrays["vertices/degree"].astype(np.int32)
    with pytest.raises(StoreError, match="vertices/degree: expected int64"):
        write_state(tmp_path / "a.zarr", arrays, _attrs())
    arrays = _arrays(rng)
    del arrays["vertices/master"]
    with pytest.raises(StoreError, match="vertices/master"):
        write_state(tmp_path / "b.zarr", arrays, _attrs())
    arrays = _arrays(rng)
    arrays["vertices/label"] = arrays["vertices/label"][:-1]
    with pytest.raises(StoreError, match=f"{N} rows"):
        write_state(tmp_path / "c.zarr", arrays, _attrs())
    with pytest.raises(StoreError, match="'generation'"):
        write_state(tmp_path / "d.zarr", _arrays(rng), {"num_nodes": N, "num_parts": K, "num_edges": 1})
    assert not any(tmp_path.iterdir())


def test_readers_take_only_the_state_the_manifest_names(tmp_path, rng):
    out, manifest = _output(tmp_path, rng)
    state = read_state(out, manifest)
    assert state.generation == 1 and read_state_attrs(out, manifest)["checksum"] == state.checksum
    # Ahead of the manifest (another generation) or another checksum: refused.
    for entry in ({**manifest["state"], "generation": 2}, {**manifest["state"], "checksum": "sha256:00"}):
        with pytest.raises(StoreError, match="as the manifest says"):
            read_state(out, {**manifest, "state": entry})
    # A manifest without a state (an older output) says how to get one.
    with pytest.raises(StoreError, match="--overwrite"):
        read_state(out, {k: v for k, v in manifest.items() if k != "state"})
    # A state whose node count is not the manifest's.
    with pytest.raises(StoreError, match="nodes"):
        read_state(out, {**manifest, "num_nodes": N + 1})


def test_mid_swap_readers_find_the_committed_state_in_old(tmp_path, rng):
    """While a commit swaps generation 2 in, the manifest still says 1: its state waits in old/."""
    out, manifest = _output(tmp_path, rng, generation=1)
    old = out / STAGING_NAME / OLD_DIR
    old.mkdir(parents=True)
    shutil.move(str(out / STATE_NAME), str(old / STATE_NAME))
    write_state(out / STATE_NAME, _arrays(rng), _attrs(generation=2))
    assert resolve_state_url(out, manifest) == str(old / STATE_NAME)
    assert read_state(out, manifest).generation == 1


def test_ingested_fingerprints_span_every_generation():
    manifest = {
        "generation": 3, "input_generation": 1,
        "input": {"edges": [{"url": "a", "rows": 1, "sha256": "1"}], "nodes": [{"url": "n", "rows": 2, "sha256": "2"}]},
        "increments": [{"generation": 2, "edges": [{"url": "b", "rows": 3, "sha256": "3"}], "nodes": []},
                       {"generation": 3, "edges": [{"url": "c", "rows": 4, "sha256": "4"}], "nodes": []}],
    }
    seen = ingested_fingerprints(manifest)
    assert {k: (v["generation"], v["kind"]) for k, v in seen.items()} == {
        "1": (1, "edges"), "2": (1, "nodes"), "3": (2, "edges"), "4": (3, "edges")}
