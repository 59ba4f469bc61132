"""A full disk and an unwritable directory, on a small tmpfs: partition, ingest, checkpoints.

Each write that meets ENOSPC (or EROFS) ends with the project's error, one line naming the
path and the fix, never a traceback; it leaves nothing half-written that looks valid, and
the previous generation or the previous complete checkpoint stays readable. The tmpfs is
mounted by the test (:mod:`tests.security.tmpfs`); where the test may not mount one, it
is skipped with a message saying so.
"""

from __future__ import annotations

import dataclasses
import errno
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

from asepr.pipeline.config import PartitionConfig
from asepr.pipeline.partition_run import partition_to_store
from asepr.storage.errors import AseprError, FileSystemError, StoreError, os_error_problem
from asepr.storage.importers import import_dataset
from asepr.storage.partitions.manifest import read_manifest
from tests.security.tmpfs import fill, mounted_tmpfs
from tests.storage.helpers import edge_table
from asepr.training.rundir.checkpoint import RunDir
from asepr.training.group.comm import Comm
from asepr.training.config import TrainConfig
from asepr.training.graph.data import load_local_graph
from asepr.training.loop.distributed import train_rounds
from asepr.workflows.cli import main
from asepr.workflows.demo import bundled_cora

REPO = Path(__file__).resolve().parents[2]
TINY = TrainConfig(hidden=16, rounds=1, local_epochs=1, threads=1, seed=1, feature_norm="none", eval_mode="local")
#: Free bytes left on a filled tmpfs: room for small files (a lock, a config), not for a store or a checkpoint.
KEEP = 48 << 10


@pytest.fixture(scope="module")
def cora(tmp_path_factory) -> dict[str, Path]:
    """The bundled Cora as an input, partitioned into 2 stores on the ordinary disk, and new edges."""
    root = tmp_path_factory.mktemp("disk-full")
    import_dataset("gnn-npz", bundled_cora(), root / "in", shard_rows=1_000, overwrite=True)
    partition_to_store(root / "in", root / "out", PartitionConfig(num_parts=2, algo="asep"))
    rng = np.random.default_rng(7)
    (root / "new" / "edges").mkdir(parents=True)
    src, dst = rng.integers(0, 2708, 400), rng.integers(0, 2708, 400)
    keep = src != dst
    pq.write_table(edge_table(src[keep], dst[keep]), root / "new" / "edges" / "part-00000.parquet")
    return {"in": root / "in", "out": root / "out", "new": root / "new" / "edges"}


def _asepr(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "asepr.workflows.cli", *args], cwd=cwd, capture_output=True, text=True,
                          env=dict(os.environ, PYTHONPATH=str(REPO)), timeout=600)


def _one_error_line(result: subprocess.CompletedProcess, command: str) -> str:
    """The command failed with exit 1 and one ``asepr COMMAND: error:`` line, no traceback."""
    assert result.returncode == 1, (result.returncode, result.stderr[-3000:])
    assert "Traceback" not in result.stderr, result.stderr[-3000:]
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith(f"asepr {command}: error: "), result.stderr[-3000:]
    return lines[0]


# --- the one place that turns an OSError into the project's error -----------------------------


@pytest.mark.parametrize(("code", "found"), [
    (errno.ENOSPC, "the disk full (ENOSPC"), (errno.EDQUOT, "the disk quota exhausted (EDQUOT"),
    (errno.EACCES, "permission denied (EACCES"), (errno.EROFS, "a read-only filesystem (EROFS"),
    (errno.EPERM, "the operation not permitted (EPERM"),
])
def test_fixable_os_errors_become_the_projects_error_naming_the_path(code, found):
    cause = OSError(code, os.strerror(code), "/data/run/checkpoints/round-00003/rank-00001.pt")
    try:
        try:
            raise cause
        except OSError as exc:
            raise RuntimeError("wrapped by a library") from exc
    except RuntimeError as wrapped:
        problem = os_error_problem(wrapped, then="rerun with --resume")
    assert isinstance(problem, FileSystemError) and isinstance(problem, (OSError, StoreError, AseprError))
    assert problem.errno == code and problem.filename == cause.filename
    text = str(problem)
    assert text.startswith("/data/run/checkpoints/round-00003/rank-00001.pt: expected ")
    assert found in text and "Fix: " in text and text.endswith("then rerun with --resume.")


def test_other_errors_are_left_alone():
    assert os_error_problem(OSError(errno.ENOENT, "No such file or directory", "/x")) is None
    assert os_error_problem(PermissionError(errno.EPERM, "Operation not permitted")) is None  # a process, no file
    assert os_error_problem(StoreError("already the project's error")) is None
    assert os_error_problem(KeyboardInterrupt()) is None


# --- partition and ingest -------------------------------------------------------------------


