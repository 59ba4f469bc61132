"""Outputs on an object store, in-process (fsspec's ``memory://``): the generation-prefix
commit, resumption after a killed writer, retirement, confinement of manifest paths, and
the writer's lease (Fischer's timed mutual exclusion)."""

from __future__ import annotations

import json
import os
import socket
import tempfile
import threading
import time
import uuid

import fsspec
import pytest

import asepr.storage.commit.lease
from asepr.pipeline.config import PartitionConfig
from asepr.pipeline.partition_run import partition_to_store
from asepr.pipeline.planning.plan import plan_partition
from asepr.pipeline.store.generations import GENERATION_PATTERN, named_prefixes
from asepr.pipeline.verify import verify_output
from asepr.storage.commit.lease import LEASE_NAME, Lease
from asepr.storage.errors import StoreError
from asepr.storage.partitions.manifest import read_manifest
from asepr.storage.partitions.output_stores import open_partition
from tests.pipeline.crash import Crash, crash_at
from tests.pipeline.test_write import make_input

CONFIG = PartitionConfig(num_parts=3, algo="hash", seed=0)


@pytest.fixture(autouse=True)
def short_settle(monkeypatch):
    """In-process writes land at once: a short settle keeps the tests fast."""
    monkeypatch.setattr(asepr.storage.commit.lease, "DEFAULT_SETTLE_S", 0.05)


@pytest.fixture(scope="module")
def graph(tmp_path_factory):
    root = tmp_path_factory.mktemp("remote-in") / "in"
    make_input(root, edge_shards=2, num_nodes=300, num_edges=1500)
    return root


@pytest.fixture
def out():
    url = f"memory://asepr-tests/{uuid.uuid4().hex}/out"
    yield url
    fs = fsspec.filesystem("memory")
    root = url.removeprefix("memory://").rpartition("/")[0]
    if fs.exists(root):
        fs.rm(root, recursive=True)


def _names(url: str) -> list[str]:
    fs = fsspec.filesystem("memory")
    return sorted(p.rpartition("/")[2] for p in fs.ls(url, detail=False))


def test_partition_commits_a_generation_prefix_that_verify_and_readers_follow(graph, out):
    manifest = partition_to_store(graph, out, CONFIG)
    prefix = manifest["generation_prefix"]
    assert GENERATION_PATTERN.fullmatch(prefix) and prefix.startswith("gen-00001-")
    assert [e["path"] for e in manifest["partitions"]] == [f"{prefix}/part-{p:05d}.zarr" for p in range(3)]
    assert manifest["node_map"]["path"] == f"{prefix}/node_map.parquet"
    assert manifest["state"]["path"] == f"{prefix}/state.zarr"
    # Only the pointer and the generation remain: no lease, no staging, nothing local.
    assert _names(out) == sorted(["manifest.json", prefix])
    assert read_manifest(out) == manifest
    report = verify_output(out, input_url=graph)
    assert report.ok, report.summary()
    store = open_partition(out, 1)
    assert store.path.startswith("memory://") and store.num_edges == manifest["partitions"][1]["counts"]["edges"]


def test_overwrite_is_refused_without_the_flag_and_retires_the_old_prefix(graph, out):
    first = partition_to_store(graph, out, CONFIG)
    with pytest.raises(StoreError, match="--overwrite"):
        partition_to_store(graph, out, CONFIG)
    second = partition_to_store(graph, out, PartitionConfig(num_parts=2, algo="hash", seed=0), overwrite=True)
    assert second["generation"] == 2 and second["generation_prefix"] != first["generation_prefix"]
    assert _names(out) == sorted(["manifest.json", second["generation_prefix"]])
    assert verify_output(out, input_url=graph).ok


