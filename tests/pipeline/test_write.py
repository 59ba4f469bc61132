"""The write path: invariants of committed outputs, resumption, failures, Dask clusters.

``check_output`` checks an output independently of ``asepr.pipeline.verify`` (plain numpy
over the whole graph, which is small here), and every test also runs the verifier.
"""

from __future__ import annotations

import errno
import json
import shutil
from collections import Counter
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import asepr.storage.partitions.store
from asepr.pipeline.config import ALGORITHMS, PartitionConfig
from asepr.pipeline.partition import partition
from asepr.pipeline.partition_run import partition_to_store
from asepr.pipeline.store.write import write_partitions
from asepr.pipeline.verify import verify_output
from asepr.storage.errors import AseprError, InputError, SchemaError, StoreError
from asepr.storage.partitions.manifest import STAGING_NAME, read_manifest
from asepr.storage.partitions.output_stores import open_partition
from asepr.storage.partitions.store import combine_digests, zarr_array_digest
from tests.pipeline.crash import Crash, crash_at
from tests.storage.helpers import edge_table, node_table, write_input

NUM_NODES, NUM_EDGES = 1000, 6000


def make_input(root: Path, *, edge_shards: int = 3, undirected: bool = False, seed: int = 0,
               num_nodes: int = NUM_NODES, num_edges: int = NUM_EDGES) -> dict:
    """A seeded attributed graph (isolated nodes, a self-loop, a duplicate edge)."""
    arrays = write_input(root, num_nodes=num_nodes, num_edges=num_edges, dim=6, num_classes=4,
                         edge_shards=edge_shards, node_shards=2, seed=seed,
                         meta={"undirected": undirected, "num_nodes": num_nodes})
    arrays["undirected"] = undirected
    return arrays


def _input_edges(arrays) -> Counter:
    return Counter(zip(arrays["src"].tolist(), arrays["dst"].tolist()))


def check_output(out: Path, arrays: dict, *, halo: int = 0) -> dict:
    """Check every invariant of ``out`` against the input ``arrays`` with plain numpy."""
    manifest = read_manifest(out)
    k = manifest["num_parts"]
    n_total = len(arrays["feat"])
    edges = Counter()
    mastered = []
    for p in range(k):
        store = open_partition(out, p)
        data = store.to_numpy()
        gid = data["nodes/global_nid"]
        indptr, indices = data["edges/indptr"], data["edges/indices"]
        assert store.generation == manifest["generation"] and store.num_parts == k
        # CSR well formed over part_local_nid.
        assert (np.diff(gid) > 0).all() and gid.min(initial=0) >= 0 and gid.max(initial=0) < n_total
        assert indptr[0] == 0 and indptr[-1] == len(indices) and (np.diff(indptr) >= 0).all()
        assert len(indptr) == len(gid) + 1
        assert indices.dtype == (np.int32 if len(gid) < 2**31 else np.int64)
        assert len(indices) == 0 or (indices.min() >= 0 and indices.max() < len(gid))
        # Features, labels and splits match the input through global_nid.
        np.testing.assert_array_equal(data["nodes/x"], arrays["feat"][gid])
        np.testing.assert_array_equal(data["nodes/y"], arrays["label"][gid])
        np.testing.assert_array_equal(data["nodes/split"], arrays["split"][gid])
        mastered.append(gid[data["nodes/is_master"]])
        src = gid[np.repeat(np.arange(len(gid)), np.diff(indptr))]
        dst = gid[indices]
        is_halo = data.get("edges/is_halo", np.zeros(len(indices), bool))
        assert (halo == 1) == ("edges/is_halo" in data)
        edges.update(zip(src[~is_halo].tolist(), dst[~is_halo].tolist()))
        # Checksums: per array and combined, as in attrs and manifest.
        digests = {name: zarr_array_digest(name, arr) for name, arr in store.arrays.items()}
        assert digests == store.attrs["array_checksums"]
        assert combine_digests(digests) == store.attrs["checksum"] == manifest["partitions"][p]["checksum"]
        counts = manifest["partitions"][p]["counts"]
        assert counts["nodes"] == len(gid) and counts["edges"] == len(indices)
        assert counts["masters"] == int(data["nodes/is_master"].sum())
        if halo:
            is_m = data["nodes/is_master"]
            into = Counter(dst.tolist())
            if arrays["undirected"]:
                into.update(s for s, d in zip(src.tolist(), dst.tolist()) if s != d)
            want = Counter(arrays["dst"].tolist())
            if arrays["undirected"]:
                want.update(s for s, d in zip(arrays["src"].tolist(), arrays["dst"].tolist()) if s != d)
            for v in gid[is_m].tolist():
                assert into[v] == want[v], f"partition {p}: master {v} lacks in-edges"
    # The union of the partitions' edges is the input multiset, each edge exactly once.
    assert edges == _input_edges(arrays)
    # Every node has exactly one master.
    mastered = np.concatenate(mastered)
    np.testing.assert_array_equal(np.sort(mastered), np.arange(n_total))
    # node_map agrees.
    node_map = pq.read_table(out / "node_map.parquet")
    np.testing.assert_array_equal(node_map["global_nid"].to_numpy(), np.arange(n_total))
    for p in range(k):
        store = open_partition(out, p)
        gid, is_m = store.global_nid[...], store.is_master[...]
        np.testing.assert_array_equal(node_map["part_id"].to_numpy()[gid[is_m]], p)
        np.testing.assert_array_equal(node_map["part_local_nid"].to_numpy()[gid[is_m]], np.flatnonzero(is_m))
    report = verify_output(out)
    assert report.ok, report.summary()
    return manifest


