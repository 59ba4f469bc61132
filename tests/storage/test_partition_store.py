"""The partition store format, its reader, the manifest and the writer's lock."""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import zarr

import asepr.storage.commit.atomic
import asepr.storage.partitions.store as ps
from asepr.pipeline.config import PartitionConfig
from asepr.pipeline.partition_run import partition_to_store
from asepr.storage.commit.lock import OutputLock
from asepr.storage.errors import StoreError
from asepr.storage.integrity.checked_array import CheckedArray
from asepr.storage.partitions.manifest import LOCK_NAME, read_manifest, write_manifest
from asepr.storage.partitions.output_stores import open_partition
from asepr.storage.partitions.store import open_store
from tests.storage.helpers import write_input


@pytest.fixture(scope="module")
def outputs(tmp_path_factory) -> dict[int, Path]:
    """One committed output per halo setting (k=3) of a small directed graph."""
    base = tmp_path_factory.mktemp("stores")
    write_input(base / "in", num_nodes=300, num_edges=2000, dim=4, edge_shards=2,
                meta={"undirected": False, "num_nodes": 300})
    out = {}
    for halo in (0, 1):
        partition_to_store(base / "in", base / f"out{halo}", PartitionConfig(num_parts=3, algo="hash"), halo=halo)
        out[halo] = base / f"out{halo}"
    return out


# --- the docstring draws the layout that is written ------------------------------------


def _documented_layout() -> tuple[dict[str, tuple[list[str], int, bool]], list[str]]:
    """Parse the tree in asepr.storage.partitions.store's docstring."""
    doc = ps.__doc__
    block = doc[doc.index("part-00000.zarr/") :].split("\n\n")[0]
    arrays: dict[str, tuple[list[str], int, bool]] = {}
    group = None
    attrs_text = block[block.index("group attrs:") : block.index("nodes/")]
    attrs = [a.strip() for a in attrs_text.replace("group attrs:", "").replace("\n", " ").split(",")]
    for line in block.splitlines()[1:]:
        stripped = line.strip()
        if re.fullmatch(r"(nodes|edges)/", stripped):
            group = stripped.rstrip("/")
            continue
        m = re.match(r"^(\w+)\s+([\w|]+)\s+\[([^\]]*)\](.*)$", stripped)
        if m and group:
            name, dtypes, shape, rest = m.groups()
            arrays[f"{group}/{name}"] = (dtypes.split("|"), len(shape.split(",")), "only" in rest)
    return arrays, [a for a in attrs if a]


@pytest.mark.parametrize("halo", [0, 1])
def test_docstring_layout_matches_what_is_written(outputs, halo):
    documented, attrs = _documented_layout()
    assert len(documented) == 8 and "counts" in attrs and "checksum" in attrs
    root = outputs[halo] / "part-00001.zarr"
    group = zarr.open_group(str(root), mode="r")
    written = {}
    for sub in ("nodes", "edges"):
        for name, array in group[sub].arrays():
            written[f"{sub}/{name}"] = array
    assert sorted(group.group_keys()) == ["edges", "nodes"]
    expected = {k for k, (_, _, optional) in documented.items() if halo or not optional}
    assert set(written) == expected
    for name, array in written.items():
        dtypes, ndim, _ = documented[name]
        assert array.dtype.name in dtypes, name
        assert array.ndim == ndim, name
    assert set(attrs) <= set(group.attrs), set(attrs) - set(group.attrs)


def test_store_uses_the_measured_codecs_and_chunks(outputs, tmp_path):
    group = zarr.open_group(str(outputs[0] / "part-00000.zarr"), mode="r")
    x = group["nodes/x"]
    # Random dense features: blosc would save well under MIN_SAVING, so they are raw;
    # sorted ids and labels compress. Every chain ends with zarr's crc32c codec.
    assert x.compressors == (zarr.codecs.Crc32cCodec(),)
    for name in ("nodes/global_nid", "nodes/y"):
        codec, crc = group[name].compressors
        assert isinstance(codec, zarr.codecs.BloscCodec) and str(getattr(codec.cname, "value", codec.cname)) == "lz4"
        assert isinstance(crc, zarr.codecs.Crc32cCodec)
    assert x.chunks[1] == x.shape[1]  # whole rows
    assert "docs/results/implementation-choices" in ps.__doc__  # the measurements behind the choice
    # Sparse (bag-of-words-like) features compress: blosc; the digests do not depend on it.
    sparse = np.zeros((5000, 64), np.float32)
    sparse[::7, 3] = 1.0
    dense = np.random.default_rng(0).standard_normal((5000, 64)).astype(np.float32)
    new = ps.create_store(tmp_path / "codecs.zarr")
    digests = {}
    for name, data in (("sparse", sparse), ("dense", dense)):
        digests[name] = ps.write_array(new.require_group(name), "nodes/x", data)
    assert len(new["sparse/nodes/x"].compressors) == 2
    assert new["dense/nodes/x"].compressors == (zarr.codecs.Crc32cCodec(),)
    for name, data in (("sparse", sparse), ("dense", dense)):
        np.testing.assert_array_equal(new[f"{name}/nodes/x"][:], data)
        assert ps.zarr_array_digest("nodes/x", new[f"{name}/nodes/x"]) == digests[name]


