"""Trainers flush denormal floats to zero: weights and Adam moments that only weight decay
moves sink into the denormal range, where CPU float arithmetic is 10-100x slower (a
5-epoch link-prediction round on amazon-computers took 540 s instead of 24 s)."""

from __future__ import annotations

import pytest
import torch

from asepr.training.centralized import run_centralized
from asepr.training.config import TrainConfig
from asepr.training.loop.rounds import configure_cpu


def test_configure_cpu_flushes_denormals_and_sets_threads():
    denormal = torch.tensor([1e-39], dtype=torch.float32)
    before = torch.get_num_threads()
    try:
        torch.set_flush_denormal(False)
        assert (denormal * 1.0).item() != 0.0  # the platform keeps denormals by default
        configure_cpu(TrainConfig(threads=1), world=4)
        assert (denormal * 1.0).item() == 0.0
        assert torch.get_num_threads() == 1
    finally:
        torch.set_flush_denormal(False)
        torch.set_num_threads(before)


def test_centralized_training_runs_with_denormals_flushed(cora_input, tmp_path):
    """The centralized trainer configures its process like the ranks (it once did not, and
    its link runs slowed 20x after 30 epochs)."""
    seen = []

    def on_round(row):
        seen.append(((torch.tensor([1e-39]) * 1.0).item(), torch.get_num_threads()))

    config = TrainConfig(hidden=16, rounds=1, local_epochs=1, threads=1, feature_norm="none")
    before = torch.get_num_threads()
    try:
        torch.set_flush_denormal(False)
        run_centralized(cora_input, tmp_path / "run", config, on_round=on_round)
    finally:
        torch.set_flush_denormal(False)
        torch.set_num_threads(before)
    assert seen == [(0.0, 1)]


def test_default_threads_are_the_process_share_of_the_idle_cores(monkeypatch):
    import asepr.training.loop.rounds as rounds

    monkeypatch.setattr(rounds, "available_cores", lambda: list(range(16)))
    default = TrainConfig()
    assert rounds.threads(default, 1, idle=16.0) == 16  # alone: every core
    assert rounds.threads(default, 4, idle=15.2) == 4  # four ranks share them
    assert rounds.threads(default, 1, idle=2.6) == 3  # other work holds the rest
    assert rounds.threads(default, 1, idle=0.1) == 1
    assert rounds.threads(default, 32, idle=16.0) == 1
    assert rounds.threads(TrainConfig(threads=6), 4, idle=0.0) == 6  # --threads overrides
    monkeypatch.setattr(rounds, "idle_cores", lambda cpus, window_s=0.25: None)  # no /proc/stat
    assert rounds.threads(default, 2) == 8


def test_local_ranks_come_from_the_launcher(monkeypatch):
    from asepr.training.loop.rounds import local_ranks

    for name in ("LOCAL_WORLD_SIZE", "SLURM_NTASKS_PER_NODE"):
        monkeypatch.delenv(name, raising=False)
    assert local_ranks(8) == 8  # every rank on this machine
    monkeypatch.setenv("SLURM_NTASKS_PER_NODE", "4(x2)")
    assert local_ranks(8) == 4
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "2")
    assert local_ranks(8) == 2


def test_idle_cores_counts_this_process_cpus():
    from asepr.training.loop.rounds import available_cores, idle_cores

    cpus = available_cores()
    idle = idle_cores(cpus, window_s=0.05)
    assert idle is not None and 0.0 <= idle <= len(cpus) + 1e-9
    assert idle_cores([], window_s=0.0) == 0.0


needs_no_gpu = pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a GPU")


@needs_no_gpu
def test_device_auto_is_the_cpu_without_a_gpu_and_cuda_is_refused_by_name():
    from asepr.training.rundir.checkpoint import TrainerError
    from asepr.training.group.device import backend_for, resolve_device

    assert resolve_device("auto") == resolve_device("cpu") == torch.device("cpu")
    assert backend_for(resolve_device("auto")) == "gloo"
    with pytest.raises(TrainerError, match=r"--device cuda.*torch.cuda.is_available\(\) is False.*--device cpu"):
        resolve_device("cuda")
    with pytest.raises(ValueError, match='Unsupported device "tpu"'):
        TrainConfig(device="tpu")


def test_ranks_share_the_gpus_round_robin_and_nccl_only_with_a_gpu_each():
    from asepr.training.group.device import backend_for, gpu_index

    assert [gpu_index(r, 1) for r in range(4)] == [0, 0, 0, 0]
    assert [gpu_index(r, 2) for r in range(5)] == [0, 1, 0, 1, 0]
    assert [gpu_index(r, 8) for r in range(3)] == [0, 1, 2]
    cuda = torch.device("cuda", 0)
    assert backend_for(cuda, ranks_here=2, gpu_count=2) == "nccl"
    assert backend_for(cuda, ranks_here=4, gpu_count=1) == "gloo"  # NCCL refuses two ranks on one GPU
    assert backend_for(torch.device("cpu"), ranks_here=1, gpu_count=8) == "gloo"


@needs_no_gpu
@pytest.mark.parametrize("how", ["centralized", "ranks"])
def test_train_with_device_cuda_and_no_gpu_fails_with_one_line(cora_input, cora_parts, tmp_path, capsys, how):
    from asepr.workflows.cli import main

    small = ["--hidden", "8", "--rounds", "1", "--local-epochs", "1", "--threads", "1", "--device", "cuda"]
    where = ["--centralized", str(cora_input)] if how == "centralized" else [str(cora_parts(2)), "--nproc", "2"]
    assert main(["train", *where, *small, "--run-dir", str(tmp_path / "run")]) != 0
    err = capsys.readouterr().err
    assert "--device cuda" in err and "torch.cuda.is_available() is False" in err and "Traceback" not in err


def test_device_cpu_trains_on_the_cpu(cora_input, tmp_path):
    from asepr.training.rundir.checkpoint import RunDir

    config = TrainConfig(hidden=8, rounds=1, local_epochs=1, threads=1, feature_norm="none", device="cpu")
    rows = run_centralized(cora_input, tmp_path / "run", config)
    assert rows[-1]["val"] > 0.3 and RunDir(tmp_path / "run").read_run_info()["config"]["device"] == "cpu"