def _committed_files(out: Path) -> set[str]:
    return {p.name for p in out.iterdir()} if out.exists() else set()


@pytest.fixture(scope="module")
def small_input(tmp_path_factory) -> tuple[Path, dict]:
    root = tmp_path_factory.mktemp("small") / "in"
    return root, make_input(root, edge_shards=3)


@pytest.mark.parametrize("num_shards", [1, 8])
@pytest.mark.parametrize("k", [1, 4])
def test_invariants_for_shards_and_parts(tmp_path, num_shards, k):
    arrays = make_input(tmp_path / "in", edge_shards=num_shards, seed=num_shards + k)
    manifest = partition_to_store(tmp_path / "in", tmp_path / "out", PartitionConfig(num_parts=k))
    assert manifest["generation"] == 1 and manifest["num_parts"] == k
    assert len(manifest["input"]["edges"]) == num_shards
    assert all(len(s["sha256"]) == 64 for s in manifest["input"]["edges"] + manifest["input"]["nodes"])
    assert manifest["algorithm"] == "asep" and manifest["config"]["num_parts"] == k
    assert {"replication_factor", "edge_balance"} <= set(manifest["metrics"])
    check_output(tmp_path / "out", arrays)
    assert not (tmp_path / "out" / STAGING_NAME).exists()
    assert not (tmp_path / "out" / ".asepr.lock").exists()


@pytest.mark.parametrize("algo", ALGORITHMS)
def test_every_algorithm_writes_valid_stores(tmp_path, small_input, algo):
    if algo == "metis":
        pytest.importorskip("pymetis", reason="metis needs pymetis: install asepr[metis] (asepr[test] has it)")
    root, arrays = small_input
    manifest = partition_to_store(root, tmp_path / "out", PartitionConfig(num_parts=3, algo=algo))
    assert manifest["algorithm"] == algo
    check_output(tmp_path / "out", arrays)


@pytest.mark.parametrize("undirected", [False, True])
def test_halo_holds_every_in_edge_of_each_master(tmp_path, undirected):
    arrays = make_input(tmp_path / "in", edge_shards=2, undirected=undirected)
    manifest = partition_to_store(tmp_path / "in", tmp_path / "out", PartitionConfig(num_parts=4), halo=1)
    assert manifest["halo"] == 1
    assert sum(e["counts"]["halo_edges"] for e in manifest["partitions"]) > 0
    check_output(tmp_path / "out", arrays, halo=1)