# --- reader --------------------------------------------------------------------------------


def test_open_partition_is_lazy_and_complete(outputs):
    store = open_partition(outputs[0], 2)
    assert isinstance(store.x, CheckedArray) and store.part_id == 2 and store.num_parts == 3
    data = store.to_numpy()
    assert data["nodes/x"].shape == (store.num_nodes, 4)
    assert store.manifest["generation"] == store.generation == 1
    with pytest.raises(StoreError, match=r"part_id 3"):
        open_partition(outputs[0], 3)


def test_checked_reads_select_like_numpy(outputs, tmp_path, monkeypatch):
    """Every selection form reads the same values as numpy does on the whole array,
    across chunk boundaries (small chunks: many per array, written in blocks that end
    inside chunks)."""
    monkeypatch.setattr(ps, "CHUNK_BYTES", 256)
    group = ps.create_store(tmp_path / "s.zarr")
    data = np.arange(300 * 4, dtype=np.float32).reshape(300, 4)
    writer = ps.ArrayWriter(group, "nodes/x", data.shape, data.dtype)
    for start in range(0, 300, 7):
        writer.write(data[start : start + 7])
    assert writer.close() == ps.array_digest("nodes/x", data)
    x = CheckedArray("nodes/x", zarr.open_group(str(tmp_path / "s.zarr"), mode="r")["nodes/x"], "test")
    assert x.chunks[0] == 16 and x.shape == data.shape and len(x) == 300
    mask = np.zeros(300, dtype=bool)
    mask[[3, 40, 299]] = True
    for key in [..., (), slice(None), slice(5, 37), slice(17, 18), slice(5, 2), slice(290, 400), slice(None, None, 7),
                slice(250, 10, -9), 0, -1, np.int64(33), [1, 200, -3], np.array([], dtype=np.int64), mask,
                (slice(10, 50), 2), (..., 1), (7, slice(1, 3)), (slice(0, 20), [0, 3])]:
        got, want = x[key], data[key]
        assert got.shape == want.shape and np.array_equal(got, want), key
    assert np.array_equal(np.asarray(x), data)
    for key in (300, -301, [300]):
        with pytest.raises(IndexError):
            x[key]


def test_stores_of_an_older_format_are_refused(outputs, tmp_path):
    out = tmp_path / "out"
    shutil.copytree(outputs[0], out)
    # Format 2 kept each chunk's CRC-32C in the arrays' attrs; its stores are refused
    # with the fix (partition again), not read unchecked.
    zarr.open_group(str(out / "part-00000.zarr"), mode="r+").attrs["format_version"] = 2
    expected = (r"part-00000.zarr, attrs format_version: expected 3 \(chunks checked by zarr's crc32c codec\), "
                r"found 2.*partition the input again")
    with pytest.raises(StoreError, match=expected):
        open_partition(out, 0)


def test_open_partition_reads_only_its_own_files(outputs, tmp_path):
    out = tmp_path / "out"
    shutil.copytree(outputs[0], out)
    seen: list[str] = []
    tracing = {"on": False}

    def hook(event, args):
        if tracing["on"] and event in ("open", "os.listdir", "os.scandir") and args and args[0] is not None:
            path = args[0]
            if isinstance(path, (str, bytes, os.PathLike)):
                seen.append(os.fsdecode(path))

    sys.addaudithook(hook)
    tracing["on"] = True
    try:
        store = open_partition(out, 1)
        data = store.to_numpy()
    finally:
        tracing["on"] = False
    mine = [p for p in seen if p.startswith(str(out))]
    assert mine, "the audit hook saw no file access"
    allowed = (str(out / "part-00001.zarr"), str(out / "manifest.json"))
    assert all(p.startswith(allowed) for p in mine), sorted(set(mine))
    # And it still works with every other partition and the node map gone.
    for other in ("part-00000.zarr", "part-00002.zarr"):
        shutil.rmtree(out / other)
    (out / "node_map.parquet").unlink()
    again = open_partition(out, 1).to_numpy()
    for name in data:
        np.testing.assert_array_equal(again[name], data[name])