def test_killed_before_the_manifest_leaves_the_previous_generation_and_the_rerun_resumes(
        graph, out, monkeypatch):
    first = partition_to_store(graph, out, CONFIG)
    crash_at(monkeypatch, "manifest")
    with pytest.raises(Crash):
        partition_to_store(graph, out, CONFIG, overwrite=True)
    monkeypatch.undo()
    monkeypatch.setattr(asepr.storage.commit.lease, "DEFAULT_SETTLE_S", 0.05)
    # The pointer still names generation 1, whose stores are untouched and readable.
    assert read_manifest(out) == first
    assert verify_output(out, input_url=graph).ok
    abandoned = [n for n in _names(out) if n.startswith("gen-00002-")]
    assert len(abandoned) == 1
    assert LEASE_NAME not in _names(out)  # released on the way out (a killed process's expires)
    again = partition_to_store(graph, out, CONFIG, overwrite=True)
    assert again["generation"] == 2 and again["generation_prefix"] == abandoned[0]
    assert again["run"]["resumed_partitions"] == [0, 1, 2]
    assert _names(out) == sorted(["manifest.json", abandoned[0]])
    assert verify_output(out, input_url=graph).ok


def test_an_abandoned_prefix_of_another_run_is_deleted(graph, out, monkeypatch):
    partition_to_store(graph, out, CONFIG)
    crash_at(monkeypatch, "between-commits", after=2)
    with pytest.raises(Crash):
        partition_to_store(graph, out, PartitionConfig(num_parts=2, algo="hash", seed=0), overwrite=True)
    monkeypatch.undo()
    monkeypatch.setattr(asepr.storage.commit.lease, "DEFAULT_SETTLE_S", 0.05)
    stale = [n for n in _names(out) if n.startswith("gen-00002-")]
    again = partition_to_store(graph, out, CONFIG, overwrite=True)  # another configuration
    assert again["run"]["resumed_partitions"] == []
    assert stale[0] not in _names(out) and _names(out) == sorted(["manifest.json", again["generation_prefix"]])


def test_an_assignment_written_to_an_object_store_equals_the_local_write(graph, out, tmp_path):
    """write_partitions (node rows gathered through spill files, the stores read back for
    the node map) writes the same stores to an object store as to a local directory."""
    from asepr.pipeline.partition import partition
    from asepr.pipeline.store.write import write_partitions

    with partition(graph, config=CONFIG) as assignment:
        remote = write_partitions(assignment, out, input_url=graph)
        local = write_partitions(assignment, tmp_path / "local", input_url=graph)
    assert "gather nodes" in remote["timings"]
    assert [p["checksum"] for p in remote["partitions"]] == [p["checksum"] for p in local["partitions"]]
    assert remote["node_map"]["sha256"] == local["node_map"]["sha256"]
    assert all(p["path"].startswith(remote["generation_prefix"] + "/") for p in remote["partitions"])
    assert verify_output(out, input_url=graph).ok


def test_the_plan_reports_scratch_and_store_bytes_never_the_outputs_free_disk(graph, out):
    plan = plan_partition(graph, out, CONFIG)
    table = plan.table()
    assert plan.remote_output and plan.disk_at == tempfile.gettempdir()
    assert "local scratch" in table and "written to the store" in table
    assert f"at {out}" not in table and f"free disk" in table and "(scratch)" in table
    assert plan.scratch_bytes < plan.staging_bytes
    local = plan_partition(graph, tempfile.gettempdir() + "/asepr-plan-out", CONFIG)
    assert not local.remote_output and local.disk_bytes == local.staging_bytes


def test_a_prefix_with_foreign_objects_is_refused(graph, out):
    fsspec.filesystem("memory").pipe(f"{out}/notes.txt", b"mine")
    with pytest.raises(StoreError, match="notes.txt"):
        partition_to_store(graph, out, CONFIG)


@pytest.mark.parametrize("path", ["../elsewhere/part-00000.zarr", "s3://another-bucket/part-00000.zarr",
                                  "gen-00001-0123abcd/../../x/part-00000.zarr", "/abs/part-00000.zarr"])
