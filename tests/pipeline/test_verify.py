"""``asepr verify``: the concurrent, one-read design reports what the checks promise.

Damage is done two ways: to the bytes (the checksums catch it), and *crafted*: the
store rewritten with consistent checksums, chunk digests and manifest entry, so that
only the deeper checks (edge multiset, node rows, state) can catch it. Each damaged
output must give the same report for any number of workers, and the fingerprinted
edge check the same report as the exact one.
"""

from __future__ import annotations

import json
import random
import shutil
from collections import Counter
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import zarr
from hypothesis import given, settings
from hypothesis import strategies as st

from asepr.pipeline.config import PartitionConfig
from asepr.pipeline.inputs.synth import SynthConfig, generate
from asepr.pipeline.partition_run import partition_to_store
from asepr.pipeline.verify import verify_output
from asepr.pipeline.verify.edges import (
    MERSENNE_61,
    EdgeFingerprint,
    draw_points,
    fingerprint_applies,
    fold_input_batch,
    fold_partition,
    miss_bound,
    mulmod61,
)
from asepr.storage.errors import InputError
from asepr.storage.partitions.store import combine_digests, write_array

_N = 3_000


@pytest.fixture(scope="module")
def committed(tmp_path_factory) -> tuple[Path, Path]:
    """A synthetic input (3,000 nodes, 12,000 edges, 8-d features) in 4 partitions."""
    base = tmp_path_factory.mktemp("verify")
    generate(base / "in", SynthConfig(num_nodes=_N, num_edges=12_000, num_classes=4, dim=8, seed=5))
    partition_to_store(base / "in", base / "out", PartitionConfig(num_parts=4))
    return base / "in", base / "out"


@pytest.fixture
def out(committed, tmp_path) -> Path:
    path = tmp_path / "out"
    shutil.copytree(committed[1], path)
    return path


def _report(out: Path, **kwargs) -> tuple[list[str], list[str]]:
    report = verify_output(out, **kwargs)
    return [str(p) for p in report.problems], report.checks


# --- crafted damage: rewrite a store with consistent checksums ------------------------------


def _store(out: Path, p: int) -> Path:
    return out / f"part-{p:05d}.zarr"


def _rewrite(out: Path, p: int, arrays: dict[str, np.ndarray]) -> None:
    """Replace arrays of partition ``p`` and every digest that names them (store attrs,
    chunk digests, manifest entry): a store only the deeper checks can tell apart."""
    path = _store(out, p)
    group = zarr.open_group(str(path), mode="r+")
    digests = dict(group.attrs["array_checksums"])
    for name, data in arrays.items():
        shutil.rmtree(path / name)
        digests[name] = write_array(group, name, data)
    counts = dict(group.attrs["counts"])
    counts["edges"] = int(group["edges/indices"].shape[0])
    checksum = combine_digests(digests)
    group.attrs.update({"array_checksums": digests, "checksum": checksum, "counts": counts})
    manifest = json.loads((out / "manifest.json").read_text())
    entry = next(e for e in manifest["partitions"] if int(e["part_id"]) == p)
    entry["checksum"], entry["counts"] = checksum, {**entry["counts"], "edges": counts["edges"]}
    (out / "manifest.json").write_text(json.dumps(manifest))


