"""A committed output on a real S3-compatible server, read by the library, the CLI and a trainer."""

from __future__ import annotations

import json

import numpy as np
import pytest
import s3fs

from asepr.storage.errors import StoreError
from asepr.storage.locations.remote import RemoteStoreError, parse_storage_options
from asepr.storage.partitions.manifest import read_manifest
from asepr.storage.partitions.output_stores import open_partition
from tests.remote.conftest import put_tree
from asepr.workflows.bench.read import bench_read
from asepr.workflows.cli import main


def test_server_is_an_s3_store(s3_bucket, s3_server):
    url, options = s3_bucket
    fs = s3fs.S3FileSystem(**options)
    fs.pipe(f"{url}/a/b.bin", b"abc")
    assert fs.cat(f"{url}/a/b.bin") == b"abc"
    assert (s3_server.root / url.removeprefix("s3://") / "a" / "b.bin").read_bytes() == b"abc"


def test_a_partition_reads_from_the_store_as_from_the_disk(cora_on_s3, cora_local_out):
    url, options = cora_on_s3
    assert read_manifest(url, storage_options=options) == read_manifest(cora_local_out)
    for part_id in (0, 1):
        remote = open_partition(url, part_id, storage_options=options).to_numpy()
        local = open_partition(cora_local_out, part_id).to_numpy()
        assert sorted(remote) == sorted(local)
        for name in local:
            np.testing.assert_array_equal(remote[name], local[name])


def test_a_trainer_reads_only_its_own_partition(cora_on_s3):
    from asepr.training.graph.data import load_local_graph

    url, options = cora_on_s3
    fs = s3fs.S3FileSystem(**options)
    fs.rm(f"{url}/part-00000.zarr", recursive=True)  # another rank's store, and the node map,
    fs.rm(f"{url}/node_map.parquet")                 # are never read by rank 1
    graph = load_local_graph(url, [1], storage_options=options)
    assert graph.part_ids == (1,) and graph.num_nodes == read_manifest(url, storage_options=options)[
        "partitions"][1]["counts"]["nodes"]
    with pytest.raises(StoreError, match="part-00000.zarr"):
        load_local_graph(url, [0], storage_options=options)


def test_inspect_and_bench_read_take_storage_options(cora_on_s3, cora_local_out, capsys):
    url, options = cora_on_s3
    assert main(["inspect", url, "--storage-options", json.dumps(options)]) == 0
    printed = capsys.readouterr().out
    assert f"output       {url}" in printed and "partitions" in printed and " 0 B" not in printed
    rows = bench_read([str(cora_local_out), url], [1], repeat=1, storage_options=options)
    assert [(r["output"], r["cache"]) for r in rows] == [(str(cora_local_out), "cold"), (str(cora_local_out), "warm"),
                                                         (url, "remote")]
    assert len({r["raw_mib"] for r in rows}) == 1 and rows[-1]["stored_mib"] > 0


def test_storage_options_must_be_a_json_object(cora_on_s3, capsys):
    with pytest.raises(SystemExit) as stopped:
        main(["inspect", cora_on_s3.url, "--storage-options", "{key: 1}"])
    assert stopped.value.code == 2 and "--storage-options: expected a JSON object" in capsys.readouterr().err
    assert parse_storage_options(" ") == {}
    with pytest.raises(StoreError, match="found a JSON list"):
        parse_storage_options("[1]")


@pytest.mark.parametrize("path", ["../other/part-00001.zarr", "s3://elsewhere/part-00001.zarr",
                                  "part-00001.zarr/../../x"])
def test_a_manifest_naming_a_store_outside_the_output_is_refused(cora_on_s3, s3_server, path):
    url, options = cora_on_s3
    other = s3_server.bucket()
    put_tree(other, f"{s3_server.root}/{url.removeprefix('s3://')}", "out")  # a store the path could reach
    fs = s3fs.S3FileSystem(**options)
    manifest = json.loads(fs.cat(f"{url}/manifest.json"))
    manifest["partitions"][1]["path"] = path
    fs.pipe(f"{url}/manifest.json", json.dumps(manifest).encode())
    with pytest.raises(StoreError, match="a path inside"):
        open_partition(url, 1, storage_options=options)


def _bounded(server, timeout: float = 1.0) -> dict:
    """Options that give up soon: one attempt per request (botocore; s3fs still retries a few
    times), short timeouts."""
    return server.storage_options(config_kwargs={"retries": {"max_attempts": 1}, "connect_timeout": timeout,
                                                 "read_timeout": timeout})


