"""The drift columns of metrics.csv: each rank's ‖θ_r − θ_g‖, mean and largest over ranks."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from tests.training.conftest import fork_ranks
from asepr.training.rundir.checkpoint import RunDir
from asepr.training.group.comm import Comm
from asepr.training.config import TrainConfig
from asepr.training.loop.distributed import run_trainer

SMALL = TrainConfig(hidden=32, rounds=2, local_epochs=1, threads=1, seed=5, feature_norm="none")


def _train(rank: int, world: int, out: str, run_dir: str, config: TrainConfig) -> None:
    run_trainer(out, run_dir, config, comm=Comm())


def _norm(a: torch.Tensor, b: torch.Tensor) -> float:
    return float(torch.linalg.vector_norm(a.double() - b.double()))


def test_drift_is_each_ranks_distance_from_the_global_model_it_started_from(cora_parts, tmp_path):
    """One synchronisation per round: rank r's drift in the last round is ‖θ_r − θ_g‖, its
    saved local model against the previous round's global model."""
    config = dataclasses.replace(SMALL, sync_every=0, reconcile="avg")
    fork_ranks(2, _train, str(cora_parts(2)), str(tmp_path / "run"), config)
    runs = RunDir(tmp_path / "run")
    rows = runs.read_metrics()
    assert all(r["drift_max"] >= r["drift_mean"] > 0 for r in rows)
    start = runs.load_global(0)["global"]
    drifts = [_norm(runs.load_rank(1, rank)["local"], start) for rank in (0, 1)]
    assert rows[-1]["drift_mean"] == pytest.approx(sum(drifts) / 2, rel=1e-9)
    assert rows[-1]["drift_max"] == pytest.approx(max(drifts), rel=1e-9)
    # Plain averaging moves the global model by a weighted mean of the ranks' steps: by no
    # more than the largest rank's drift.
    assert _norm(runs.load_global(1)["global"], start) <= rows[-1]["drift_max"] * (1 + 1e-6)


def test_drift_is_averaged_over_a_rounds_synchronisations(cora_parts, tmp_path):
    """Several synchronisations per round (the node default): the columns still exist and
    the largest rank bounds the mean."""
    fork_ranks(2, _train, str(cora_parts(2)), str(tmp_path / "run"), dataclasses.replace(SMALL, sync_every=2))
    rows = RunDir(tmp_path / "run").read_metrics()
    assert [r["round"] for r in rows] == [1, 2]
    assert all(r["drift_max"] >= r["drift_mean"] > 0 for r in rows)