def test_a_manifest_path_outside_the_output_is_refused(graph, out, path):
    manifest = partition_to_store(graph, out, CONFIG)
    crafted = json.loads(json.dumps(manifest))
    crafted["partitions"][0]["path"] = path
    fsspec.filesystem("memory").pipe(f"{out}/manifest.json", json.dumps(crafted).encode())
    with pytest.raises(StoreError) as info:
        open_partition(out, 0)
    assert "manifest.json" in str(info.value) and repr(path) in str(info.value)
    crafted = json.loads(json.dumps(manifest))
    crafted["node_map"]["path"] = path
    fsspec.filesystem("memory").pipe(f"{out}/manifest.json", json.dumps(crafted).encode())
    report = verify_output(out, input_url=graph)
    assert not report.ok and any(repr(path) in str(p) for p in report.problems)


def test_named_prefixes_are_the_first_components_of_the_manifest_paths():
    manifest = {"partitions": [{"path": "gen-00002-aa/part-00000.zarr"}, {"path": "gen-00001-bb/part-00001.zarr"}],
                "node_map": {"path": "gen-00002-aa/node_map.parquet"}, "state": {"path": "gen-00002-aa/state.zarr"}}
    assert named_prefixes(manifest) == {"gen-00002-aa", "gen-00001-bb"}
    assert named_prefixes(None) == set()


# --- the lease ----------------------------------------------------------------------------


def _lease(url: str, **kw) -> Lease:
    fs = fsspec.filesystem("memory")
    path = url.removeprefix("memory://") + "/" + LEASE_NAME
    return Lease(fs, path, f"{url}/{LEASE_NAME}", **kw)


def test_a_second_writer_is_refused_naming_the_holder(out):
    with _lease(out, command="asepr partition A") as held:
        with pytest.raises(StoreError) as info:
            _lease(out, command="asepr partition B").acquire()
        message = str(info.value)
        assert f"pid {os.getpid()}" in message and socket.gethostname() in message
        assert "asepr partition A" in message
        held.check_held()
    assert _lease(out).read() is None  # released


def test_an_expired_lease_or_one_of_a_dead_process_is_taken_over(out):
    fs = fsspec.filesystem("memory")
    path = out.removeprefix("memory://") + "/" + LEASE_NAME
    stale = {"token": "x" * 32, "host": "elsewhere", "pid": 1, "command": "old", "renewed_at": time.time() - 600,
             "ttl": 120}
    fs.pipe(path, json.dumps(stale).encode())
    with _lease(out):
        pass
    child = os.fork() if hasattr(os, "fork") else None
    if child == 0:
        os._exit(0)
    os.waitpid(child, 0)  # a pid that is gone
    dead = {**stale, "host": socket.gethostname(), "pid": child, "renewed_at": time.time()}
    fs.pipe(path, json.dumps(dead).encode())
    with _lease(out):
        pass
    live = {**stale, "host": "elsewhere", "renewed_at": time.time()}
    fs.pipe(path, json.dumps(live).encode())
    with pytest.raises(StoreError, match="host elsewhere"):
        _lease(out).acquire()


def test_a_writer_that_lost_its_lease_does_not_commit(out):
    fs = fsspec.filesystem("memory")
    lease = _lease(out).acquire()
    try:
        other = {"token": "y" * 32, "host": "h2", "pid": 7, "command": "asepr ingest", "renewed_at": time.time(),
                 "ttl": 120}
        fs.pipe(lease.path, json.dumps(other).encode())
        with pytest.raises(StoreError, match="did not commit"):
            lease.check_held()
    finally:
        lease.release()
    assert json.loads(fs.cat(lease.path))["token"] == "y" * 32  # another's lease is never deleted


def test_a_claim_slower_than_half_the_settle_time_is_retried_then_refused(out, monkeypatch):
    lease = _lease(out, settle=0.02)
    real_pipe = lease.fs.pipe

    def slow_pipe(*args, **kwargs):
        time.sleep(0.05)
        return real_pipe(*args, **kwargs)

    monkeypatch.setattr(lease.fs, "pipe", slow_pipe)
    with pytest.raises(StoreError, match="claims, the slowest"):
        lease.acquire()


