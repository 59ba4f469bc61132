"""Training runs are guarded: run directories, checkpoints and the trainers' reads.

* one run at a time in a run directory, and a dead run's lock is taken over;
* the ranks die with their agent (``asepr train``, torchrun's elastic agent);
* a damaged partition store or a checkpoint that does not fit the model is reported
  with the file named, and the other ranks name the failing rank instead of "a
  collective failed".
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
import torch

from asepr.pipeline.config import PartitionConfig
from asepr.pipeline.partition_run import partition_to_store
from asepr.storage.errors import StoreError
from asepr.storage.importers import import_dataset
from tests.training.conftest import REPO, wait_ranks
from tests.training.conftest import spawn_ranks as spawn_trainer_ranks
from asepr.training.rundir.checkpoint import RunDir
from asepr.training.group.comm import Comm
from asepr.training.config import TrainConfig
from asepr.training.graph.data import load_local_graph
from asepr.training.loop.distributed import train_rounds
from asepr.workflows.cli import main
from asepr.workflows.demo import bundled_cora

TINY = TrainConfig(hidden=16, rounds=1, local_epochs=1, threads=1, seed=1, feature_norm="none",
                   eval_mode="local")  # in-process runs train one partition of two
#: Seconds a rank may wait on a dead peer in these runs (the bound of "within the timeout").
TIMEOUT_S = 30


@pytest.fixture(scope="module")
def cora_k2(tmp_path_factory) -> Path:
    """The bundled Cora partitioned into 2 stores (the training tests' fixture, built here)."""
    root = tmp_path_factory.mktemp("run-dir")
    import_dataset("gnn-npz", bundled_cora(), root / "in", shard_rows=1_000, overwrite=True)
    partition_to_store(root / "in", root / "out", PartitionConfig(num_parts=2, algo="asep"))
    return root / "out"


def _rank_pids(agent: psutil.Process) -> list[psutil.Process]:
    return [p for p in agent.children(recursive=True) if "asepr.training.main" in " ".join(p.cmdline())]


def _wait_for(predicate, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(0.2)


@pytest.mark.slow  # a launch of two ranks killed mid-run; the run-directory lock's refusal has its own default tests
def test_killing_the_agent_stops_its_ranks_and_a_second_run_is_refused_until_then(cora_k2, tmp_path, capsys):
    """Cases 6 and 7 on a real launch: 2 gloo ranks under `asepr train`, which is SIGKILLed."""
    run = tmp_path / "run"
    agent = subprocess.Popen(
        [sys.executable, "-m", "asepr.workflows.cli", "train", str(cora_k2), "--nproc", "2", "--rounds", "500",
         "--local-epochs", "1", "--hidden", "16", "--threads", "1",
         "--timeout", str(TIMEOUT_S), "--run-dir", str(run), "-q"],
        cwd=REPO, env=dict(os.environ, PYTHONPATH=str(REPO)), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    ranks: list[psutil.Process] = []
    try:
        _wait_for(lambda: RunDir(run).latest_round() is not None or agent.poll() is not None, 240,
                  "the first committed round")
        assert agent.poll() is None, agent.stderr.read().decode()[-3000:]
        ranks += _rank_pids(psutil.Process(agent.pid))
        assert len(ranks) == 2

        # Case 6: a second run into the same directory is refused, naming the holder.
        assert main(["train", str(cora_k2), "--nproc", "2", "--rounds", "2", "--run-dir", str(run)]) == 1
        err = capsys.readouterr().err
        assert f"run directory {run}" in err and f"pid {agent.pid}" in err and "no other writer" in err
        assert RunDir(run).read_run_info()["config"]["rounds"] == 500  # the first run's files are intact

        # Case 7: the agent dies; its ranks follow within the collective timeout.
        killed = time.monotonic()
        agent.kill()
        agent.wait()
        gone, alive = psutil.wait_procs(ranks, timeout=TIMEOUT_S)
        assert not alive, f"ranks {[p.pid for p in alive]} outlived their agent"
        assert time.monotonic() - killed < TIMEOUT_S
        round_after = RunDir(run).latest_round()
        time.sleep(1.5)
        assert RunDir(run).latest_round() == round_after  # nobody trains on

        # The dead run's lock is stale: the next run takes it over.
        with RunDir(run).lock() as lock:
            assert json.loads((run / ".asepr.lock").read_text())["pid"] == os.getpid() and lock.held
    finally:
        if agent.poll() is None:
            agent.kill()
        for p in ranks:  # orphans, should the test fail
            if p.is_running():
                p.kill()


@pytest.mark.slow  # plain ranks; the same rules are tested through the launcher by default
def test_a_lock_of_a_live_process_refuses_the_trainers_started_without_a_launcher(cora_k2, tmp_path):
    """Plain torchrun / SLURM ranks (no launcher token): rank 0 takes the lock itself, and
    both ranks stop with the holder named when another process holds it."""
    run = tmp_path / "run"
    holder = subprocess.Popen(
        [sys.executable, "-c", "import sys, time; from asepr.training.rundir.checkpoint import RunDir\n"
                               f"lock = RunDir({str(run)!r}).lock().acquire(); print('held', flush=True)\n"
                               "time.sleep(300)"],
        cwd=REPO, env=dict(os.environ, PYTHONPATH=str(REPO)), stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        args = [str(cora_k2), "--config", str(RunDir(tmp_path / "cfg").write_config(TINY)),
                "--run-dir", str(run), "-q"]
        (code0, _, err0), (code1, _, err1) = wait_ranks(spawn_trainer_ranks(2, args), timeout=240)
        assert code0 == 1 and f"pid {holder.pid}" in err0 and "run directory" in err0
        assert code1 == 1 and "rank 0 could not" in err1 and "lock the run directory" in err1
        assert "a collective failed" not in err0 + err1
    finally:
        holder.kill()
        holder.wait()


def _damage_chunk(store: Path) -> Path:
    """Overwrite the middle of the first chunk of ``nodes/x`` (it no longer decodes, or no
    longer matches its digest)."""
    chunk = next(p for p in sorted((store / "nodes" / "x").rglob("*")) if p.is_file() and p.name != "zarr.json")
    data = bytearray(chunk.read_bytes())
    mid = len(data) // 2
    data[mid:mid + 64] = bytes(64)
    chunk.write_bytes(bytes(data))
    return chunk


def test_a_damaged_partition_is_named_by_its_rank_and_the_other_rank_names_that_rank(cora_k2, tmp_path):
    """Case 2, trainer half: rank 1's store is damaged; no rank blames a dead peer."""
    import shutil

    out = tmp_path / "out"
    shutil.copytree(cora_k2, out)
    _damage_chunk(out / "part-00001.zarr")
    args = [str(out), "--config", str(RunDir(tmp_path / "run").write_config(TINY)),
            "--run-dir", str(tmp_path / "run"), "-q"]
    (code0, _, err0), (code1, _, err1) = wait_ranks(spawn_trainer_ranks(2, args), timeout=240)
    assert code1 == 1 and "part-00001.zarr" in err1, err1[-2000:]
    assert code0 == 1 and "rank 1 could not" in err0 and "load its partitions" in err0, err0[-2000:]
    assert "a collective failed" not in err0 + err1


def _one_round(out: Path, run: Path, config: TrainConfig = TINY) -> None:
    train_rounds(load_local_graph(out, [0]), run, config, comm=Comm())


@pytest.mark.parametrize(("name", "damage"), [
    ("rank-00000.pt", lambda s: {**s, "local": torch.zeros(7)}),
    ("global.pt", lambda s: {**s, "global": torch.zeros(3, 3)}),
    ("rank-00000.pt", lambda s: {**s, "optimizer": {**s["optimizer"], "state": {
        0: {**s["optimizer"]["state"][0], "exp_avg": torch.zeros(2, 2)}, **{
            k: v for k, v in s["optimizer"]["state"].items() if k != 0}}}}),
    ("rank-00000.pt", lambda s: {k: v for k, v in s.items() if k != "bytes"}),
])
def test_a_checkpoint_that_does_not_fit_the_model_is_refused_naming_the_file(cora_k2, tmp_path, name, damage):
    run = tmp_path / "run"
    _one_round(cora_k2, run)
    path = RunDir(run).round_dir(0) / name
    torch.save(damage(torch.load(path, weights_only=True)), path)
    with pytest.raises(StoreError, match=str(path).replace(".", r"\.")):
        train_rounds(load_local_graph(cora_k2, [0]), run, dataclasses.replace(TINY, rounds=2), comm=Comm(),
                     resume=True)


@pytest.mark.parametrize(("content", "found"), [
    ({"hidden": "64"}, "field 'hidden': expected a JSON integer"),
    ({"rounds": True}, "field 'rounds': expected a JSON integer"),
    ({"fanouts": [10, "10"]}, "expected a JSON array of integers"),
    ({"hiden": 64}, "unknown fields ['hiden']"),
    ([1, 2], "a JSON object of TrainConfig fields"),
])
def test_the_trainers_config_file_is_strictly_typed(cora_k2, tmp_path, capsys, content, found):
    from asepr.training.main import main as trainer_main

    path = tmp_path / "config.json"
    path.write_text(json.dumps(content))
    assert trainer_main([str(cora_k2), "--config", str(path), "--run-dir", str(tmp_path / "run")]) == 2
    err = capsys.readouterr().err
    assert f"config file {path}" in err and found in err


def test_the_config_file_and_config_flags_are_not_mixed(cora_k2, tmp_path, capsys):
    from asepr.training.main import main as trainer_main

    path = RunDir(tmp_path / "run").write_config(TINY)
    assert trainer_main([str(cora_k2), "--config", str(path), "--hidden", "8"]) == 2
    assert "--config with --hidden" in capsys.readouterr().err


def test_checkpoint_temp_files_are_private(cora_k2, tmp_path):
    """Case 5 for checkpoints: no predictable `.NAME.partial-<pid>` temp file is opened; a
    symlink planted at such a name is not written through."""
    run = tmp_path / "run"
    victim = tmp_path / "victim"
    victim.write_text("keep")
    _one_round(cora_k2, run)
    nxt = RunDir(run).round_dir(1)
    nxt.mkdir()
    for planted in (nxt / f".rank-00000.pt.partial-{os.getpid()}", nxt / f".global.pt.partial-{os.getpid()}",
                    run / "checkpoints" / f".latest.json.partial-{os.getpid()}",
                    run / f".metrics.csv.partial-{os.getpid()}"):
        planted.symlink_to(victim)
    train_rounds(load_local_graph(cora_k2, [0]), run, dataclasses.replace(TINY, rounds=2), comm=Comm(), resume=True)
    assert victim.read_text() == "keep"
    assert RunDir(run).latest_round() == 1


def test_symlinks_in_the_run_directory_are_refused(cora_k2, tmp_path):
    """A symlink where the run directory keeps its config or checkpoints redirects nothing."""
    run = tmp_path / "run"
    outside = tmp_path / "outside"
    outside.mkdir()
    run.mkdir()
    (run / "config.json").symlink_to(outside / "config.json")
    with pytest.raises(StoreError, match="symbolic link"):
        RunDir(run).write_config(TINY)
    (run / "checkpoints").symlink_to(outside)
    with pytest.raises(StoreError, match="symbolic link"):
        _one_round(cora_k2, run)
    assert not list(outside.iterdir())


def _files(run: Path) -> dict[str, bytes]:
    return {str(p.relative_to(run)): p.read_bytes() for p in sorted(run.rglob("*"))
            if p.is_file() and p.name not in (".asepr.lock", "config.json")}


_QUICK = ["--rounds", "1", "--local-epochs", "1", "--hidden", "16", "--threads", "1",
          "--eval", "local", "-q"]


def test_a_previous_run_is_never_deleted_without_overwrite(cora_k2, tmp_path, capsys):
    """`asepr train` without --resume into a run directory that holds a run refuses, naming the
    directory and both fixes, and leaves its checkpoints and metrics.csv as they were;
    --overwrite starts over (the flag reaches the ranks through the launcher)."""
    run = tmp_path / "run"
    _one_round(cora_k2, run)
    before = _files(run)
    assert "metrics.csv" in before and any(name.startswith("checkpoints/round-") for name in before)
    for extra in ([], ["--centralized", str(cora_k2.parent / "in")]):
        assert main(["train", str(cora_k2), "--nproc", "2", *_QUICK, "--run-dir", str(run), *extra]) == 1
        err = capsys.readouterr().err
        assert f"run directory {run}" in err and "--resume" in err and "--overwrite" in err, err
        assert "checkpoints up to round 1 and metrics.csv" in err
        assert _files(run) == before
    assert main(["train", str(cora_k2), "--nproc", "2", *_QUICK, "--run-dir", str(run), "--overwrite"]) == 0
    assert RunDir(run).read_run_info()["world_size"] == 2 and len(RunDir(run).read_metrics()) == 1


@pytest.mark.slow  # plain ranks; the same rules are tested through the launcher by default
def test_trainers_started_without_the_launcher_refuse_a_previous_run(cora_k2, tmp_path):
    """Plain torchrun / SLURM ranks: rank 0 checks the run directory under its lock."""
    run = tmp_path / "run"
    _one_round(cora_k2, run)
    before = _files(run)
    args = [str(cora_k2), "--config", str(RunDir(tmp_path / "cfg").write_config(TINY)), "--run-dir", str(run), "-q"]
    (code0, _, err0), (code1, _, err1) = wait_ranks(spawn_trainer_ranks(2, args), timeout=240)
    assert code0 == 1 and f"run directory {run}" in err0 and "--overwrite" in err0, err0[-2000:]
    assert code1 == 1 and "rank 0 could not" in err1, err1[-2000:]
    assert _files(run) == before


def test_the_output_and_nproc_are_checked_before_any_rank_starts(cora_k2, tmp_path, capsys):
    """A missing output, or more ranks than partitions: one line, no rank started, no run directory."""
    env = dict(os.environ, PYTHONPATH=str(REPO))
    missing = subprocess.run([sys.executable, "-m", "asepr.workflows.cli", "train", "nope", "--nproc", "2"],
                             cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert missing.returncode == 1
    assert missing.stderr.count("\n") == 1 and missing.stderr.startswith("asepr train: error: output "), missing.stderr
    assert "nope" in missing.stderr and "no manifest" in missing.stderr and "--resume" not in missing.stderr
    assert list(tmp_path.iterdir()) == []  # no nope.runs/

    run = tmp_path / "run"
    assert main(["train", str(cora_k2), "--nproc", "4", *_QUICK, "--run-dir", str(run)]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "at most 2 ranks" in err and "--nproc 2 or fewer" in err, err
    assert main(["train", str(cora_k2), "--nproc", "0", *_QUICK, "--run-dir", str(run)]) == 1
    assert "an integer >= 1" in capsys.readouterr().err
    assert not run.exists()
    assert main(["train", "--centralized", str(tmp_path / "nope"), *_QUICK]) == 1
    assert "nope/edges" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []  # no nope.runs/ beside the missing input


def test_a_resume_without_a_complete_round_is_refused_before_any_rank_starts(cora_k2, tmp_path, capsys):
    run = tmp_path / "new.runs" / "run"
    assert main(["train", str(cora_k2), "--nproc", "2", *_QUICK, "--resume", "--run-dir", str(run)]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"run directory {run}" in err and "a complete checkpoint to resume" in err, err
    assert not (tmp_path / "new.runs").exists()  # the refused launch leaves no empty directory