def test_write_partitions_from_an_assignment(tmp_path, small_input):
    root, arrays = small_input
    with partition(root, 4, algo="hdrf") as assignment:
        manifest = write_partitions(assignment, tmp_path / "out", input_url=root)
    assert manifest["algorithm"] == "hdrf"
    check_output(tmp_path / "out", arrays)


def test_second_generation_needs_overwrite_and_replaces_the_first(tmp_path, small_input):
    root, arrays = small_input
    out = tmp_path / "out"
    partition_to_store(root, out, PartitionConfig(num_parts=5, algo="hash"))
    with pytest.raises(StoreError, match="--overwrite"):
        partition_to_store(root, out, PartitionConfig(num_parts=3, algo="hash"))
    manifest = partition_to_store(root, out, PartitionConfig(num_parts=3, algo="hash"), overwrite=True)
    assert manifest["generation"] == 2
    check_output(out, arrays)
    # The retired stores of generation 1 are gone; nothing else is left behind.
    assert _committed_files(out) == {"manifest.json", "node_map.parquet", "state.zarr",
                                     "part-00000.zarr", "part-00001.zarr", "part-00002.zarr"}


def test_progress_reports_every_stage(tmp_path, small_input):
    events: dict[str, list[int]] = {}

    class Bar:
        def __init__(self, name, total):
            self.name = name
            events[name] = [total, 0]

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return False

        def update(self, n=1):
            events[self.name][1] += n

    root, _ = small_input
    partition_to_store(root, tmp_path / "out", PartitionConfig(num_parts=3, algo="hash"), progress=Bar)
    # The node rows come from the validator's decoded node table: no gather pass.
    assert set(events) == {"assign", "route", "finalize edges", "finalize nodes"}
    assert all(total == done > 0 for total, done in events.values()), events


def test_more_partitions_than_busy_nodes_and_an_empty_shard(tmp_path):
    root = tmp_path / "in"
    arrays = write_input(root, num_nodes=6, num_edges=3, dim=3, edge_shards=2, node_shards=1,
                         meta={"undirected": False, "num_nodes": 6})
    pq.write_table(edge_table(np.zeros(0, np.int64), np.zeros(0, np.int64)),
                   root / "edges" / "part-00009.parquet")
    arrays["undirected"] = False
    manifest = partition_to_store(root, tmp_path / "out", PartitionConfig(num_parts=8, algo="hash"))
    assert 0 in [e["counts"]["nodes"] for e in manifest["partitions"]]
    check_output(tmp_path / "out", arrays)


# --- failures ----------------------------------------------------------------------------


def _crash_at(monkeypatch, stage: str, after: int = 1) -> None:
    crash_at(monkeypatch, stage, after)


def test_failed_run_resumes_finished_partitions_verified_by_checksum(tmp_path, small_input, monkeypatch):
    root, arrays = small_input
    out = tmp_path / "out"
    config = PartitionConfig(num_parts=4, algo="hash")
    _crash_at(monkeypatch, "between-commits", after=2)
    with pytest.raises(Crash):
        partition_to_store(root, out, config)
    staging = out / STAGING_NAME
    finished = sorted(p.name for p in staging.glob("part-*.zarr"))
    assert len(finished) >= 2 and not (out / "manifest.json").exists()
    monkeypatch.undo()
    manifest = partition_to_store(root, out, config)
    assert len(manifest["run"]["resumed_partitions"]) >= 2
    check_output(out, arrays)


def test_resume_discards_a_finished_store_whose_checksum_fails(tmp_path, small_input, monkeypatch):
    root, arrays = small_input
    out = tmp_path / "out"
    config = PartitionConfig(num_parts=4, algo="hash")
    _crash_at(monkeypatch, "between-commits", after=2)
    with pytest.raises(Crash):
        partition_to_store(root, out, config)
    monkeypatch.undo()
    victim = min((out / STAGING_NAME).glob("part-*.zarr"))
    chunk = next(p for p in (victim / "nodes" / "y").rglob("*") if p.is_file() and p.name != "zarr.json")
    chunk.write_bytes(b"garbage")
    manifest = partition_to_store(root, out, config)
    assert int(victim.name[5:10]) not in manifest["run"]["resumed_partitions"]
    check_output(out, arrays)


