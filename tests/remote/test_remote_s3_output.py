"""Partition outputs written to a real S3-compatible server (``rclone serve s3``) through s3fs:
commit and verify, a killed writer, racing writers, crafted manifests."""

from __future__ import annotations

import json
import multiprocessing
import os
import subprocess
import sys
import textwrap
import time
import uuid

import pytest
import s3fs

from asepr.pipeline.config import PartitionConfig
from asepr.pipeline.partition_run import partition_to_store
from asepr.pipeline.verify import verify_output
from asepr.storage.errors import StoreError
from asepr.storage.partitions.manifest import read_manifest
from asepr.storage.partitions.output_stores import open_partition
from tests.pipeline.test_write import make_input
from tests.remote.s3server import S3Location
from tests.remote.writers import BARRIER_TIMEOUT_S, racing_partitioner

CONFIG = PartitionConfig(num_parts=2, algo="hash", seed=0)


@pytest.fixture(scope="module")
def graph(tmp_path_factory):
    root = tmp_path_factory.mktemp("s3-in") / "in"
    make_input(root, edge_shards=2, num_nodes=300, num_edges=1500)
    return root


def _fs(options) -> s3fs.S3FileSystem:
    return s3fs.S3FileSystem(skip_instance_cache=True, **options)


@pytest.fixture
def s3_bucket(s3_server) -> S3Location:
    """A fresh bucket made through the S3 API (CreateBucket), so the server knows it at once."""
    options = s3_server.storage_options()
    name = f"w{uuid.uuid4().hex[:12]}"
    _fs(options).mkdir(name)
    return S3Location(f"s3://{name}", options)


def _names(url: str, options) -> list[str]:
    return sorted(p.rpartition("/")[2] for p in _fs(options).ls(url, detail=False, refresh=True))


def test_partition_and_verify_on_the_server(graph, s3_bucket, s3_server, tmp_path):
    url, options = s3_bucket
    out = f"{url}/graph/out"
    scratch = tmp_path / "scratch"
    manifest = partition_to_store(graph, out, CONFIG, storage_options=options, scratch=scratch)
    prefix = manifest["generation_prefix"]
    assert _names(out, options) == sorted(["manifest.json", prefix])
    # The stores are objects of the bucket (files of the served directory), not local files.
    served = s3_server.root / url.removeprefix("s3://") / "graph" / "out" / prefix
    assert (served / "part-00001.zarr" / "zarr.json").is_file()
    assert not any(p.name.endswith(".zarr") for p in scratch.rglob("*"))
    report = verify_output(out, input_url=graph, storage_options=options)
    assert report.ok, report.summary()
    store = open_partition(out, 0, storage_options=options)
    assert store.path.startswith("s3://") and store.num_edges == manifest["partitions"][0]["counts"]["edges"]


@pytest.mark.slow
def test_dask_workers_write_the_stores_into_the_bucket(graph, s3_bucket, tmp_path):
    """With a cluster, each store is written by the worker process that builds it, straight
    into the bucket (the URL and the storage options travel with the task)."""
    distributed = pytest.importorskip("distributed")
    url, options = s3_bucket
    out = f"{url}/out"
    with distributed.LocalCluster(n_workers=2, processes=True, threads_per_worker=1,
                                  dashboard_address=None) as cluster, distributed.Client(cluster) as client:
        manifest = partition_to_store(graph, out, CONFIG, client=client, storage_options=options,
                                      scratch=tmp_path / "scratch")
    local = partition_to_store(graph, tmp_path / "local", CONFIG)
    assert [p["checksum"] for p in manifest["partitions"]] == [p["checksum"] for p in local["partitions"]]
    assert verify_output(out, input_url=graph, storage_options=options).ok


_KILLED = textwrap.dedent("""
    import json, sys
    from asepr.pipeline.config import PartitionConfig
    from asepr.pipeline.partition_run import partition_to_store
    partition_to_store(sys.argv[1], sys.argv[2], PartitionConfig(num_parts=2, algo="hash", seed=0),
                       overwrite=True, storage_options=json.loads(sys.argv[3]))
""")


@pytest.mark.slow  # a writer process killed on the server; the same protocol is tested on memory:// by default
@pytest.mark.parametrize("point", ["between-commits", "manifest"])
def test_a_killed_writer_leaves_the_previous_generation_and_the_rerun_completes(graph, s3_bucket, point):
    url, options = s3_bucket
    out = f"{url}/out"
    first = partition_to_store(graph, out, CONFIG, storage_options=options)
    env = dict(os.environ, ASEPR_FAILPOINTS=f"{point}=kill")
    killed = subprocess.run([sys.executable, "-c", _KILLED, str(graph), out, json.dumps(options)], env=env,
                            capture_output=True, text=True, timeout=300)
    assert killed.returncode == -9, killed.stderr[-2000:]
    assert read_manifest(out, storage_options=options) == first
    assert verify_output(out, input_url=graph, storage_options=options).ok
    assert len([n for n in _names(out, options) if n.startswith("gen-00002-")]) == 1
    # The killed writer's lease names a dead process of this host: the rerun takes it over.
    again = partition_to_store(graph, out, CONFIG, overwrite=True, storage_options=options)
    assert again["generation"] == 2 and again["run"]["resumed_partitions"]
    assert _names(out, options) == sorted(["manifest.json", again["generation_prefix"]])
    assert verify_output(out, input_url=graph, storage_options=options).ok