def _edges(out: Path, p: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(global_nid, src, dst)`` of partition ``p``, in global ids."""
    group = zarr.open_group(str(_store(out, p)), mode="r")
    gids, indptr = group["nodes/global_nid"][...], group["edges/indptr"][...]
    row = np.repeat(np.arange(len(gids)), np.diff(indptr))
    return gids, gids[row], gids[group["edges/indices"][...]]


def _set_edges(out: Path, p: int, src: np.ndarray, dst: np.ndarray) -> None:
    """Give partition ``p`` exactly these edges (over its own nodes), as a valid sorted CSR."""
    gids = zarr.open_group(str(_store(out, p)), mode="r")["nodes/global_nid"][...]
    local_src, local_dst = np.searchsorted(gids, src), np.searchsorted(gids, dst)
    assert (gids[local_src] == src).all() and (gids[local_dst] == dst).all()
    order = np.lexsort((local_dst, local_src))
    indptr = np.concatenate([[0], np.cumsum(np.bincount(local_src, minlength=len(gids)))]).astype(np.int64)
    _rewrite(out, p, {"edges/indptr": indptr, "edges/indices": local_dst[order].astype(np.int32)})


def _input_edges(root: Path) -> Counter:
    table = pq.read_table(root / "edges")
    return Counter(zip(table["src"].to_numpy().tolist(), table["dst"].to_numpy().tolist()))


def _duplicate_an_edge(out: Path) -> tuple[int, int]:
    gids, src, dst = _edges(out, 1)
    _set_edges(out, 1, np.append(src, src[0]), np.append(dst, dst[0]))
    return int(src[0]), int(dst[0])


def _swap_across_partitions(out: Path) -> tuple[tuple[int, int], ...]:
    """Edges (u, w) of partition 0 and (x, y) of partition 1 become (u, y) and (x, w):
    every node keeps its degree in each partition, the loads stay."""
    gids0, src0, dst0 = _edges(out, 0)
    gids1, src1, dst1 = _edges(out, 1)
    for i in range(len(src0)):
        for j in range(len(src1)):
            u, w, x, y = int(src0[i]), int(dst0[i]), int(src1[j]), int(dst1[j])
            if w != y and y in gids0 and w in gids1:
                dst0, dst1 = dst0.copy(), dst1.copy()
                dst0[i], dst1[j] = y, w
                _set_edges(out, 0, src0, dst0)
                _set_edges(out, 1, src1, dst1)
                return (u, w), (x, y), (u, y), (x, w)
    raise AssertionError("no swappable pair of edges")


def _swap_within_a_partition(out: Path) -> tuple[tuple[int, int], ...]:
    """Edges (u1, w1) and (u2, w2) of partition 2 become (u1, w2) and (u2, w1): same
    nodes, same degrees, same touched sets, same edge count per source."""
    _, src, dst = _edges(out, 2)
    i = 0
    j = int(np.flatnonzero((src != src[i]) & (dst != dst[i]))[0])
    before = ((int(src[i]), int(dst[i])), (int(src[j]), int(dst[j])))
    dst = dst.copy()
    dst[i], dst[j] = dst[j], dst[i]
    _set_edges(out, 2, src, dst)
    return (*before, (int(src[i]), int(dst[i])), (int(src[j]), int(dst[j])))


def _flip_feature_sign(out: Path) -> tuple[int, int]:
    """One feature of one row of partition 3 changes bit pattern (and value)."""
    group = zarr.open_group(str(_store(out, 3)), mode="r")
    x = group["nodes/x"][...]
    local = len(x) // 2
    x[local, 0] = -x[local, 0] if x[local, 0] != 0 else np.float32(-0.0)
    _rewrite(out, 3, {"nodes/x": x})
    return int(group["nodes/global_nid"][local]), local


def _relabel(out: Path) -> None:
    group = zarr.open_group(str(_store(out, 2)), mode="r")
    y = group["nodes/y"][...]
    y[7] = y[7] + 1
    _rewrite(out, 2, {"nodes/y": y})


def _delete_chunk(out: Path) -> None:
    (_store(out, 0) / "nodes" / "x" / "c" / "0" / "0").unlink()


# --- the same report for any number of workers and either edge check ------------------------


_DAMAGES = {
    "none": lambda out: None,
    "deleted chunk": _delete_chunk,
    "duplicated edge": _duplicate_an_edge,
    "edges swapped across partitions": _swap_across_partitions,
    "edges swapped within a partition": _swap_within_a_partition,
    "feature sign": _flip_feature_sign,
    "label": _relabel,
}


@pytest.mark.parametrize("damage", list(_DAMAGES))
def test_the_report_is_the_same_for_any_workers_and_either_edge_check(out, damage):
    _DAMAGES[damage](out)
    serial = _report(out, workers=1)
    assert serial[0] or damage == "none", "the damage went unnoticed"
    assert not serial[0] or damage != "none", serial[0]
    for kwargs in ({"workers": 2}, {"workers": 4}, {"workers": 3, "edge_check": "exact"},
                   {"workers": 1, "edge_check": "exact"}):
        assert _report(out, **kwargs) == serial, kwargs


def test_a_duplicated_edge_is_named_with_its_partition(out, committed):
    u, w = _duplicate_an_edge(out)
    times = _input_edges(committed[0])[(u, w)]
    problems, _ = _report(out)
    assert (f"edges: edge ({u}, {w}) appears {times} time(s) in the input and {times + 1} time(s) "
            f"in the partitions (partitions [1])") in problems
    assert any(p.startswith("partition 1: holds ") and "the state's load says" in p for p in problems)


def test_edges_swapped_across_partitions_are_named(out, committed):
    old_a, old_b, new_a, new_b = _swap_across_partitions(out)
    counts = _input_edges(committed[0])
    problems, _ = _report(out)
    text = "\n".join(problems)
    for edge in (old_a, old_b, new_a, new_b):
        assert f"edge ({edge[0]}, {edge[1]}) appears {counts[edge]} time(s) in the input" in text
    assert not any("checksum" in p for p in problems)


def test_a_degree_preserving_swap_inside_a_partition_is_caught(out, committed):
    """Counts per source node stay equal: only the multiset itself differs."""
    *_, new_a, new_b = _swap_within_a_partition(out)
    counts = _input_edges(committed[0])
    problems, _ = _report(out)
    for edge in (new_a, new_b):
        assert (f"edges: edge ({edge[0]}, {edge[1]}) appears {counts[edge]} time(s) in the input and "
                f"{counts[edge] + 1} time(s) in the partitions (partitions [2])") in problems


def test_a_changed_feature_bit_names_the_row_both_ways(out, committed):
    gid, local = _flip_feature_sign(out)
    ids = pq.read_table(committed[0] / "nodes", columns=["id"])["id"].to_numpy()
    row = int(np.flatnonzero(ids == gid)[0])
    shard = sorted((committed[0] / "nodes").glob("*.parquet"))
    sizes = np.cumsum([pq.ParquetFile(s).metadata.num_rows for s in shard])
    index = int(np.searchsorted(sizes, row, side="right"))
    within = row - (int(sizes[index - 1]) if index else 0)
    expected = f"partition 3: nodes/x of global_nid {gid} (part_local_nid {local}) differs from {shard[index]} row {within}"
    table, _ = _report(out)
    streaming, _ = _report(out, memory_budget=1 << 10)  # the table does not fit: groups of partitions
    for problems in (table, streaming):
        assert [p for p in problems if "nodes/" in p] == [p for p in problems if p.startswith(expected)]
        assert len([p for p in problems if "nodes/" in p]) == 1


def test_nodes_without_an_input_row_and_duplicate_ids_both_ways(out, committed, tmp_path):
    """An input that lost a row and repeats another with a different label: the table is
    refused (two rows for one id) and the streaming comparison reports both."""
    root = tmp_path / "in"
    shutil.copytree(committed[0], root)
    first = sorted((root / "nodes").glob("*.parquet"))[0]
    table = pq.read_table(first)
    ids = table["id"].to_numpy()
    gone, twice = int(ids[5]), int(ids[9])
    extra = table.slice(9, 1).set_column(table.schema.get_field_index("label"), "label",
                                         pa.array([int(table["label"][9].as_py()) + 1]))
    pq.write_table(pa.concat_tables([table.filter(pa.compute.not_equal(table["id"], gone)), extra]), first)
    problems, _ = _report(out, input_url=root)
    text = "\n".join(problems)
    assert "input: the nodes shards differ from the ones partitioned" in text
    assert f"1 node(s) have no row in the input, e.g. global_nid [{gone}]" in text
    assert f"nodes/y of global_nid {twice} " in text
    assert _report(out, input_url=root, workers=1) == _report(out, input_url=root, workers=2)


@pytest.mark.parametrize("kind", ["edges", "nodes"])
def test_an_unreadable_input_shard_is_reported_after_the_stores(out, committed, tmp_path, kind):
    """A task's error surfaces where a serial run meets it: after the stores' problems."""
    root = tmp_path / "in"
    shutil.copytree(committed[0], root)
    shard = sorted((root / kind).glob("*.parquet"))[-1]
    shard.write_bytes(shard.read_bytes()[: shard.stat().st_size // 2])
    _delete_chunk(out)
    problems, checks = _report(out, input_url=root, workers=1)
    assert problems[0].startswith("partition 0: checksum mismatch")
    assert "input: the " + kind + " shards differ" in "\n".join(problems)
    assert problems[-1].startswith("output: ") and shard.name in problems[-1]
    assert "input fingerprints" in checks
    for workers in (2, 4):
        assert _report(out, input_url=root, workers=workers) == (problems, checks)


def test_a_bad_edge_check_is_refused():
    with pytest.raises(InputError, match="edge_check"):
        verify_output("nowhere", edge_check="sorted")


# --- the fingerprint itself -------------------------------------------------------------------


def _fingerprint_of(src: list[int], dst: list[int], z: np.ndarray) -> EdgeFingerprint:
    fp = EdgeFingerprint(z)
    assert fold_input_batch(fp, np.array(src, np.int64), np.array(dst, np.int64), _N)
    return fp


_edge = st.tuples(st.integers(0, _N - 1), st.integers(0, _N - 1))


@settings(deadline=None, max_examples=60)
@given(edges=st.lists(_edge, min_size=1, max_size=60), seed=st.integers(0, 2**32 - 1), data=st.data())
def test_fingerprints_are_equal_exactly_for_equal_multisets(edges, seed, data):
    z = draw_points(_N)
    shuffled = list(edges)
    random.Random(seed).shuffle(shuffled)
    a = _fingerprint_of([e[0] for e in edges], [e[1] for e in edges], z)
    b = _fingerprint_of([e[0] for e in shuffled], [e[1] for e in shuffled], z)
    assert not a.differing_buckets(b).any()
    # One edge replaced by another that is not in the multiset: some bucket differs.
    changed = list(shuffled)
    new = data.draw(_edge.filter(lambda e: e not in edges))
    changed[data.draw(st.integers(0, len(changed) - 1))] = new
    c = _fingerprint_of([e[0] for e in changed], [e[1] for e in changed], z)
    assert a.differing_buckets(c).any()
    # An extra copy of an edge already there (multiplicity, not membership).
    d = _fingerprint_of([e[0] for e in edges + edges[:1]], [e[1] for e in edges + edges[:1]], z)
    assert a.differing_buckets(d).any()


def test_partition_fold_equals_input_fold_and_merges_commute():
    """A CSR folded row by row, in two halves merged in either order, equals the stream."""
    rng = np.random.default_rng(0)
    gids = np.sort(rng.choice(_N, 200, replace=False)).astype(np.int64)
    local_src, local_dst = rng.integers(0, 200, 1_000), rng.integers(0, 200, 1_000)
    order = np.lexsort((local_dst, local_src))
    indices = local_dst[order].astype(np.int32)
    indptr = np.concatenate([[0], np.cumsum(np.bincount(local_src, minlength=200))]).astype(np.int64)
    z = draw_points(_N)
    whole = EdgeFingerprint(z)
    fold_partition(whole, gids, indptr, indices, None, _N)
    stream = _fingerprint_of(gids[local_src].tolist(), gids[local_dst].tolist(), z)
    assert not whole.differing_buckets(stream).any()
    halves = [EdgeFingerprint(z), EdgeFingerprint(z)]
    owned = np.zeros(len(indices), dtype=bool)
    owned[::2] = True
    fold_partition(halves[0], gids, indptr, indices, owned, _N)
    fold_partition(halves[1], gids, indptr, indices, ~owned, _N)
    for first, second in ((0, 1), (1, 0)):
        merged = EdgeFingerprint(z)
        merged.merge(halves[first])
        merged.merge(halves[second])
        assert not merged.differing_buckets(whole).any()


def test_points_lie_above_every_key_and_the_bound_is_small():
    assert fingerprint_applies((1 << 30) - 1) and not fingerprint_applies(1 << 30)
    fp = _fingerprint_of(list(range(100)), list(range(100)), draw_points(_N))
    assert 0 < miss_bound(fp, fp, _N) < 2.0**-100
    for n in (1, 1_000, 5_000_000, (1 << 30) - 1):
        z = draw_points(n)
        assert ((z >= np.uint64(n * n)) & (z < np.uint64(MERSENNE_61))).all()


@settings(deadline=None, max_examples=200)
@given(a=st.integers(0, MERSENNE_61 - 1), b=st.integers(0, MERSENNE_61 - 1))
def test_mulmod61_is_the_product_modulo_the_prime(a, b):
    assert int(mulmod61(np.uint64(a), np.uint64(b))) == a * b % MERSENNE_61