def test_rerun_with_another_config_starts_clean(tmp_path, small_input, monkeypatch):
    root, arrays = small_input
    out = tmp_path / "out"
    _crash_at(monkeypatch, "between-commits", after=2)
    with pytest.raises(Crash):
        partition_to_store(root, out, PartitionConfig(num_parts=4, algo="hash"))
    monkeypatch.undo()
    manifest = partition_to_store(root, out, PartitionConfig(num_parts=4, algo="dbh"))
    assert manifest["run"]["resumed_partitions"] == [] and manifest["algorithm"] == "dbh"
    check_output(out, arrays)


@pytest.mark.parametrize("same_config", [True, False])
def test_interrupted_commit_rolls_forward_or_back(tmp_path, small_input, monkeypatch, same_config):
    root, arrays = small_input
    out = tmp_path / "out"
    first = partition_to_store(root, out, PartitionConfig(num_parts=3, algo="hash"))
    _crash_at(monkeypatch, "swap")
    with pytest.raises(Crash):
        partition_to_store(root, out, PartitionConfig(num_parts=4, algo="hash"), overwrite=True)
    monkeypatch.undo()
    # Mid-swap: the manifest still names generation 1, and readers still find all of it.
    assert read_manifest(out)["generation"] == 1
    assert open_partition(out, 0).generation == 1
    report = verify_output(out)
    assert report.ok and report.generation == 1, report.summary()
    assert check_output(out, arrays)["partitions"] == first["partitions"]
    config = PartitionConfig(num_parts=4 if same_config else 2, algo="hash")
    manifest = partition_to_store(root, out, config, overwrite=True)
    assert manifest["generation"] == 2
    assert manifest["num_parts"] == config.num_parts
    check_output(out, arrays)


def test_disk_full_mid_write_leaves_the_previous_generation(tmp_path, small_input, monkeypatch):
    root, arrays = small_input
    out = tmp_path / "out"
    first = partition_to_store(root, out, PartitionConfig(num_parts=3, algo="hash"))
    real = asepr.storage.partitions.store._write_block
    calls = {"n": 0}

    def full_disk(array, start, block):
        calls["n"] += 1
        if calls["n"] == 9:
            raise OSError(errno.ENOSPC, "No space left on device", str(array.path))
        return real(array, start, block)

    monkeypatch.setattr(asepr.storage.partitions.store, "_write_block", full_disk)
    with pytest.raises(StoreError) as info:
        partition_to_store(root, out, PartitionConfig(num_parts=4, algo="hash"), overwrite=True)
    message = str(info.value)
    assert "No space left on device" in message and "rerun" in message and str(out) in message
    assert read_manifest(out)["partitions"] == first["partitions"]
    check_output(out, arrays)
    monkeypatch.undo()
    manifest = partition_to_store(root, out, PartitionConfig(num_parts=4, algo="hash"), overwrite=True)
    assert manifest["generation"] == 2
    check_output(out, arrays)


def _break_dtype(root: Path):
    path = root / "edges" / "part-00000.parquet"
    t = pq.read_table(path)
    pq.write_table(t.set_column(0, "src", t["src"].cast(pa.int32())), path)


def _break_range(root: Path):
    path = root / "edges" / "part-00001.parquet"
    t = pq.read_table(path)
    src = t["src"].to_numpy().copy()
    src[3] = NUM_NODES + 7
    pq.write_table(edge_table(src, t["dst"].to_numpy()), path)


def _break_nan(root: Path):
    path = root / "nodes" / "part-00000.parquet"
    t = pq.read_table(path)
    feat = np.stack(t["feat"].to_numpy(zero_copy_only=False)).astype(np.float32)
    feat[5, 2] = np.nan
    pq.write_table(node_table(t["id"].to_numpy(), feat, t["label"].to_numpy(), t["split"].to_numpy()), path)


