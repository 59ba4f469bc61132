"""A run continues at another world size: the global state carries over, the partitions
move between ranks, and the run directory records who trained what in each round."""

from __future__ import annotations

import dataclasses
import json

import pytest

from tests.training.conftest import fork_ranks, run_ranks
from asepr.training.rundir.checkpoint import RunDir
from asepr.training.group.comm import Comm
from asepr.training.config import TrainConfig
from asepr.training.loop.distributed import run_trainer
from asepr.training.group.elastic import resume_source

SMALL = TrainConfig(hidden=32, rounds=1, local_epochs=1, threads=1, seed=3, feature_norm="none")


def _train(rank: int, world: int, out: str, run_dir: str, config: TrainConfig, resume: bool) -> None:
    run_trainer(out, run_dir, config, resume=resume, comm=Comm())


def test_a_resume_on_fewer_then_more_ranks_continues_the_run_and_records_the_placement(cora_parts, tmp_path):
    out, run = str(cora_parts(2)), tmp_path / "run"
    fork_ranks(2, _train, out, str(run), SMALL, False)
    fork_ranks(1, _train, out, str(run), dataclasses.replace(SMALL, rounds=2), True)  # one machine left
    fork_ranks(2, _train, out, str(run), dataclasses.replace(SMALL, rounds=3), True)  # and back
    runs = RunDir(run)
    rows = runs.read_metrics()
    assert [r["round"] for r in rows] == [1, 2, 3] and [r["world_size"] for r in rows] == [2, 1, 2]
    placement = json.loads((run / "placement.json").read_text())["rounds"]
    assert [(e["round"], e["partitions"]) for e in placement] == [(1, [[0], [1]]), (2, [[0, 1]]), (3, [[0], [1]])]
    # The global model and the metrics continue: round 2 starts from round 1's model, not from scratch.
    assert rows[1]["loss"] < 0.8 * rows[0]["loss"] and rows[-1]["val"] > 0.6
    assert [r["best_val"] for r in rows] == sorted(r["best_val"] for r in rows)
    cumulative = [r["bytes_sent_cum_max"] for r in rows]
    assert cumulative == sorted(cumulative)


def test_a_rank_takes_the_state_of_the_old_rank_that_trained_exactly_its_partitions():
    log = [{"round": 3, "world_size": 4, "partitions": [[0], [1], [2], [3]]}]
    state = {"world_size": 4, "placement": log}
    assert resume_source(state, None, [[0], [1], [2], [3]], 2) == (2, 4)  # same world: its own
    assert resume_source(state, None, [[0, 2], [1, 3]], 0) == (None, 4)  # partitions moved: the global model
    assert resume_source(state, None, [[3], [0, 1, 2]], 0) == (3, 4)  # same partitions, another number
    # A checkpoint written before the placement was recorded: run.json's world size.
    assert resume_source({}, {"world_size": 2}, [[0], [1]], 1) == (1, 2)
    assert resume_source({}, {"world_size": 4}, [[0, 2], [1, 3]], 1) == (None, 4)


@pytest.mark.slow  # two launches of spawned ranks
def test_ranks_restarted_by_torchrun_resume_the_run_without_being_asked(cora_parts, tmp_path):
    """What torchrun's agent does after a lost machine: the same command line, a new world
    size and TORCHELASTIC_RESTART_COUNT > 0 (a fresh start would have deleted the run)."""
    flags = ["--hidden", "32", "--local-epochs", "1", "--threads", "1", "--seed", "3", "--feature-norm", "none",
             "--run-dir", str(tmp_path / "run"), "-q"]
    out = str(cora_parts(2))
    run_ranks(2, [out, "--rounds", "2", *flags])
    run_ranks(1, [out, "--rounds", "3", *flags], extra_env={"TORCHELASTIC_RESTART_COUNT": "1"})
    rows = RunDir(tmp_path / "run").read_metrics()
    assert [r["round"] for r in rows] == [1, 2, 3] and [r["world_size"] for r in rows] == [2, 2, 1]
