"""A damaged or crafted partition store is never read silently.

Each test damages a copy of a real output the way a failing disk or a hostile co-user
of a shared filesystem could, then reads it through every door: the reader
(:func:`asepr.storage.open_partition`), the trainers' loader, ``asepr verify`` and
``asepr ingest``. Each must refuse with a :class:`StoreError` (or a failed check)
naming the partition, the array and the chunk, and commit nothing.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numcodecs
import numpy as np
import pyarrow.parquet as pq
import pytest
import zarr

import asepr.storage.partitions.store as ps
from asepr.pipeline.config import PartitionConfig
from asepr.pipeline.increment.ingest import ingest
from asepr.pipeline.partition_run import partition_to_store
from asepr.pipeline.verify import verify_output
from asepr.storage.errors import StoreError
from asepr.storage.integrity.checked_array import CheckedArray
from asepr.storage.partitions.manifest import read_manifest
from asepr.storage.partitions.output_stores import open_partition
from asepr.storage.partitions.store import create_store, open_group_readonly, open_store, write_array
from tests.storage.helpers import edge_table
from asepr.training.graph.data import load_local_graph
from asepr.workflows.cli import main

#: Small chunks, so that each partition's ``nodes/x`` spans several of them.
_CHUNK_BYTES = 8 << 10


@pytest.fixture(scope="module")
def committed(synth_input, tmp_path_factory) -> Path:
    """Generation 1 of the synthetic input in 4 partitions, written with small chunks."""
    out = tmp_path_factory.mktemp("corruption") / "gen1"
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(ps, "CHUNK_BYTES", _CHUNK_BYTES)
        partition_to_store(synth_input, out, PartitionConfig(num_parts=4, algo="dbh"))
    return out


@pytest.fixture
def out(committed, tmp_path) -> Path:
    """A private copy of the output, two levels down (so ``../../x`` stays in tmp_path)."""
    path = tmp_path / "fs" / "out"
    shutil.copytree(committed, path)
    return path


@pytest.fixture
def new_edges(synth_input, tmp_path) -> Path:
    """Edges for an ingest that touches every partition."""
    root = tmp_path / "new"
    root.mkdir()
    rng = np.random.default_rng(7)
    n = int(json.loads((synth_input / "meta.json").read_text())["num_nodes"])
    pq.write_table(edge_table(rng.integers(0, n, 2_000), rng.integers(0, n, 2_000)), root / "part-00000.parquet")
    return root


def _relabel_one(chunk: Path) -> None:
    """Decode a label chunk, lower one label by one (5 → 4 in the issue), encode it again
    and keep the CRC-32C that zarr's crc32c codec stored after it: the blosc frame still
    decodes, only its content changed."""
    data = chunk.read_bytes()
    raw = np.frombuffer(numcodecs.Blosc().decode(data[:-4]), dtype=np.int64).copy()
    i = int(np.flatnonzero(raw > 0)[0])
    raw[i] -= 1
    codec = numcodecs.Blosc(cname="lz4", clevel=5, shuffle=numcodecs.Blosc.BITSHUFFLE)
    numcodecs.Blosc().decode(codec.encode(raw))  # a valid frame
    chunk.write_bytes(codec.encode(raw) + data[-4:])


def _break(chunk: Path) -> None:
    """Flip one byte of a compressed chunk so that it no longer decodes."""
    data = bytearray(chunk.read_bytes())
    data[16] ^= 0xFF  # the first block's offset in the Blosc header
    with pytest.raises(RuntimeError):
        numcodecs.Blosc().decode(bytes(data[:-4]))  # the frame, without zarr's CRC-32C
    chunk.write_bytes(bytes(data))


def _files(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


# --- case 1: a deleted chunk, a changed value ---------------------------------------------------


def test_a_deleted_chunk_is_refused_not_read_as_zeros(out):
    rows = open_partition(out, 0).x.chunks[0]
    assert open_partition(out, 0).num_nodes > 2 * rows  # nodes/x spans several chunks
    (out / "part-00000.zarr" / "nodes" / "x" / "c" / "1" / "0").unlink()
    store = open_partition(out, 0)
    assert store.x[:rows].shape == (rows, 16)  # the chunks that are there still read
    expected = r"partition 0 \(.*part-00000.zarr\), array nodes/x, chunk c/1/0: expected a chunk file"
    for read in (store.to_numpy, lambda: store.x[rows + 3], lambda: store.x[...],
                 lambda: load_local_graph(out, [0])):
        with pytest.raises(StoreError, match=expected):
            read()
    report = verify_output(out)
    assert not report.ok
    assert "partition 0: checksum mismatch: array nodes/x, chunk c/1/0: expected a chunk file" in report.summary()


def test_a_missing_chunk_of_fill_values_is_still_an_error(tmp_path):
    """zarr would return the fill value for it, which here equals the content: the
    chunk file itself is required."""
    write_array(create_store(tmp_path / "s.zarr"), "nodes/y", np.zeros(10, dtype=np.int64))
    (tmp_path / "s.zarr" / "nodes" / "y" / "c" / "0").unlink()
    group = open_group_readonly(str(tmp_path / "s.zarr"), require_chunks=True)
    array = CheckedArray("nodes/y", group["nodes/y"], "a test store")
    with pytest.raises(StoreError, match=r"a test store, array nodes/y, chunk c/0: .*no file nodes/y/c/0"):
        array[...]


def test_a_changed_label_that_still_decodes_is_refused(out):
    _relabel_one(out / "part-00001.zarr" / "nodes" / "y" / "c" / "0")
    expected = r"partition 1 .*array nodes/y, chunk c/0: expected a chunk that decodes and matches its crc32c"
    with pytest.raises(StoreError, match=expected):
        open_partition(out, 1).to_numpy()
    with pytest.raises(StoreError, match="nodes/y, chunk c/0"):
        load_local_graph(out, [1])
    report = verify_output(out)
    assert ("partition 1: checksum mismatch: array nodes/y, chunk c/0: expected a chunk that decodes and "
            "matches its crc32c") in report.summary()


def test_ingest_refuses_a_damaged_store_and_commits_nothing(out, new_edges):
    (out / "part-00002.zarr" / "nodes" / "x" / "c" / "1" / "0").unlink()
    before = read_manifest(out)
    with pytest.raises(StoreError, match=r"partition 2 .*array nodes/x, chunk c/1/0"):
        ingest(out, new_edges)
    assert read_manifest(out) == before


def test_ingest_refuses_a_store_swapped_for_another_partition(out, new_edges):
    """Two intact stores swapped on disk: each decodes, but neither is the one its manifest
    entry names (part id and checksum), so ingest must not rewrite them."""
    a, b, tmp = out / "part-00000.zarr", out / "part-00001.zarr", out / "swap.zarr"
    a.rename(tmp)
    b.rename(a)
    tmp.rename(b)
    before = read_manifest(out)
    with pytest.raises(StoreError, match=r"part_id 0 with checksum"):
        ingest(out, new_edges)
    assert read_manifest(out) == before


# --- case 2: a chunk that no longer decodes ----------------------------------------------------


def test_an_undecodable_chunk_is_a_failed_check_not_a_traceback(out, capsys):
    # nodes/y is blosc-compressed (labels compress; random features are stored raw). zarr's
    # crc32c codec checks the stored bytes before blosc sees them.
    assert zarr.open_array(str(out / "part-00002.zarr" / "nodes" / "y")).compressors
    _break(out / "part-00002.zarr" / "nodes" / "y" / "c" / "0")
    with pytest.raises(StoreError, match=r"partition 2 .*array nodes/y, chunk c/0: expected a chunk that decodes"):
        open_partition(out, 2).y[:1]
    assert main(["verify", str(out)]) == 1
    err = capsys.readouterr().err
    assert "FAIL partition 2: checksum mismatch: array nodes/y, chunk c/0: expected a chunk that decodes" in err
    assert "problem(s) found" in err and "Traceback" not in err
    assert main(["verify", str(out), "--json"]) == 1
    report = json.loads(capsys.readouterr().out)
    assert not report["ok"] and any("nodes/y, chunk c/0" in p for p in report["problems"])


def test_verify_scans_past_damage_with_damaged_chunks_as_the_fill_value(out, committed):
    """``open_store(verify=False)``, for verify's second scan of a store it has reported
    damaged: a missing chunk and an altered one read as zeros, every other row as stored."""
    intact = open_store(committed / "part-00000.zarr").x[...]
    x_dir = out / "part-00000.zarr" / "nodes" / "x"
    (x_dir / "c" / "1" / "0").unlink()
    chunk = x_dir / "c" / "0" / "0"
    data = bytearray(chunk.read_bytes())
    data[100] ^= 0x01
    chunk.write_bytes(bytes(data))
    with pytest.raises(StoreError, match="array nodes/x, chunk c/0/0"):
        open_store(out / "part-00000.zarr").x[...]
    x = open_store(out / "part-00000.zarr", verify=False).x
    rows = x.chunks[0]
    got = x[...]
    assert not got[: 2 * rows].any()
    np.testing.assert_array_equal(got[2 * rows:], intact[2 * rows:])


# --- null or absent checksums ---------------------------------------------------------------------


def _null_store_checksum(out: Path) -> None:
    zarr.open_group(str(out / "part-00001.zarr"), mode="r+").attrs["checksum"] = None


def _null_array_checksum(out: Path) -> None:
    group = zarr.open_group(str(out / "part-00001.zarr"), mode="r+")
    group.attrs["array_checksums"] = {**group.attrs["array_checksums"], "nodes/x": None}


def _drop_crc32c_codec(out: Path) -> None:
    """Rewrite nodes/x's metadata without the crc32c codec (its chunks would then read
    unchecked, their checksums taken for data)."""
    meta = out / "part-00001.zarr" / "nodes" / "x" / "zarr.json"
    doc = json.loads(meta.read_text())
    doc["codecs"] = [c for c in doc["codecs"] if c["name"] != "crc32c"]
    meta.write_text(json.dumps(doc))


def _null_manifest_checksum(out: Path) -> None:
    manifest = json.loads((out / "manifest.json").read_text())
    manifest["partitions"][1]["checksum"] = None
    (out / "manifest.json").write_text(json.dumps(manifest))


@pytest.mark.parametrize(("damage", "message"), [
    (_null_store_checksum, r"part-00001.zarr, attrs checksum: expected the sha256 that combines"),
    (_null_array_checksum, r"part-00001.zarr, attrs array_checksums: expected a sha256 for each"),
    (_drop_crc32c_codec, r"partition 1 .*array nodes/x, zarr.json codecs: expected a chain that ends with "
                         r"zarr's crc32c codec"),
    (_null_manifest_checksum, r"manifest.json, the entry of partition 1: expected a checksum"),
])
def test_a_null_checksum_is_an_error_not_a_skip(out, damage, message):
    damage(out)
    with pytest.raises(StoreError, match=message):
        open_partition(out, 1)
    report = verify_output(out)
    assert not report.ok and any(p.where == "partition 1" for p in report.problems), report.summary()


# --- case 3: a manifest path that leads outside OUT -----------------------------------------------


def _point_partition_1_at(out: Path, path: str) -> None:
    manifest = json.loads((out / "manifest.json").read_text())
    manifest["partitions"][1]["path"] = path
    (out / "manifest.json").write_text(json.dumps(manifest))


def test_a_manifest_path_outside_out_is_refused_everywhere(out, new_edges, capsys):
    evil = out.parent.parent / "evil_store"  # what ../../evil_store names from OUT
    shutil.copytree(out / "part-00001.zarr", evil / "part-00001.zarr")
    _point_partition_1_at(out, "../../evil_store/part-00001.zarr")
    before = _files(evil)
    expected = r"manifest.json, the path of partition 1: expected a path inside .*'../../evil_store/part-00001.zarr'"
    with pytest.raises(StoreError, match=expected):
        open_partition(out, 1)
    with pytest.raises(StoreError, match=expected):
        load_local_graph(out, [1])
    with pytest.raises(StoreError, match=expected):
        ingest(out, new_edges)
    assert main(["verify", str(out)]) == 1
    assert "FAIL partition 1:" in capsys.readouterr().err
    assert any("../../evil_store" in p.message for p in verify_output(out).problems)
    assert _files(evil) == before


@pytest.mark.parametrize("path", ["/etc", "part-00001.zarr/../../out-elsewhere", ""])
def test_other_paths_outside_out_are_refused(out, path):
    _point_partition_1_at(out, path)
    with pytest.raises(StoreError, match="manifest.json, the path of partition 1"):
        open_partition(out, 1)


def test_a_store_symlinked_outside_out_is_refused(out):
    elsewhere = out.parent / "elsewhere.zarr"
    shutil.move(out / "part-00001.zarr", elsewhere)
    (out / "part-00001.zarr").symlink_to(elsewhere)
    with pytest.raises(StoreError, match=r"the path of partition 1: .*which resolves to .*elsewhere.zarr"):
        open_partition(out, 1)


# --- the issue's own reproduction, on Cora -------------------------------------------------------


def test_cora_deleted_chunk_through_the_cli(cora_input, tmp_path, capsys):
    out = tmp_path / "cora-out"
    assert main(["partition", str(cora_input), str(out), "-k", "4", "--workers", "0", "-q"]) == 0
    (out / "part-00000.zarr" / "nodes" / "x" / "c" / "0" / "0").unlink()
    with pytest.raises(StoreError, match=r"partition 0 .*array nodes/x, chunk c/0/0"):
        open_partition(out, 0).to_numpy()
    capsys.readouterr()
    assert main(["verify", str(out)]) == 1
    assert "FAIL partition 0: checksum mismatch: array nodes/x, chunk c/0/0" in capsys.readouterr().err