def _break_missing_node(root: Path):
    path = root / "nodes" / "part-00001.parquet"
    t = pq.read_table(path)
    pq.write_table(t.slice(1), path)
    meta = json.loads((root / "meta.json").read_text())
    meta["num_nodes"] = NUM_NODES - 1
    (root / "meta.json").write_text(json.dumps(meta))


def _break_truncated(root: Path):
    path = root / "edges" / "part-00002.parquet"
    path.write_bytes(path.read_bytes()[:100])


def _break_empty(root: Path):
    for p in (root / "edges").iterdir():
        p.unlink()


@pytest.mark.parametrize(
    "breaker, error",
    [(_break_dtype, SchemaError), (_break_range, InputError), (_break_nan, InputError),
     (_break_missing_node, InputError), (_break_truncated, InputError), (_break_empty, InputError)],
    ids=["dtype", "out-of-range", "nan", "missing-node", "truncated", "empty"],
)
@pytest.mark.parametrize("previous", [False, True])
def test_bad_input_fails_before_anything_is_written(tmp_path, small_input, breaker, error, previous):
    root = tmp_path / "in"
    shutil.copytree(small_input[0], root)
    out = tmp_path / "out"
    if previous:
        first = partition_to_store(root, out, PartitionConfig(num_parts=2, algo="hash"))
    before = _committed_files(out)
    breaker(root)
    with pytest.raises(error):
        partition_to_store(root, out, PartitionConfig(num_parts=3, algo="hash"), overwrite=True)
    assert _committed_files(out) == before  # no partition, no staging, no lock
    if previous:
        assert read_manifest(out)["partitions"] == first["partitions"]
        assert verify_output(out, input_url=small_input[0]).ok


def test_node_rows_in_any_order_reach_their_partitions(tmp_path):
    # Node shards in id order take the gather's slice path, shuffled ones its search
    # path: both give every partition the right rows (features, labels, splits).
    arrays = make_input(tmp_path / "in", seed=5)
    for shard in sorted((tmp_path / "in" / "nodes").glob("*.parquet")):
        table = pq.read_table(shard)
        order = np.random.default_rng(1).permutation(table.num_rows)
        pq.write_table(table.take(order), tmp_path / "shuffled.parquet")
        (tmp_path / "shuffled.parquet").replace(shard.with_name(f"s-{shard.name}"))
        shard.unlink()
    for ordered in (True, False):
        root = tmp_path / "in" if not ordered else tmp_path / "sorted"
        if ordered:
            make_input(root, seed=5)
        partition_to_store(root, tmp_path / f"out-{ordered}", PartitionConfig(num_parts=3, algo="hash"))
        check_output(tmp_path / f"out-{ordered}", arrays)


def test_the_decoded_edge_copy_is_removed_and_a_killed_runs_copy_too(tmp_path, small_input):
    # The validator's decoded copy lives in the locked output while the streams read it;
    # a run leaves none behind, removes one a killed run left, and gives the same stores.
    from asepr.storage.inputs.decoded import DECODED_PREFIX

    out = tmp_path / "out"
    first = partition_to_store(small_input[0], out, PartitionConfig(num_parts=3))
    assert not list(out.glob(f"{DECODED_PREFIX}*"))
    stale = out / f"{DECODED_PREFIX}killed"
    stale.mkdir()
    (stale / "edges-00000.src").write_bytes(b"x" * 8)
    again = partition_to_store(small_input[0], out, PartitionConfig(num_parts=3, seed=0, concurrent_fallback=False),
                               overwrite=True)
    assert not list(out.glob(f"{DECODED_PREFIX}*"))
    assert again["generation"] == first["generation"] + 1
    with partition(small_input[0], config=PartitionConfig(num_parts=3)) as a:  # Parquet streams
        parts = np.concatenate([np.asarray(a.edge_parts(i)) for i in range(len(a.edge_shards))])
    stored = {entry["part_id"]: entry["counts"]["edges"] for entry in again["partitions"]}
    assert [stored[p] for p in range(3)] == np.bincount(parts, minlength=3).tolist()
    assert verify_output(out, input_url=small_input[0]).ok