def test_partition_on_a_full_disk_keeps_the_previous_generation(cora, tmp_path):
    with mounted_tmpfs(tmp_path / "disk", "32m") as disk:
        out = disk / "out"
        flags = ["-k", "2", "--workers", "0", "--ignore-plan", "-q"]
        assert _asepr("partition", str(cora["in"]), str(out), *flags, cwd=tmp_path).returncode == 0
        manifest = (out / "manifest.json").read_bytes()
        fill(disk, keep=KEEP)
        line = _one_error_line(_asepr("partition", str(cora["in"]), str(out), *flags, "--overwrite", "--seed", "5",
                                      cwd=tmp_path), "partition")
        assert str(out) in line and "No space left on device" in line and "Fix: " in line
        assert (out / "manifest.json").read_bytes() == manifest
        assert main(["verify", str(out)]) == 0  # the previous generation is whole


def test_partition_of_a_new_output_on_a_full_disk_leaves_nothing_that_looks_valid(cora, tmp_path, capsys):
    with mounted_tmpfs(tmp_path / "disk", "4m") as disk:
        out = disk / "out"
        line = _one_error_line(_asepr("partition", str(cora["in"]), str(out), "-k", "2", "--workers", "0",
                                      "--ignore-plan", "-q", cwd=tmp_path), "partition")
        assert "No space left on device" in line
        assert not (out / "manifest.json").exists()
        assert main(["verify", str(out)]) == 1
        assert "no manifest" in capsys.readouterr().err


def test_ingest_on_a_full_disk_keeps_the_previous_generation(cora, tmp_path, capsys):
    with mounted_tmpfs(tmp_path / "disk", "16m") as disk:
        out = disk / "out"
        subprocess.run(["cp", "-a", str(cora["out"]), str(out)], check=True)
        before = read_manifest(out)
        fill(disk, keep=KEEP)
        line = _one_error_line(_asepr("ingest", str(out), str(cora["new"]), "--workers", "0", "-q", cwd=tmp_path),
                               "ingest")
        assert str(out) in line and ("No space left on device" in line or "ENOSPC" in line), line
        assert read_manifest(out)["generation"] == before["generation"]
        os.remove(disk / ".filler")
        assert main(["verify", str(out)]) == 0, capsys.readouterr().err


# --- checkpoints and the run directory ------------------------------------------------------


def test_a_full_disk_while_a_round_is_saved_keeps_the_previous_round(cora, tmp_path):
    """In process: round 2's files meet ENOSPC; round 1 stays the latest, readable, and resumable."""
    graph = load_local_graph(cora["out"], [0])
    with mounted_tmpfs(tmp_path / "disk", "8m") as disk:
        run = disk / "run"
        train_rounds(graph, run, TINY, comm=Comm())
        fill(disk, keep=KEEP)
        with pytest.raises(FileSystemError) as caught:
            train_rounds(graph, run, dataclasses.replace(TINY, rounds=2), comm=Comm(), resume=True)
        text = str(caught.value)
        assert caught.value.errno == errno.ENOSPC and str(RunDir(run).round_dir(1)) in text
        assert "the disk full (ENOSPC" in text and "rerun with --resume to continue from round 1" in text
        runs = RunDir(run)
        assert runs.latest_round() == 0
        assert set(runs.load_global(0)) >= {"global", "metrics_rows"} and "local" in runs.load_rank(0, 0)
        leftovers = [p.name for p in runs.round_dir(1).glob("*")] if runs.round_dir(1).exists() else []
        assert leftovers == []  # no temporary, no file that looks like a saved rank
        os.remove(disk / ".filler")
        rows = train_rounds(graph, run, dataclasses.replace(TINY, rounds=2), comm=Comm(), resume=True)
        assert [r["round"] for r in rows] == [1, 2] and runs.latest_round() == 1


@pytest.mark.slow  # two launches of two ranks; the checkpoint's ENOSPC is covered in process above
def test_asepr_train_on_a_full_disk_says_it_once_without_a_traceback(cora, tmp_path):
    """Two ranks under the launcher: every rank's checkpoint meets ENOSPC; one disk message."""
    flags = ["--nproc", "2", "--hidden", "16", "--local-epochs", "1", "--threads", "1", "--eval", "local", "-q"]
    with mounted_tmpfs(tmp_path / "disk", "8m") as disk:
        run = disk / "run"
        first = _asepr("train", str(cora["out"]), *flags, "--rounds", "1", "--run-dir", str(run), cwd=tmp_path)
        assert first.returncode == 0, first.stderr[-3000:]
        fill(disk, keep=KEEP)
        second = _asepr("train", str(cora["out"]), *flags, "--rounds", "2", "--resume", "--run-dir", str(run),
                        cwd=tmp_path)
        assert second.returncode == 1 and "Traceback" not in second.stderr, second.stderr[-3000:]
        assert second.stderr.count("the disk full (ENOSPC") == 1, second.stderr[-3000:]
        assert "rerun with --resume to continue from round 1" in second.stderr
        assert RunDir(run).latest_round() == 0


def test_an_unwritable_run_directory_is_the_projects_error(cora, tmp_path):
    with mounted_tmpfs(tmp_path / "ro", "1m", read_only=True) as ro:
        for extra in (["--nproc", "2"], ["--centralized", str(cora["in"])]):
            line = _one_error_line(_asepr("train", str(cora["out"]), *extra, "--run-dir", str(ro / "run"),
                                          cwd=tmp_path), "train")
            assert str(ro / "run") in line and "read-only filesystem (EROFS" in line
