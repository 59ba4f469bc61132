"""Shard discovery over fsspec, atomic files and staged outputs, and the crash tests' failpoints."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import fsspec
import numpy as np
import pytest

from asepr.storage import (
    InputNotFoundError,
    InputWriter,
    StoreError,
    discover_shards,
    read_meta,
)
from asepr.storage.commit import failpoints
from asepr.storage.commit.atomic import (
    atomic_file,
    save_npy_atomic,
    staged_output,
    write_bytes_atomic,
    write_json_atomic,
)


def _touch(path, data=b"x"):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)


def test_discovery_dir_glob_file_and_natural_order(tmp_path):
    for i in (10, 2, 1):
        _touch(tmp_path / "e" / f"part-{i}.parquet", bytes([i]))
    _touch(tmp_path / "e" / "notes.txt")
    _touch(tmp_path / "e" / "_SUCCESS.parquet")
    _touch(tmp_path / "e" / "sub" / "part-3.parquet")
    names = [s.path.rsplit("/", 1)[1] for s in discover_shards(tmp_path / "e")]
    assert names == ["part-1.parquet", "part-2.parquet", "part-10.parquet", "part-3.parquet"]
    flat = [s.path.rsplit("/", 1)[1] for s in discover_shards(str(tmp_path / "e" / "part-*.parquet"))]
    assert flat == ["part-1.parquet", "part-2.parquet", "part-10.parquet"]
    one = discover_shards(f"file://{tmp_path / 'e' / 'part-2.parquet'}")
    assert len(one) == 1 and one[0].size == 1


def test_discovery_memory_filesystem():
    fs = fsspec.filesystem("memory")
    fs.pipe("/disc/e/part-0.parquet", b"abc")
    shards = discover_shards("memory://disc/e")
    assert [s.url for s in shards] == ["memory:///disc/e/part-0.parquet"]
    with shards[0].open() as fh:
        assert fh.read() == b"abc"
    fs.rm("/disc", recursive=True)


@pytest.mark.parametrize(
    "make, needle",
    [
        (lambda p: None, "nothing at that path"),
        (lambda p: p.mkdir(), "empty directory"),
        (lambda p: _touch(p / "readme.txt"), "no *.parquet file"),
    ],
)
def test_discovery_errors_name_the_path(tmp_path, make, needle):
    target = tmp_path / "edges"
    make(target)
    with pytest.raises(InputNotFoundError) as info:
        discover_shards(target, what="edge shards")
    assert str(target) in str(info.value) and needle in str(info.value)


def test_glob_without_match(tmp_path):
    with pytest.raises(InputNotFoundError, match="no match"):
        discover_shards(str(tmp_path / "*.parquet"))


def test_staged_output_is_invisible_until_success(tmp_path):
    fs = fsspec.filesystem("file")
    out = str(tmp_path / "out")
    with pytest.raises(RuntimeError), staged_output(fs, out) as staging:
        fs.pipe(f"{staging}/a", b"1")
        assert not os.path.exists(out)
        raise RuntimeError("boom")
    assert os.listdir(tmp_path) == []
    with staged_output(fs, out) as staging:
        fs.pipe(f"{staging}/a", b"1")
    assert os.listdir(out) == ["a"]
    with pytest.raises(StoreError, match="--overwrite"), staged_output(fs, out):
        pass
    with staged_output(fs, out, overwrite=True) as staging:
        fs.pipe(f"{staging}/b", b"2")
    assert os.listdir(out) == ["b"]
    assert sorted(os.listdir(tmp_path)) == ["out"]


def test_atomic_files_replace_whole_and_leave_no_temp_file(tmp_path):
    target = tmp_path / "f.json"
    write_json_atomic(target, {"b": 1, "a": np.int64(2)})
    assert target.read_text() == '{\n  "a": 2,\n  "b": 1\n}\n'
    save_npy_atomic(tmp_path / "x.npy", np.arange(4))
    assert np.load(tmp_path / "x.npy").tolist() == [0, 1, 2, 3]
    with pytest.raises(ZeroDivisionError), atomic_file(target) as fh:
        fh.write(b"half")
        raise ZeroDivisionError
    assert target.read_text().startswith("{") and sorted(os.listdir(tmp_path)) == ["f.json", "x.npy"]
    fs = fsspec.filesystem("memory")
    write_bytes_atomic("/atomic/g.bin", b"abc", fs=fs)
    assert fs.cat("/atomic/g.bin") == b"abc" and fs.ls("/atomic", detail=False) == ["/atomic/g.bin"]
    fs.rm("/atomic", recursive=True)


def test_failpoints_pause_kill_and_ignore(tmp_path, monkeypatch):
    monkeypatch.delenv(failpoints.VARIABLE, raising=False)
    failpoints.failpoint("swap")  # unset: returns at once
    assert failpoints.parse("swap=pause, round:1:2=kill") == {"swap": "pause", "round:1:2": "kill"}
    with pytest.raises(ValueError, match="ASEPR_FAILPOINTS"):
        failpoints.parse("swap=stop")
    marker = tmp_path / "marker"
    script = "from asepr.storage.commit import failpoints\nfailpoints.failpoint('other')\nfailpoints.failpoint('{}')\n"
    env = dict(os.environ, ASEPR_FAILPOINTS="a=kill,b=pause", ASEPR_FAILPOINT_MARKER=str(marker))
    killed = subprocess.run([sys.executable, "-c", script.format("a")], env=env)
    assert killed.returncode == -9 and not marker.exists()
    paused = subprocess.Popen([sys.executable, "-c", script.format("b")], env=env)
    try:
        deadline = time.monotonic() + 60
        while not marker.exists() and paused.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert marker.read_text().split()[0] == "b" and paused.poll() is None
    finally:
        paused.kill()
        paused.wait()


def test_killed_writer_leaves_hidden_staging_that_the_next_run_sweeps(tmp_path):
    script = (
        "import os, numpy as np\n"
        "from asepr.storage import InputWriter\n"
        f"w = InputWriter({str(tmp_path / 'out')!r}, feat_dim=2).__enter__()\n"
        "w.write_edges(np.arange(5), np.arange(5))\n"
        "os._exit(9)\n"
    )
    proc = subprocess.run([sys.executable, "-c", script], cwd=os.getcwd())
    assert proc.returncode == 9
    leftovers = os.listdir(tmp_path)
    assert len(leftovers) == 1 and leftovers[0].startswith(".out.partial-")
    assert not (tmp_path / "out").exists()
    with InputWriter(tmp_path / "out", feat_dim=2) as w:
        w.write_edges(np.arange(3), np.arange(3))
        w.write_nodes(np.arange(3), np.zeros((3, 2)), np.zeros(3), np.zeros(3))
        w.commit({"name": "t"})
    assert os.listdir(tmp_path) == ["out"]
    assert read_meta(tmp_path / "out")["num_edges"] == 3


def test_writer_without_commit_writes_nothing(tmp_path):
    with pytest.raises(Exception, match="without commit"):
        with InputWriter(tmp_path / "out", feat_dim=2) as w:
            w.write_edges(np.arange(3), np.arange(3))
    assert os.listdir(tmp_path) == []


def test_writer_rolls_shards_and_validates_at_commit(tmp_path):
    with InputWriter(tmp_path / "out", feat_dim=2, shard_rows=4) as w:
        w.write_edges(np.arange(10), (np.arange(10) + 1) % 10)
        w.write_nodes(np.arange(10), np.zeros((10, 2)), np.zeros(10), np.zeros(10))
        meta = w.commit({"name": "t", "undirected": True, "num_classes": 1})
    assert meta["shards"]["edges"] == [f"part-0000{i}.parquet" for i in range(3)]
    assert meta["validation"]["duplicate_edges"] == 0
    with pytest.raises(Exception, match="node row"):
        with InputWriter(tmp_path / "bad", feat_dim=2) as w:
            w.write_edges(np.arange(3), np.arange(3) + 5)
            w.write_nodes(np.arange(3), np.zeros((3, 2)), np.zeros(3), np.zeros(3))
            w.commit({"name": "t"})
    assert sorted(os.listdir(tmp_path)) == ["out"]


def test_discovery_skips_hidden_and_underscore_directories(tmp_path):
    _touch(tmp_path / "e" / "part-0.parquet")
    _touch(tmp_path / "e" / "_temporary" / "0" / "part-1.parquet")
    _touch(tmp_path / "e" / ".staging" / "part-2.parquet")
    _touch(tmp_path / "e" / "day=1" / "part-3.parquet")
    names = [s.path.split("/e/", 1)[1] for s in discover_shards(tmp_path / "e")]
    assert names == ["day=1/part-3.parquet", "part-0.parquet"]


def test_malloc_can_be_tuned_on_linux():
    # The CLI caps glibc's arenas before starting threads (asepr.storage.resources); in a
    # subprocess, so this test process keeps its own allocator settings.
    import subprocess
    import sys

    code = "from asepr.storage.resources import tune_malloc as f; print(f(2))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    expected = "True" if sys.platform.startswith("linux") else "False"
    assert out.split()[0] == expected