def test_unwritable_or_foreign_output_is_refused_clearly(tmp_path, small_input):
    root, _ = small_input
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    with pytest.raises(StoreError, match=r"a-file/out.*Fix: choose an output path"):
        partition_to_store(root, blocker / "out", PartitionConfig(num_parts=2, algo="hash"))
    with pytest.raises(StoreError, match="an existing file"):
        partition_to_store(root, blocker, PartitionConfig(num_parts=2, algo="hash"))
    foreign = tmp_path / "foreign"
    foreign.mkdir()
    (foreign / "notes.txt").write_text("mine")
    with pytest.raises(StoreError, match="notes.txt"):
        partition_to_store(root, foreign, PartitionConfig(num_parts=2, algo="hash"))
    assert sorted(p.name for p in foreign.iterdir()) == ["notes.txt"]


def test_verify_reports_each_violation_by_partition(tmp_path, small_input):
    root, _ = small_input
    out = tmp_path / "out"
    partition_to_store(root, out, PartitionConfig(num_parts=3, algo="hash"))
    import zarr

    group = zarr.open_group(str(out / "part-00001.zarr"), mode="r+")
    indices = group["edges/indices"][...]
    indices[0] = (indices[0] + 1) % group["nodes/global_nid"].shape[0]
    group["edges/indices"][...] = indices
    group = zarr.open_group(str(out / "part-00002.zarr"), mode="r+")
    is_master = group["nodes/is_master"][...]
    is_master[:] = False
    group["nodes/is_master"][...] = is_master
    report = verify_output(out)
    text = report.summary()
    assert not report.ok
    assert "partition 1: checksum mismatch: array edges/indices" in text
    assert "partition 2: checksum mismatch: array nodes/is_master" in text
    assert "have no master" in text and "edges: edge (" in text


def test_local_cluster_gives_the_same_result_as_threads(tmp_path, small_input):
    distributed = pytest.importorskip("distributed")
    from asepr.workflows.dask_client import dask_client

    root, arrays = small_input
    config = PartitionConfig(num_parts=4)
    threads = partition_to_store(root, tmp_path / "threads", config)
    with (
        distributed.LocalCluster(n_workers=2, processes=True, threads_per_worker=1,
                                 dashboard_address=None) as cluster,
        dask_client(scheduler_address=cluster.scheduler_address) as client,
    ):
        assert client is not None and len(client.scheduler_info()["workers"]) == 2
        remote = partition_to_store(root, tmp_path / "cluster", config, client=client)
        # The CLI finds the same cluster through DASK_SCHEDULER_ADDRESS.
        from asepr.workflows.cli import main

        with pytest.MonkeyPatch.context() as env:
            env.setenv("DASK_SCHEDULER_ADDRESS", cluster.scheduler_address)
            assert main(["partition", str(root), str(tmp_path / "cli"), "-k", "4", "-q"]) == 0
    assert [e["checksum"] for e in remote["partitions"]] == [e["checksum"] for e in threads["partitions"]]
    assert remote["node_map"]["sha256"] == threads["node_map"]["sha256"]
    cli = read_manifest(tmp_path / "cli")
    assert [e["checksum"] for e in cli["partitions"]] == [e["checksum"] for e in threads["partitions"]]
    assert cli["run"]["peak_rss_bytes"]["workers"]  # it ran on the cluster's workers
    assert set(remote["run"]["peak_rss_bytes"]["workers"]) and not threads["run"]["peak_rss_bytes"]["workers"]
    check_output(tmp_path / "cluster", arrays)


def test_asepr_errors_are_one_family():
    assert issubclass(StoreError, AseprError)