def test_reader_refuses_unfinished_or_foreign_stores(outputs, tmp_path):
    out = tmp_path / "out"
    shutil.copytree(outputs[0], out)
    group = zarr.open_group(str(out / "part-00000.zarr"), mode="r+")
    group.attrs["generation"] = 7
    with pytest.raises(StoreError, match=r"generation 1.*generation 7"):
        open_partition(out, 0)
    shutil.rmtree(out / "part-00001.zarr" / "edges")
    with pytest.raises(StoreError, match="edges/indptr"):
        open_store(out / "part-00001.zarr")
    with pytest.raises(StoreError, match="no manifest"):
        open_partition(tmp_path, 0)


# --- manifest ------------------------------------------------------------------------------


def test_manifest_replacement_is_atomic(tmp_path, monkeypatch):
    write_manifest(tmp_path, {"format": "asepr-partitions", "format_version": 1, "generation": 1,
                              "num_parts": 1, "partitions": [{"part_id": 0}]})

    def crash(src, dst):
        raise OSError("simulated crash before the rename")

    monkeypatch.setattr(asepr.storage.commit.atomic.os, "replace", crash)
    with pytest.raises(OSError):
        write_manifest(tmp_path, {"format": "asepr-partitions", "format_version": 1, "generation": 2,
                                  "num_parts": 1, "partitions": [{"part_id": 0}]})
    monkeypatch.undo()
    assert read_manifest(tmp_path)["generation"] == 1


def test_manifest_is_written_last(outputs, tmp_path, monkeypatch):
    """A run stopped right before its manifest leaves the previous generation readable."""
    out = tmp_path / "out"
    shutil.copytree(outputs[0], out)
    import asepr.pipeline.store.commit

    def stop(*args, **kwargs):
        raise KeyboardInterrupt("stopped before the manifest")

    monkeypatch.setattr(asepr.pipeline.store.commit, "write_manifest", stop)
    with pytest.raises(KeyboardInterrupt):
        partition_to_store(_input_of(outputs[0]), out, PartitionConfig(num_parts=2, algo="dbh"),
                           overwrite=True)
    manifest = read_manifest(out)
    assert manifest["generation"] == 1 and manifest["num_parts"] == 3
    for p in range(3):
        assert open_partition(out, p).generation == 1


def _input_of(out: Path) -> Path:
    return Path(read_manifest(out)["input"]["url"])


def test_manifest_errors_name_the_file(tmp_path):
    (tmp_path / "manifest.json").write_text("{not json")
    with pytest.raises(StoreError, match=r"manifest.json.*JSON"):
        read_manifest(tmp_path)
    (tmp_path / "manifest.json").write_text(json.dumps({"format": "other"}))
    with pytest.raises(StoreError, match="keys"):
        read_manifest(tmp_path)


# --- lock ------------------------------------------------------------------------------------


def _write_lock(directory: Path, pid: int, host: str | None = None, started: float | None = None) -> None:
    (directory / LOCK_NAME).write_text(json.dumps({
        "pid": pid, "host": host or socket.gethostname(), "started": started,
        "acquired": "2026-01-01T00:00:00", "command": "asepr partition ...", "token": "x",
    }))


def test_second_writer_is_refused_naming_pid_and_host(outputs, tmp_path):
    out = tmp_path / "out"
    shutil.copytree(outputs[0], out)
    holder = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        import psutil

        _write_lock(out, holder.pid, started=psutil.Process(holder.pid).create_time())
        with pytest.raises(StoreError) as info:
            partition_to_store(_input_of(outputs[0]), out, PartitionConfig(num_parts=2, algo="hash"),
                               overwrite=True)
        message = str(info.value)
        assert f"pid {holder.pid}" in message and f"host {socket.gethostname()}" in message
        assert str(out / LOCK_NAME) in message
    finally:
        holder.kill()
        holder.wait()
    assert read_manifest(out)["generation"] == 1  # untouched


def test_lock_of_another_host_is_not_taken_over(tmp_path):
    _write_lock(tmp_path, 1, host="elsewhere.example")
    with pytest.raises(StoreError, match="pid 1 on host elsewhere.example"):
        OutputLock(tmp_path).acquire()


def test_stale_lock_is_taken_over_with_a_warning(outputs, tmp_path, caplog):
    out = tmp_path / "out"
    shutil.copytree(outputs[0], out)
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    _write_lock(out, gone.pid)
    with caplog.at_level("WARNING"):
        manifest = partition_to_store(_input_of(outputs[0]), out, PartitionConfig(num_parts=2, algo="hash"),
                                      overwrite=True)
    assert manifest["generation"] == 2
    assert any("stale lock" in r.getMessage() and str(gone.pid) in r.getMessage() for r in caplog.records)
    assert not (out / LOCK_NAME).exists()


