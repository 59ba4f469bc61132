"""Two gloo ranks on Cora: accuracy, link prediction, exact resume, a dead rank, every strategy."""

from __future__ import annotations

import dataclasses
import signal
import time

import pytest
import torch

from tests.training.conftest import fork_ranks, run_ranks, spawn_ranks, wait_ranks
from asepr.training.rundir.checkpoint import RunDir
from asepr.training.group.comm import Comm
from asepr.training.config import STRATEGIES, TrainConfig
from asepr.training.graph.data import load_local_graph
from asepr.training.loop.distributed import TrainerError, global_weights, run_trainer, train_rounds
from asepr.workflows.cli import main

# Cora's binary features are on a sane scale as stored; the l2 default (chosen on
# amazon-computers, whose rows hold hundreds of ones) only slows the first epochs here.
SMALL = TrainConfig(hidden=64, rounds=4, local_epochs=3, threads=1, seed=3, feature_norm="none")


def _args(out, run_dir, config: TrainConfig, *extra: str) -> list[str]:
    """The trainer's arguments as `asepr train` passes them: the config in RUN/config.json."""
    return [str(out), "--config", str(RunDir(run_dir).write_config(config)), "--run-dir", str(run_dir), "-q", *extra]


def test_asepr_train_two_ranks_beats_the_majority_class(cora_parts, tmp_path, capsys):
    out = cora_parts(2)
    run_dir = tmp_path / "run"
    args = ["train", str(out), "--nproc", "2", "--hidden", "64", "--rounds", "4", "--local-epochs", "3",
            "--run-dir", str(run_dir)]
    assert main(args) == 0
    printed = capsys.readouterr().out
    assert "final: test accuracy" in printed
    rows = RunDir(run_dir).read_metrics()
    assert [r["round"] for r in rows] == [1, 2, 3, 4]
    assert rows[-1]["test"] >= 0.70 and rows[-1]["val"] >= 0.70  # majority class is 0.30 on Cora
    assert all(r["bytes_sent_round"] > 0 and r["generation"] == 1 for r in rows)
    # The default (avg+scaffold, every --sync-every steps) moves [n_r θ_r, n_r c_r, n_r, 1] once per
    # synchronisation: 2 (W-1)/W = 1 times its bytes on 2 ranks.
    info = RunDir(run_dir).read_run_info()
    assert info["config"]["reconcile"] == "avg+scaffold"
    syncs = -(-info["steps_per_round"] // info["config"]["sync_every"])
    wire = 4 * (2 * info["num_parameters"] + 2) * syncs
    assert wire <= rows[-1]["bytes_sent_round"] < wire + 64
    # Each rank reports its own peak RSS (VmHWM), before and after the evaluation.
    last = rows[-1]
    ranks, train_ranks = ([float(v) for v in str(last[c]).split()] for c in ("peak_rss_mib_ranks",
                                                                              "train_peak_rss_mib_ranks"))
    assert len(ranks) == len(train_ranks) == 2 and all(v > 50 for v in ranks)
    assert last["peak_rss_mib"] == pytest.approx(max(ranks), abs=1) and last["peak_rss_mib_mean"] <= max(ranks) + 1
    assert all(t <= p + 1 for t, p in zip(train_ranks, ranks)) and last["eval_peak_ratio_max"] >= 1


@pytest.mark.slow  # ~110 s; the link loss is guarded by tests/training/test_link.py
def test_link_prediction_two_ranks(cora_parts, tmp_path):
    config = dataclasses.replace(SMALL, task="link", lr=None, dropout=None, reconcile="avg+con",
                                 rounds=4, local_epochs=10)
    run_ranks(2, _args(cora_parts(2), tmp_path / "run", config))
    rows = RunDir(tmp_path / "run").read_metrics()
    last = rows[-1]
    assert last["metric"] == "mrr"
    # Random scores give MRR ~ 0.05 and AUC 0.5 with 100 negatives.
    assert last["val"] > 0.15 and last["test"] > 0.15
    assert last["val_auc"] > 0.75 and last["test_hits@50"] > 0.5


def _train(rank: int, world: int, out: str, run_dir: str, config: TrainConfig, resume: bool) -> None:
    run_trainer(out, run_dir, config, resume=resume, comm=Comm())


def test_resume_reproduces_the_uninterrupted_run_exactly(cora_parts, tmp_path):
    """Each run is a fresh pair of processes, so nothing but the checkpoint carries state over."""
    out = str(cora_parts(2))
    config = dataclasses.replace(SMALL, rounds=3, local_epochs=2)
    fork_ranks(2, _train, out, str(tmp_path / "a"), config, False)
    fork_ranks(2, _train, out, str(tmp_path / "b"), dataclasses.replace(config, rounds=1), False)
    assert RunDir(tmp_path / "b").latest_round() == 0
    fork_ranks(2, _train, out, str(tmp_path / "b"), config, True)
    a, b = global_weights(tmp_path / "a"), global_weights(tmp_path / "b")
    assert torch.equal(a, b)
    rows_a, rows_b = RunDir(tmp_path / "a").read_metrics(), RunDir(tmp_path / "b").read_metrics()
    assert [r["val"] for r in rows_a] == [r["val"] for r in rows_b]
    for rank in (0, 1):
        assert torch.equal(RunDir(tmp_path / "a").load_rank(2, rank)["local"],
                           RunDir(tmp_path / "b").load_rank(2, rank)["local"])


def test_resume_refuses_a_changed_config(cora_parts, tmp_path):
    graph = load_local_graph(cora_parts(2), [0])
    config = dataclasses.replace(SMALL, rounds=1, local_epochs=1, hidden=16, eval_mode="local")  # one of 2 parts
    train_rounds(graph, tmp_path, config, comm=Comm())
    with pytest.raises(TrainerError, match=r"differences in \['lr'\]"):
        train_rounds(graph, tmp_path, dataclasses.replace(config, rounds=2, lr=0.1), comm=Comm(),
                     resume=True)
    with pytest.raises(TrainerError, match="a complete checkpoint to resume"):
        train_rounds(graph, tmp_path / "empty", config, comm=Comm(), resume=True)
    # More rounds with the same config resume from round 1.
    rows = train_rounds(graph, tmp_path, dataclasses.replace(config, rounds=2), comm=Comm(), resume=True)
    assert [r["round"] for r in rows] == [1, 2]


def test_a_killed_rank_stops_the_torchrun_job_with_a_clear_error(cora_parts, tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("ASEPR_FAILPOINTS", "round:1:1=kill")
    out = cora_parts(2)
    start = time.monotonic()
    code = main(["train", str(out), "--nproc", "2", "--rounds", "3", "--local-epochs", "1", "--hidden", "32",
                 "--timeout", "60", "--run-dir", str(tmp_path / "run")])
    assert code == 1 and time.monotonic() - start < 120
    err = capsys.readouterr().err
    assert "rank 1" in err and "SIGKILL" in err and "--resume" in err
    assert RunDir(tmp_path / "run").latest_round() == 0  # round 0 completed and is resumable
    assert not (tmp_path / "run" / ".asepr.lock").exists()  # the launcher released the run directory


def test_a_dead_peer_fails_the_survivor_within_the_timeout(cora_parts, tmp_path):
    """Without torchrun's agent, the gloo timeout is what stops a rank whose peer died. The
    config comes from flags here (plain torchrun / SLURM), not from a config file."""
    flags = ["--rounds", "3", "--local-epochs", "1", "--hidden", "32", "--timeout", "15", "--threads", "1",
             "--seed", "3", "--feature-norm", "none"]
    procs = spawn_ranks(2, [str(cora_parts(2)), *flags, "--run-dir", str(tmp_path / "run"), "-q"],
                        extra_env={"ASEPR_FAILPOINTS": "round:1:1=kill"})
    start = time.monotonic()
    results = wait_ranks(procs, timeout=200)
    assert results[1][0] == -signal.SIGKILL
    code, _, err = results[0]
    assert code == 1 and "a collective failed" in err and "--resume" in err
    assert time.monotonic() - start < 150


@pytest.mark.parametrize(("strategy", "model"), [(s, "sage") for s in STRATEGIES]
                         + [("avg+kd+con", "gcn"), ("avg+kd+con", "gat")])
def test_every_strategy_and_model_trains_a_rank(cora_parts, tmp_path, strategy, model):
    """One rank of a 2-partition output, in process: every strategy and model runs and learns."""
    graph = load_local_graph(cora_parts(2), [0])
    config = dataclasses.replace(SMALL, model=model, reconcile=strategy, rounds=2, local_epochs=3, hidden=32,
                                 eval_mode="local")
    rows = train_rounds(graph, tmp_path, config, comm=Comm())
    assert len(rows) == 2 and rows[-1]["val"] > 0.5
    assert rows[-1]["loss"] < rows[0]["loss"] or rows[0]["loss"] < 0.1


@pytest.mark.parametrize("task", ["node", "link"])
def test_mini_batch_mode_learns(cora_parts, tmp_path, task):
    graph = load_local_graph(cora_parts(2), [0])
    config = dataclasses.replace(SMALL, task=task, lr=None, dropout=None, batch_size=128, fanouts=(5, 5), rounds=2, local_epochs=2,
                                 hidden=32, eval_mode="local")
    rows = train_rounds(graph, tmp_path, config, comm=Comm())
    assert rows[-1]["val"] > (0.5 if task == "node" else 0.1)