def test_node_rows_from_the_decoded_table_match_the_gather(tmp_path):
    # `asepr partition` takes the node rows from the validator's decoded node table;
    # writing the same assignment through the node-shard gather (write_partitions)
    # gives byte-identical stores, also when the shards list the ids out of order.
    arrays = make_input(tmp_path / "in", seed=5)
    order = np.random.default_rng(5).permutation(len(arrays["feat"]))
    for f in (tmp_path / "in" / "nodes").iterdir():
        f.unlink()
    for i, idx in enumerate(np.array_split(order, 3)):
        pq.write_table(node_table(idx, arrays["feat"][idx], arrays["label"][idx], arrays["split"][idx]),
                       tmp_path / "in" / "nodes" / f"part-{i:05d}.parquet")
    config = PartitionConfig(num_parts=4)
    fast = partition_to_store(tmp_path / "in", tmp_path / "fast", config)
    assert "gather nodes" not in fast["timings"]
    check_output(tmp_path / "fast", arrays)
    with partition(tmp_path / "in", config=config) as assignment:
        gathered = write_partitions(assignment, tmp_path / "gathered", input_url=tmp_path / "in")
    assert "gather nodes" in gathered["timings"]
    assert [p["checksum"] for p in fast["partitions"]] == [p["checksum"] for p in gathered["partitions"]]
    # The node map built from the ids beside the sweep equals the one read from the stores.
    assert fast["node_map"]["sha256"] == gathered["node_map"]["sha256"]


def test_node_map_and_node_sweep_refuse_damaged_id_files(tmp_path):
    # The staging's id files are read back before they are built on: a file with the
    # wrong length, or ids out of order, is a StoreError naming it, not a wrong map.
    from asepr.pipeline.store.commit import Staging, node_map_from_ids
    from asepr.pipeline.store.finalize import finalize_nodes_from_table
    from asepr.storage.inputs.decoded_copy import validate_and_copy
    from asepr.storage.inputs.directory import open_input
    from asepr.storage.inputs.node_table import NodeTable
    from asepr.storage.partitions.store import create_store

    staging = Staging(tmp_path / "out")
    staging.root.mkdir(parents=True)
    master = np.array([0, 1, 0, 1, 1], dtype=np.int32)
    np.save(tmp_path / "master.npy", master)
    good = [tmp_path / "g0.npy", tmp_path / "g1.npy"]
    np.save(good[0], np.array([0, 1, 2], dtype=np.int64))
    np.save(good[1], np.array([1, 3, 4], dtype=np.int64))
    sha = node_map_from_ids(staging, str(tmp_path / "master.npy"), [str(p) for p in good], fix="rerun")
    table = pq.read_table(staging.node_map)
    assert table.column("part_id").to_pylist() == [0, 1, 0, 1, 1] and len(sha) == 64
    assert table.column("part_local_nid").to_pylist() == [0, 0, 2, 1, 2]
    np.save(good[1], np.array([3, 1, 4], dtype=np.int64))
    with pytest.raises(StoreError, match=r"partition 1, node id file .*g1\.npy"):
        node_map_from_ids(staging, str(tmp_path / "master.npy"), [str(p) for p in good], fix="rerun")
    np.save(good[1], np.array([3, 4], dtype=np.int64))  # node 1's master partition lacks it
    with pytest.raises(StoreError, match=r"1 node\(s\) without one, e\.g\. global_nid 1"):
        node_map_from_ids(staging, str(tmp_path / "master.npy"), [str(p) for p in good], fix="rerun")

    write_input(tmp_path / "in", num_nodes=20, num_edges=40, dim=3)
    (tmp_path / "copy").mkdir()
    report = validate_and_copy(open_input(tmp_path / "in"), tmp_path / "copy")
    node_table_copy = NodeTable(tmp_path / "copy", report.num_nodes, report.feat_dim)
    info = {"part_id": 0, "counts": {"nodes": 4}, "digests": {}, "index_dtype": "int32"}
    for ids, message in ((np.array([1, 2, 3], np.int64), r"4 increasing node ids.*shape \(3,\)"),
                         (np.array([1, 5, 3, 7], np.int64), r"4 increasing node ids.*out of order")):
        np.save(tmp_path / "ids.npy", ids)
        create_store(tmp_path / "s.zarr")
        with pytest.raises(StoreError, match=message):
            finalize_nodes_from_table([0], [info], table=node_table_copy, global_nid_paths=[str(tmp_path / "ids.npy")],
                                      store_paths=[str(tmp_path / "s.zarr")], final_paths=[str(tmp_path / "f.zarr")],
                                      attrs={})
        shutil.rmtree(tmp_path / "s.zarr")
    assert not (tmp_path / "f.zarr").exists()