def test_lock_detects_a_reused_pid(tmp_path):
    # Our own pid, but recorded with another start time: the owner is gone.
    _write_lock(tmp_path, os.getpid(), started=1.0)
    with OutputLock(tmp_path) as lock:
        assert lock.held
        assert json.loads((tmp_path / LOCK_NAME).read_text())["token"] == lock.token
    assert not (tmp_path / LOCK_NAME).exists()


def test_direct_chunk_files_are_the_ones_zarr_writes(tmp_path):
    # A local store's chunk files bypass the page cache (asepr.storage.partitions.chunk_stores) where the
    # filesystem allows it; they are byte for byte what zarr's LocalStore writes (the
    # crc32c codec's checksum included) and read back through zarr and the digests.
    from asepr.storage.partitions.chunk_stores import DirectLocalStore, takes_direct_io

    x = np.random.default_rng(1).standard_normal((70_001, 32)).astype(np.float32)  # 3 chunks, the last partial
    y = np.arange(1000, dtype=np.int64) % 7
    group = ps.create_store(tmp_path / "direct.zarr")
    assert isinstance(group.store, DirectLocalStore) == takes_direct_io(tmp_path)
    digests = {name: ps.write_array(group, name, data) for name, data in (("nodes/x", x), ("nodes/y", y))}
    reference = zarr.open_group(str(tmp_path / "zarr.zarr"), mode="w")
    for name, data in (("nodes/x", x), ("nodes/y", y)):
        array = group[name]
        reference.create_array(name, shape=data.shape, dtype=data.dtype, chunks=array.chunks,
                               compressors=array.compressors, fill_value=0)[:] = data
    ours = sorted(p.relative_to(tmp_path / "direct.zarr") for p in (tmp_path / "direct.zarr").rglob("c/**/*")
                  if p.is_file())
    assert len(ours) == 4  # three chunks of x, one of y
    for key in ours:
        assert (tmp_path / "direct.zarr" / key).read_bytes() == (tmp_path / "zarr.zarr" / key).read_bytes(), key
    for name, data in (("nodes/x", x), ("nodes/y", y)):
        np.testing.assert_array_equal(group[name][:], data)
        assert ps.zarr_array_digest(name, group[name]) == digests[name]


def test_direct_writes_use_o_direct_where_the_filesystem_takes_it(tmp_path, monkeypatch):
    import asepr.storage.partitions.chunk_stores as cs

    if not cs.takes_direct_io(tmp_path):
        pytest.skip("this filesystem refuses O_DIRECT")
    opened = []
    real = cs.open_direct

    def recording(path, flags, mode=0o600):
        fd, direct = real(path, flags, mode)
        opened.append((Path(path).name, direct))
        return fd, direct

    group = ps.create_store(tmp_path / "s.zarr")
    monkeypatch.setattr(cs, "open_direct", recording)
    ps.write_array(group, "nodes/x", np.ones((4096, 8), np.float32))
    assert opened == [("0", True)]  # the chunk file, not zarr.json


def test_the_pipeline_writes_local_stores_through_the_direct_store(tmp_path):
    from asepr.storage.locations.location import create_group, open_group_rw
    from asepr.storage.partitions.chunk_stores import DirectLocalStore, takes_direct_io

    create_group(tmp_path / "p.zarr")
    group = open_group_rw(tmp_path / "p.zarr")
    assert isinstance(group.store, DirectLocalStore) == takes_direct_io(tmp_path)


def test_require_chunks_makes_a_missing_chunk_an_error_for_any_zarr_read(tmp_path):
    from asepr.storage.partitions.chunk_stores import MissingChunkError

    ps.write_array(ps.create_store(tmp_path / "s.zarr"), "nodes/y", np.arange(1000, dtype=np.int64) + 1)
    (tmp_path / "s.zarr" / "nodes" / "y" / "c" / "0").unlink()
    plain = ps.open_group_readonly(str(tmp_path / "s.zarr"))["nodes/y"]
    assert not plain[:].any()  # zarr alone reads a missing chunk as the fill value
    required = ps.open_group_readonly(str(tmp_path / "s.zarr"), require_chunks=True)["nodes/y"]
    with pytest.raises(MissingChunkError, match=r"chunk nodes/y/c/0: expected a chunk file") as info:
        required[:]
    assert isinstance(info.value, StoreError) and info.value.key == "nodes/y/c/0"