def test_a_lease_object_that_is_no_lease_is_refused(out):
    fsspec.filesystem("memory").pipe(out.removeprefix("memory://") + "/" + LEASE_NAME, b"hello")
    with pytest.raises(StoreError, match="delete"):
        _lease(out).acquire()


def test_racing_writers_exactly_one_takes_the_lease_each_round(out):
    """Two claimants start together, 20 rounds: Fischer's protocol lets exactly one through."""
    for _ in range(20):
        barrier = threading.Barrier(2)
        won, lost = [], []

        def claim(name):
            lease = _lease(out, command=name, settle=0.05)
            barrier.wait()
            try:
                lease.acquire()
                won.append(lease)
            except StoreError as exc:
                lost.append(str(exc))

        threads = [threading.Thread(target=claim, args=(f"writer {i}",)) for i in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert len(won) == 1 and len(lost) == 1, (won, lost)
        assert "held by pid" in lost[0]
        won[0].release()


# --- the command line ----------------------------------------------------------------------


def test_cli_partition_verify_inspect_on_an_object_store_url(graph, out, tmp_path, capsys):
    from asepr.workflows.cli import main

    scratch = tmp_path / "scratch"
    assert main(["partition", str(graph), out, "-k", "2", "--algo", "hash", "--dry-run"]) == 0
    plan = capsys.readouterr().out
    assert "local scratch" in plan and "written to the store" in plan and f"free disk" in plan
    assert f"at {out}" not in plan.replace(f"store {out}", "")
    assert main(["partition", str(graph), out, "-k", "2", "--algo", "hash", "--scratch", str(scratch),
                 "--storage-options", "{}"]) == 0
    assert "committed generation 1" in capsys.readouterr().out
    assert scratch.is_dir() and not any(p.name.endswith(".zarr") for p in scratch.rglob("*"))
    assert main(["verify", out, "--input", str(graph), "--storage-options", "{}"]) == 0
    assert "verified: all invariants hold" in capsys.readouterr().out
    assert main(["inspect", out]) == 0
    assert "gen-00001-" not in capsys.readouterr().err


def test_cli_ingest_and_rebalance_on_an_object_store(graph, out, capsys):
    from asepr.workflows.cli import main

    partition_to_store(graph, out, CONFIG)
    assert main(["ingest", out, str(graph / "edges"), "--storage-options", "{}"]) == 0
    assert "nothing new to ingest" in capsys.readouterr().out  # the input's own shards are known
    # The state is read from the store; a hash output has no communities to move.
    assert main(["rebalance", out, "--storage-options", "{}"]) == 1
    assert "an output of a community algorithm" in capsys.readouterr().err
    assert _names(out) == sorted(["manifest.json", read_manifest(out)["generation_prefix"]])


def test_ingest_into_an_object_store_output_writes_the_next_generation_prefix(graph, out, tmp_path):
    """ingest rebuilds only the changed partitions into a new prefix; the manifest keeps
    naming the old prefix for the stores it kept, which is therefore not retired."""
    import numpy as np
    import pyarrow.parquet as pq

    from asepr.pipeline.increment.ingest import ingest
    from tests.storage.helpers import edge_table

    first = partition_to_store(graph, out, PartitionConfig(num_parts=3, algo="asep", seed=0))
    new = tmp_path / "new"
    new.mkdir()
    rng = np.random.default_rng(3)
    pq.write_table(edge_table(rng.integers(0, 300, 40), rng.integers(0, 300, 40)), new / "part-0.parquet")
    second = ingest(out, new)
    assert second["generation"] == 2 and second["increments"]
    changed = set(second["run"]["changed_partitions"])
    prefix = second["generation_prefix"]
    for entry in second["partitions"]:
        expected = prefix if entry["part_id"] in changed else first["generation_prefix"]
        assert entry["path"].startswith(expected + "/")
    assert second["node_map"]["path"].startswith(prefix) and second["state"]["path"].startswith(prefix)
    assert set(_names(out)) == {"manifest.json", prefix} | named_prefixes(second)
    report = verify_output(out)
    assert report.ok, report.summary()
    assert ingest(out, new)["generation"] == 2  # ingested before: skipped


def test_rebalance_of_a_local_output_copied_to_the_store(tmp_path_factory, tmp_path, out):
    """A local output copied to the store by hand (manifest paths without a prefix) is
    rebalanced there: moved partitions go to a new prefix, the manifest keeps naming the
    copied stores it did not change, and the copied files it no longer names are retired."""
    from asepr.pipeline import ingest, rebalance
    from asepr.pipeline.inputs.synth import SynthConfig, generate
    from tests.pipeline.ingest_cases import skewed_edges

    base = tmp_path / "drift"
    generate(base / "in", SynthConfig(num_nodes=1200, num_edges=8000, num_classes=24, dim=8), shard_rows=4000)
    local = base / "out"
    partition_to_store(base / "in", local, PartitionConfig(num_parts=4))
    skewed_edges(local, base / "hot")
    assert ingest(local, base / "hot")["metrics"]["drift"]["rebalance_advised"]
    fs = fsspec.filesystem("memory")
    for name in ("manifest.json", "node_map.parquet", "state.zarr", *(f"part-{p:05d}.zarr" for p in range(4))):
        fs.put(str(local / name), f"{out}/{name}", recursive=(local / name).is_dir())
    before = read_manifest(out)
    manifest = rebalance(out)
    assert manifest["generation"] == before["generation"] + 1 and manifest["rebalances"]
    prefix = manifest["generation_prefix"]
    changed = set(manifest["run"]["changed_partitions"])
    assert changed and all(e["path"].startswith(prefix + "/") == (e["part_id"] in changed)
                           for e in manifest["partitions"])
    assert set(_names(out)) == {"manifest.json"} | named_prefixes(manifest)
    report = verify_output(out)
    assert report.ok, report.summary()


def test_an_ingest_of_a_text_edge_list_into_an_object_store_is_refused_with_the_fix(graph, out, tmp_path):
    from asepr.pipeline.increment.ingest import ingest

    partition_to_store(graph, out, CONFIG)
    edges = tmp_path / "new.tsv"
    edges.write_text("0\t1\n2\t3\n")
    with pytest.raises(StoreError, match="text edge list does not write to an object store yet.*Parquet shards"):
        ingest(out, edges)


def test_an_ingest_killed_before_its_manifest_is_resumed_by_the_same_command(graph, out, tmp_path, monkeypatch):
    import numpy as np
    import pyarrow.parquet as pq

    from asepr.pipeline.increment.ingest import ingest
    from tests.storage.helpers import edge_table

    first = partition_to_store(graph, out, PartitionConfig(num_parts=3, algo="asep", seed=0))
    new = tmp_path / "new"
    new.mkdir()
    rng = np.random.default_rng(4)
    pq.write_table(edge_table(rng.integers(0, 300, 40), rng.integers(0, 300, 40)), new / "part-0.parquet")
    crash_at(monkeypatch, "manifest")
    with pytest.raises(Crash):
        ingest(out, new)
    monkeypatch.undo()
    monkeypatch.setattr(asepr.storage.commit.lease, "DEFAULT_SETTLE_S", 0.05)
    assert read_manifest(out) == first and verify_output(out).ok
    abandoned = [n for n in _names(out) if n.startswith("gen-00002-")]
    assert len(abandoned) == 1
    again = ingest(out, new)
    assert again["generation"] == 2 and again["generation_prefix"] == abandoned[0]
    assert again["run"]["resumed_partitions"] == again["run"]["changed_partitions"]
    report = verify_output(out)
    assert report.ok, report.summary()