def test_state_written_beside_the_stores_gates_the_commit(tmp_path, small_input, monkeypatch):
    # The state is written on a thread beside the route and the edge stores: its error
    # fails the run before anything is committed (the stores are staged), and the
    # rerun, finding no staged state, partitions again and commits a verified output.
    import asepr.pipeline.store.continuation as continuation

    root, _ = small_input
    out = tmp_path / "out"
    real = continuation.write_assignment_state

    def failing(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device (state)")

    monkeypatch.setattr(continuation, "write_assignment_state", failing)
    with pytest.raises(StoreError, match=r"\(state\)"):
        partition_to_store(root, out, PartitionConfig(num_parts=3, algo="hash"))
    assert read_manifest(out, missing_ok=True) is None
    monkeypatch.setattr(continuation, "write_assignment_state", real)
    manifest = partition_to_store(root, out, PartitionConfig(num_parts=3, algo="hash"))
    assert manifest["generation"] == 1 and manifest["state"]
    assert verify_output(out, input_url=root).ok


@pytest.mark.parametrize("dtype", ["edge32", "edge64", "node"])
def test_spill_segments_round_trip(tmp_path, dtype):
    # Route and gather spills (asepr.pipeline.store.route.SegmentWriter): segments of any
    # length (empty, short, long, records of 17 + 4d bytes) read back exactly, per
    # partition and kind in spill order, from several spill files; a short file is
    # refused by name.
    from asepr.pipeline.store.route import (
        EDGE_RECORD,
        EDGE_RECORD32,
        SegmentWriter,
        node_record,
        read_segments,
    )

    record = {"edge32": EDGE_RECORD32, "edge64": EDGE_RECORD, "node": node_record(5)}[dtype]
    rng = np.random.default_rng(1)
    spills, expected = [], {}
    for f in range(3):
        paths = (tmp_path / f"s{f}.bin", tmp_path / f"s{f}.idx.npy")
        writer = SegmentWriter(*paths)
        for _ in range(9):
            part, kind, count = int(rng.integers(0, 3)), int(rng.integers(0, 2)), int(rng.integers(0, 3000))
            records = np.zeros(count, dtype=record)
            raw = records.view(np.uint8).reshape(count, -1)
            raw[:] = rng.integers(0, 256, size=raw.shape, dtype=np.uint8)
            writer.write(part, kind, records)
            if count:
                expected.setdefault(part, {}).setdefault(kind, []).append(records)
        writer.close()
        spills.append(paths)
    for part in range(3):
        got = read_segments(spills, part, record)
        want = {kind: np.concatenate(blocks) for kind, blocks in expected.get(part, {}).items()}
        assert sorted(got) == sorted(want)
        for kind in want:
            assert got[kind].tobytes() == want[kind].tobytes()
    truncated = spills[0][0]
    truncated.write_bytes(truncated.read_bytes()[:-3])
    with pytest.raises(StoreError, match=r"spill file .*s0\.bin"):  # its last segment lost 3 bytes
        for part in range(3):
            read_segments(spills[:1], part, record)


@pytest.mark.parametrize("halo", [0, 1])
def test_edge_sort_keys_by_shifts_or_products_give_the_same_stores(tmp_path, small_input, monkeypatch, halo):
    # finalize_edges packs (source, destination[, halo flag]) into one int64 by shifts
    # where the part-local ids fit, else as source * n + destination: the same order,
    # so the same stores (their checksums over every array), with and without halo copies.
    import asepr.pipeline.store.finalize as finalize

    root, _ = small_input
    shifted = partition_to_store(root, tmp_path / "a", PartitionConfig(num_parts=3), halo=halo)
    monkeypatch.setattr(finalize, "_key_bits", lambda n: None)
    product = partition_to_store(root, tmp_path / "b", PartitionConfig(num_parts=3), halo=halo)
    digests = [{e["part_id"]: e["checksum"] for e in m["partitions"]} for m in (shifted, product)]
    assert digests[0] == digests[1]
    assert verify_output(tmp_path / "b", input_url=root).ok
