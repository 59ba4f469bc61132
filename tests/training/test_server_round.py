"""The round loop's server optimiser, step-counted synchronisation and correction, on 2
gloo ranks of Cora: a resumed fedadam run equals the uninterrupted one, the optimiser's
state travels in the global checkpoint, and ``--sync-every`` rounds take that many steps."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from storage.errors import StoreError
from tests.training.conftest import run_ranks
from training.checkpoint import RunDir
from training.comm import Comm
from training.config import TrainConfig
from training.data import load_local_graph
from training.distributed import global_weights, train_rounds
from training.local import steps_per_epoch, train_local
from training.models import build_model
from training.tasks import make_task

SMALL = TrainConfig(hidden=32, rounds=3, local_epochs=2, threads=1, seed=3, feature_norm="none", reconcile="avg",
                    eval_mode="local")


def _args(out, run_dir, config: TrainConfig, *extra: str) -> list[str]:
    return [str(out), "--config", str(RunDir(run_dir).write_config(config)), "--run-dir", str(run_dir), "-q", *extra]


def test_fedadam_resume_equals_the_uninterrupted_run(cora_parts, tmp_path):
    out = cora_parts(2)
    config = dataclasses.replace(SMALL, server_opt="fedadam", server_lr=0.05, reconcile="avg+corr", corr_steps=2,
                                 corr_batch_size=32)
    run_ranks(2, _args(out, tmp_path / "a", config))
    run_ranks(2, _args(out, tmp_path / "b", dataclasses.replace(config, rounds=1)))
    run_ranks(2, _args(out, tmp_path / "b", config, "--resume"))
    assert torch.equal(global_weights(tmp_path / "a"), global_weights(tmp_path / "b"))
    runs = RunDir(tmp_path / "a")
    server = runs.load_global(2)["reconcile"]["server"]
    assert server["steps"] == 3 and server["m"].numel() == server["v"].numel() == len(global_weights(tmp_path / "a"))
    assert runs.load_global(2)["reconcile"]["corr"]["state"]  # corr's Adam moments travel too
    rows = runs.read_metrics()
    assert all(r["bytes_sent_round"] > 0 and r["corr_loss"] == r["corr_loss"] for r in rows)
    # fedadam moved the model elsewhere than plain averaging would have.
    run_ranks(2, _args(out, tmp_path / "c", dataclasses.replace(config, server_opt="fedavg", server_lr=None)))
    assert not torch.equal(global_weights(tmp_path / "a"), global_weights(tmp_path / "c"))


def test_resume_names_a_checkpoint_without_a_fitting_server_state(cora_parts, tmp_path):
    graph = load_local_graph(cora_parts(2), [0])
    config = dataclasses.replace(SMALL, rounds=1, server_opt="fedavgm")
    train_rounds(graph, tmp_path, config, comm=Comm())
    runs = RunDir(tmp_path)
    path = runs.global_path(0)
    state = torch.load(path, weights_only=True)
    state["reconcile"]["server"]["m"] = torch.zeros(3)
    torch.save(state, path)
    with pytest.raises(StoreError, match=r"global.pt.*'reconcile'.*m of shape \(3,\)"):
        train_rounds(graph, tmp_path, dataclasses.replace(config, rounds=2), comm=Comm(), resume=True)
    del state["reconcile"]
    torch.save(state, path)
    with pytest.raises(StoreError, match=r"global.pt.*\['reconcile'\]"):
        train_rounds(graph, tmp_path, dataclasses.replace(config, rounds=2), comm=Comm(), resume=True)


@pytest.mark.parametrize("batch_size", [0, 256])
def test_sync_every_counts_optimiser_steps_across_epochs(cora_parts, batch_size):
    graph = load_local_graph(cora_parts(2), [0])
    config = dataclasses.replace(SMALL, batch_size=batch_size, fanouts=(3, 3), sync_every=7)
    task = make_task(graph, config, 7)
    torch.manual_seed(0)
    model = build_model(config, graph.x.shape[1], task.out_dim)
    optimizer = torch.optim.Adam(model.parameters(), lr=config.lr)
    steps = {"n": 0}
    step = optimizer.step

    def counting(*args, **kwargs):
        steps["n"] += 1
        return step(*args, **kwargs)

    optimizer.step = counting
    loss = train_local(model, optimizer, task, config, torch.Generator().manual_seed(0))
    assert steps["n"] == 7 and loss == loss
    per_epoch = steps_per_epoch(task, config)
    assert per_epoch == (1 if not batch_size else -(-task.num_train // batch_size)) and (batch_size == 0 or per_epoch < 7)


def test_sync_every_rows_count_fractional_epochs(cora_parts, tmp_path):
    graph = load_local_graph(cora_parts(2), [0])
    config = dataclasses.replace(SMALL, batch_size=16, fanouts=(3, 3), sync_every=3)
    rows = train_rounds(graph, tmp_path, config, comm=Comm())
    per_epoch = steps_per_epoch(make_task(graph, config, 7), config)
    assert [r["epoch"] for r in rows] == [round((i + 1) * 3 / per_epoch, 4) for i in range(3)]
