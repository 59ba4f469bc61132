"""Ranks of different speeds: the steps each rank takes, the step-normalised average, the
declared slowdown, the deadline, and the flags that declare them."""

from __future__ import annotations

import dataclasses
import json

import pytest
import torch

from tests.training.conftest import fork_ranks
from asepr.training.group.capacity import StepPlan, check_rank_lists, parse_rank_list
from asepr.training.rundir.checkpoint import RunDir
from asepr.training.group.comm import Comm
from asepr.training.config import TrainConfig
from asepr.training.loop.distributed import global_weights, run_trainer
from asepr.training.main import add_train_arguments, config_from_args
from asepr.training.reconcile.average import normalised_average, weighted_average
from asepr.workflows.cli import main

SMALL = TrainConfig(hidden=32, rounds=2, local_epochs=1, threads=1, seed=3, feature_norm="none")


def test_declared_speeds_give_each_rank_its_share_of_every_segment():
    config = dataclasses.replace(SMALL, speeds=(2.0, 2.0, 1.0, 0.66))
    plans = [StepPlan(config, r, 4) for r in range(4)]
    assert [p.steps(10) for p in plans] == [10, 10, 5, 3]  # round(10 · 0.33) = 3
    assert [p.steps(4) for p in plans] == [4, 4, 2, 1]  # a round's short last segment, at least one step
    # The default: every rank the segment's steps, nothing measured or normalised.
    default = StepPlan(SMALL, 3, 4)
    assert not default.active and default.steps(10) == 10 and default.slowdown == 1.0


def test_a_deadline_gives_the_steps_that_fit_and_no_rank_more_than_the_segment():
    speeds = (1.0, 1.0, 0.5, 0.25)
    at = {f: [StepPlan(dataclasses.replace(SMALL, speeds=speeds, deadline=f), r, 4).steps(10) for r in range(4)]
          for f in (0.5, 1.0, 1.5)}
    assert at[1.0] == [10, 10, 5, 2]  # floor(10 · 0.25) = 2: the last step would come after the deadline
    assert at[1.5] == [10, 10, 7, 3]  # the fast ranks stop at the segment's steps
    assert at[0.5] == [5, 5, 2, 1]  # every rank cut; the slowest still delivers one step


def test_the_step_normalised_average_weighs_each_ranks_direction_per_step():
    """FedNova: θ_g + τ_eff Σ p_r (θ_r − θ_g)/τ_r; equal steps give the weighted average."""
    fork_ranks(2, _normalised)


def _normalised(rank: int, world: int) -> None:
    comm = Comm()
    g = torch.tensor([1.0, -2.0, 0.5])
    moves = [torch.tensor([1.0, 0.0, 2.0]), torch.tensor([-1.0, 3.0, 0.0])]
    steps, weights = (10, 2), (3.0, 1.0)
    new, extra = normalised_average(g, g + moves[rank], steps[rank], weights[rank], comm,
                                    extra=torch.tensor([float(rank)]))
    p = [w / sum(weights) for w in weights]
    tau_eff = sum(pi * t for pi, t in zip(p, steps))
    expected = g + tau_eff * sum(pi * m / t for pi, m, t in zip(p, moves, steps))
    assert torch.allclose(new, expected) and torch.allclose(extra, torch.tensor([p[1]]))
    same, _ = normalised_average(g, g + moves[rank], 7, weights[rank], comm)
    assert torch.allclose(same, weighted_average(g + moves[rank], weights[rank], comm), atol=1e-6)


def _train(rank: int, world: int, out: str, run_dir: str, config: TrainConfig) -> None:
    run_trainer(out, run_dir, config, comm=Comm())