def test_a_store_that_stops_answering_mid_read_is_a_clear_error(own_s3_server, cora_local_out):
    from asepr.training.graph.data import load_local_graph

    location = own_s3_server.bucket()
    url = put_tree(location, cora_local_out, "out")
    options = _bounded(own_s3_server)
    store = open_partition(url, 1, storage_options=options)  # the manifest and the store's metadata
    own_s3_server.stop()  # then the server dies before the chunks are read
    with pytest.raises(StoreError):
        store.to_numpy()
    with pytest.raises(RemoteStoreError) as raised:
        load_local_graph(url, [1], storage_options=options)
    message = str(raised.value)
    assert message.startswith(f"{url} (reading)") and "127.0.0.1" in message and "Fix:" in message


def test_a_store_that_hangs_is_a_clear_error_after_bounded_retries(own_s3_server, cora_local_out):
    from asepr.training.graph.data import load_local_graph

    url = put_tree(own_s3_server.bucket(), cora_local_out, "out")
    own_s3_server.pause()  # accepts connections, answers nothing: every request times out
    with pytest.raises(RemoteStoreError, match="timeout|Timeout") as raised:
        load_local_graph(url, [0], storage_options=_bounded(own_s3_server, timeout=0.2))
    assert str(raised.value).startswith(f"{url} (reading)")


def test_only_a_failed_request_is_blamed_on_the_store():
    from asepr.storage.locations.remote import remote_error_problem

    assert isinstance(remote_error_problem(ConnectionRefusedError(111, "refused"), "s3://b/out"), RemoteStoreError)
    try:
        try:
            raise ConnectionResetError(104, "reset by peer")
        except ConnectionResetError as exc:
            raise StoreError("chunk c/0 unreadable") from exc
    except StoreError as exc:
        assert "ConnectionResetError" in str(remote_error_problem(exc, "s3://b/out"))
    # A closed stdout (`asepr inspect ... | head`) or a missing object is no failed request.
    assert remote_error_problem(BrokenPipeError(32, "Broken pipe"), "s3://b/out") is None
    assert remote_error_problem(FileNotFoundError("s3://b/out/manifest.json"), "s3://b/out") is None


def test_pyg_stores_read_a_partition_on_the_store_lazily(cora_on_s3, cora_local_out):
    import torch

    from asepr.training.graph.pyg_store import open_pyg_stores

    url, options = cora_on_s3
    remote, _ = open_pyg_stores(url, 1, storage_options=options)
    local, _ = open_pyg_stores(cora_local_out, 1)
    rows = torch.tensor([5, 0, 1000])
    assert torch.equal(remote.get_tensor("x", index=rows), local.get_tensor("x", index=rows))
    assert torch.equal(remote.get_tensor("train_mask"), local.get_tensor("train_mask"))


def test_a_partition_on_the_store_is_read_with_the_requests_of_all_its_arrays_in_flight_together(
        cora_on_s3, cora_local_out, monkeypatch):
    import asyncio
    import contextlib

    import zarr
    from zarr.storage import FsspecStore

    url, options = cora_on_s3
    monkeypatch.setattr("asepr.storage.integrity.checked_array.BLOCK_CHUNKS", 1)  # one block per chunk
    store = open_partition(url, 1, storage_options=options)
    assert store.read_workers > 1 and open_partition(cora_local_out, 1).read_workers == 1
    assert store.x.shape[0] > store.x.chunks[0]  # nodes/x is several blocks: their rows must not mix
    get, seen = FsspecStore.get, {"in_flight": 0, "peak": 0, "both": None}

    async def counted_get(self, key, prototype, byte_range=None):
        seen["both"] = seen["both"] or asyncio.Event()
        seen["in_flight"] += 1
        seen["peak"] = max(seen["peak"], seen["in_flight"])
        if seen["in_flight"] >= 2:
            seen["both"].set()
        try:  # the first request waits for a second one (a read of one chunk after another never sends it)
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(seen["both"].wait(), 10)
            return await get(self, key, prototype, byte_range)
        finally:
            seen["in_flight"] -= 1

    monkeypatch.setattr(FsspecStore, "get", counted_get)
    with zarr.config.set({"async.concurrency": 1}):  # zarr itself: one request at a time per read
        remote = store.to_numpy()
    assert seen["peak"] >= 2
    local = open_partition(cora_local_out, 1).to_numpy()
    assert sorted(remote) == sorted(local)
    for name in local:
        assert remote[name].dtype == local[name].dtype and remote[name].flags.c_contiguous
        np.testing.assert_array_equal(remote[name], local[name])


def test_a_missing_chunk_on_the_store_is_named_by_the_concurrent_read(cora_on_s3):
    url, options = cora_on_s3
    store = open_partition(url, 1, storage_options=options)
    s3fs.S3FileSystem(**options).rm(f"{store.path}/nodes/x/c/1/0")
    with pytest.raises(StoreError, match=r"partition 1 \(s3://.*\), array nodes/x, chunk c/1/0: "
                                         r"expected a chunk file .* found no file") as raised:
        store.to_numpy()
    assert "Fix:" in str(raised.value)