def _race(graph, out, options, rounds: int) -> None:
    """Two writer processes start each round together: exactly one commits."""
    ctx = multiprocessing.get_context("spawn")
    start, done = ctx.Barrier(2), ctx.Barrier(3)
    results = ctx.Queue()
    workers = [ctx.Process(target=racing_partitioner, args=(str(graph), out, options, rounds, start, done, results))
               for _ in range(2)]
    for w in workers:
        w.start()
    try:
        generation = 0
        for r in range(rounds):
            got = [results.get(timeout=BARRIER_TIMEOUT_S) for _ in range(2)]
            assert all(g[0] == r for g in got)
            committed = [g for g in got if g[1] is not None]
            refused = [g for g in got if g[1] is None]
            assert len(committed) == 1 and len(refused) == 1, got
            assert "held by pid" in refused[0][2], refused[0][2]
            assert committed[0][1] == generation + 1
            generation += 1
            assert read_manifest(out, storage_options=options)["generation"] == generation
            done.wait(BARRIER_TIMEOUT_S)
    finally:
        for w in workers:
            w.join(timeout=60)
            if w.is_alive():
                w.kill()
    assert verify_output(out, storage_options=options).ok


def test_two_racing_writers_exactly_one_commits(graph, s3_bucket):
    url, options = s3_bucket
    _race(graph, f"{url}/out", options, rounds=1)


@pytest.mark.slow
def test_two_racing_writers_exactly_one_commits_20_times(graph, s3_bucket):
    url, options = s3_bucket
    _race(graph, f"{url}/out", options, rounds=20)


def test_a_manifest_naming_another_bucket_or_climbing_out_is_refused(graph, s3_bucket):
    url, options = s3_bucket
    out = f"{url}/out"
    manifest = partition_to_store(graph, out, CONFIG, storage_options=options)
    # The other bucket exists and holds a store of the same name: it is still not followed.
    other = f"w{uuid.uuid4().hex[:12]}"
    _fs(options).mkdir(other)
    _fs(options).copy(f"{out}/{manifest['partitions'][0]['path']}", f"{other}/part-00000.zarr", recursive=True)
    for path in ("../../other/out/part-00000.zarr", f"s3://{other}/part-00000.zarr"):
        crafted = {**manifest, "partitions": [{**manifest["partitions"][0], "path": path},
                                              manifest["partitions"][1]]}
        _fs(options).pipe(f"{out}/manifest.json", json.dumps(crafted).encode())
        with pytest.raises(StoreError) as info:
            open_partition(out, 0, storage_options=options)
        assert "manifest.json" in str(info.value) and repr(path) in str(info.value)


@pytest.mark.slow
def test_the_server_killed_mid_partition_then_back_the_rerun_completes(graph, own_s3_server, monkeypatch):
    """The server dies after the first store of generation 2: the writer fails with a
    clear error after the client's bounded retries, generation 1 stays readable once the
    server is back, and the same command resumes the finished store."""
    import asepr.storage.commit.lease
    from asepr.storage.commit import failpoints
    from asepr.storage.locations.remote import RemoteStoreError

    monkeypatch.setattr(asepr.storage.commit.lease, "DEFAULT_TTL_S", 4.5)
    bounded = {"config_kwargs": {"retries": {"max_attempts": 1}, "connect_timeout": 1}}
    server = own_s3_server
    name = f"w{uuid.uuid4().hex[:12]}"
    _fs(server.storage_options()).mkdir(name)
    out = f"s3://{name}/out"
    first = partition_to_store(graph, out, CONFIG, storage_options=server.storage_options(**bounded))

    def kill_server(point):
        if point == "between-commits":
            server.stop()

    monkeypatch.setattr(failpoints, "failpoint", kill_server)
    with pytest.raises(RemoteStoreError) as info:
        partition_to_store(graph, out, CONFIG, overwrite=True, storage_options=server.storage_options(**bounded))
    assert out in str(info.value) and "rerun the same command" in str(info.value)
    monkeypatch.undo()
    server.start()  # the same bucket directory, a new port
    options = server.storage_options(**bounded)
    assert read_manifest(out, storage_options=options) == first
    assert verify_output(out, input_url=graph, storage_options=options).ok
    time.sleep(5)  # the failed writer's lease (this process, still alive) expires
    again = partition_to_store(graph, out, CONFIG, overwrite=True, storage_options=options)
    # the store committed before the server died is resumed; the other one too when it had
    # finished by then (the two are built side by side, so which and how many is timing's)
    assert again["generation"] == 2 and len(again["run"]["resumed_partitions"]) >= 1
    assert verify_output(out, input_url=graph, storage_options=options).ok


def test_ingest_on_the_server(graph, s3_bucket, tmp_path):
    import numpy as np
    import pyarrow.parquet as pq

    from asepr.pipeline.increment.ingest import ingest
    from tests.storage.helpers import edge_table

    url, options = s3_bucket
    out = f"{url}/out"
    partition_to_store(graph, out, PartitionConfig(num_parts=2, algo="asep", seed=0), storage_options=options)
    new = tmp_path / "new"
    new.mkdir()
    rng = np.random.default_rng(5)
    pq.write_table(edge_table(rng.integers(0, 300, 40), rng.integers(0, 300, 40)), new / "part-0.parquet")
    manifest = ingest(out, new, storage_options=options)
    assert manifest["generation"] == 2 and manifest["num_edges"] == 1540
    assert _names(out, options) == sorted({"manifest.json"} | {e["path"].split("/")[0] for e in manifest["partitions"]}
                                          | {manifest["generation_prefix"]})
    report = verify_output(out, storage_options=options)
    assert report.ok, report.summary()