def test_declared_speeds_train_reproducibly_and_record_each_ranks_steps(cora_parts, tmp_path):
    out = str(cora_parts(2))
    config = dataclasses.replace(SMALL, speeds=(1.0, 0.3))
    for name in ("a", "b"):
        fork_ranks(2, _train, out, str(tmp_path / name), config)
    assert torch.equal(global_weights(tmp_path / "a"), global_weights(tmp_path / "b"))
    runs = RunDir(tmp_path / "a")
    rows, info = runs.read_metrics(), runs.read_run_info()
    segments = -(-info["steps_per_round"] // 10)
    fast, slow = (int(v) for v in rows[-1]["local_steps_ranks"].split())
    assert fast == info["steps_per_round"] and slow < fast and slow >= segments  # at least one step a segment
    assert rows[-1]["speed_ratio_ranks"] == "1.000 0.300" and info["config"]["speeds"] == [1.0, 0.3]
    assert rows[-1]["loss"] < rows[0]["loss"] and rows[-1]["val"] > 0.3  # it learns (the majority class: 0.3)


@pytest.mark.slow  # two trainings
def test_a_declared_slowdown_leaves_training_unchanged_and_is_recorded(cora_parts, tmp_path):
    out = str(cora_parts(2))
    fork_ranks(2, _train, out, str(tmp_path / "plain"), SMALL)
    fork_ranks(2, _train, out, str(tmp_path / "slow"), dataclasses.replace(SMALL, slowdown=(1.0, 3.0)))
    assert torch.equal(global_weights(tmp_path / "plain"), global_weights(tmp_path / "slow"))
    rows = RunDir(tmp_path / "slow").read_metrics()
    assert rows[-1]["slowdown_ranks"] == "1 3" and RunDir(tmp_path / "slow").read_run_info()["config"]["slowdown"] == [
        1.0, 3.0]
    assert "slowdown_ranks" not in RunDir(tmp_path / "plain").read_metrics()[-1]


@pytest.mark.slow  # two trainings
def test_measured_speeds_follow_the_declared_slowdown_and_a_resume_keeps_them(cora_parts, tmp_path):
    """Rank 1 declared 4× slower measures about a quarter of rank 0's speed after the first
    segment and takes fewer steps from then on; a resume reads the measured speeds back."""
    out = str(cora_parts(2))
    config = dataclasses.replace(SMALL, rounds=2, local_epochs=2, measure_speeds=True, slowdown=(1.0, 4.0))
    fork_ranks(2, _train, out, str(tmp_path / "run"), dataclasses.replace(config, rounds=1))
    runs = RunDir(tmp_path / "run")
    rows = runs.read_metrics()
    steps = [[int(v) for v in r["local_steps_ranks"].split()] for r in rows]
    assert all(slow < fast for fast, slow in steps)
    ratios = [float(v) for v in rows[-1]["speed_ratio_ranks"].split()]
    assert ratios[0] == 1.0 and ratios[1] < 0.6
    measured = runs.load_global(0)["speeds"]
    fork_ranks(2, _resume, out, str(tmp_path / "run"), config)
    assert RunDir(tmp_path / "run").load_global(1)["speeds"] == measured
    assert [r["round"] for r in RunDir(tmp_path / "run").read_metrics()] == [1, 2]


def _resume(rank: int, world: int, out: str, run_dir: str, config: TrainConfig) -> None:
    run_trainer(out, run_dir, config, comm=Comm(), resume=True)


def test_rank_lists_of_the_wrong_length_or_value_are_one_line_errors_naming_the_flag():
    assert check_rank_lists(dataclasses.replace(SMALL, speeds=(1.0, 1.0)), 2) is None
    problem = check_rank_lists(dataclasses.replace(SMALL, speeds=(1.0, 1.0, 0.5)), 4)
    assert problem.startswith("--speeds: expected one value per rank (4 ranks), found 3 values (1,1,0.5)")
    assert "Fix: give 4" in problem and "\n" not in problem
    for text in ("1,0,1", "1,-2", "fast", "1,,2", "nan"):
        with pytest.raises(ValueError, match=r"^--slowdown: expected comma-separated numbers > 0.*Fix: pass"):
            parse_rank_list(text, "--slowdown")
    assert parse_rank_list("measure", "--speeds", measure=True) == "measure"
    assert parse_rank_list(" 1, 0.5 ", "--speeds") == (1.0, 0.5)


def test_the_flags_build_the_config_and_bad_values_stop_asepr_train_before_any_rank(cora_parts, tmp_path, capsys):
    import argparse

    parser = argparse.ArgumentParser()
    add_train_arguments(parser)
    config = config_from_args(parser.parse_args(["--speeds", "measure", "--deadline", "1.5", "--slowdown", "1,3"]))
    assert config.measure_speeds and config.speeds == () and config.deadline == 1.5 and config.slowdown == (1.0, 3.0)
    assert config_from_args(parser.parse_args([])) == TrainConfig()  # no flag: nothing changes
    out = str(cora_parts(2))
    assert main(["train", out, "--nproc", "2", "--speeds", "1,1,0.5", "--run-dir", str(tmp_path / "r")]) == 2
    err = capsys.readouterr().err.strip()
    assert err == ("asepr train: error: --speeds: expected one value per rank (2 ranks), found 3 values (1,1,0.5). "
                   "Fix: give 2 comma-separated numbers > 0 (or --speeds measure).")
    with pytest.raises(SystemExit):
        main(["train", out, "--nproc", "2", "--slowdown", "1,zero"])
    assert "argument --slowdown: --slowdown: expected comma-separated numbers > 0" in capsys.readouterr().err
    assert main(["train", out, "--nproc", "2", "--deadline", "-1", "--run-dir", str(tmp_path / "r")]) == 2
    assert "TrainConfig.deadline: expected a number >= 0" in capsys.readouterr().err
    assert main(["train", out, "--nproc", "2", "--speeds", "1,1", "--sync-every", "0"]) == 2
    assert "--sync-every" in capsys.readouterr().err


@pytest.mark.parametrize("kind", ["toml", "json"])
def test_a_cluster_file_gives_each_rank_its_machines_speed(tmp_path, kind):
    import argparse

    path = tmp_path / f"cluster.{kind}"
    machines = [{"name": "a", "compute": 1.0, "memory": 2.0}, {"name": "b", "compute": 1.0, "memory": 2.0},
                {"compute": 0.25, "memory": 1.0}]
    if kind == "json":
        path.write_text(json.dumps({"machine": machines}))
    else:
        path.write_text('[[machine]]\nname = "a"\ncompute = 1.0\nmemory = 2.0\n\n[[machine]]\nname = "b"\n'
                        'compute = 1.0\nmemory = 2.0\n\n[[machine]]\ncompute = 0.25\nmemory = 1.0\n')
    parser = argparse.ArgumentParser()
    add_train_arguments(parser)
    assert config_from_args(parser.parse_args(["--cluster", str(path)])).speeds == (1.0, 1.0, 0.25)
    with pytest.raises(ValueError, match="--cluster: expected the speeds from one place"):
        config_from_args(parser.parse_args(["--cluster", str(path), "--speeds", "1,1,1"]))


def test_a_bad_cluster_file_is_named_with_the_machine_and_key(tmp_path):
    from asepr.storage.cluster import read_cluster

    bad = tmp_path / "c.toml"
    bad.write_text('[[machine]]\nname = "old"\ncompute = 0\n')
    with pytest.raises(ValueError, match=r"cluster file .*c\.toml, machine 'old', 'compute': expected a number > 0, "
                                         r"found 0\. Fix:"):
        read_cluster(bad)
    bad.write_text("machine = 3\n")
    with pytest.raises(ValueError, match="expected a non-empty list of tables 'machine', found 3"):
        read_cluster(bad)
    bad.write_text('[[machine]]\nspeed = 2\n')
    with pytest.raises(ValueError, match=r"unknown keys \['speed'\]"):
        read_cluster(bad)
    bad.write_text('[[machine]]\nname = "new"\ncompute = 1\n[[machine]]\nname = "old"\nmemory = 8\n')
    with pytest.raises(ValueError, match=r"'compute': expected a value for every machine or for none, found none "
                                         r"for 'old'\. Fix:"):
        read_cluster(bad)
    with pytest.raises(ValueError, match="expected a readable TOML or JSON file"):
        read_cluster(tmp_path / "missing.toml")


def test_the_fds_baseline_refuses_capacity_aware_steps_and_keeps_the_slowdown():
    from asepr.training.rundir.checkpoint import TrainerError
    from asepr.training.fds.trainer import fds_config

    with pytest.raises(TrainerError, match="--strategy fds: expected no --speeds, --cluster or --deadline"):
        fds_config(dataclasses.replace(SMALL, deadline=1.0))
    assert fds_config(dataclasses.replace(SMALL, slowdown=(1.0, 3.0))).slowdown == (1.0, 3.0)
