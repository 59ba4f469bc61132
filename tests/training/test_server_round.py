"""The round loop's server optimiser, step-counted synchronisation and correction on Cora:
a resumed fedadam + corr run of 2 gloo ranks equals the uninterrupted one, their state
travels in the global checkpoint, and ``--sync-every`` reconciles every N steps within
rounds of equal steps."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from asepr.storage.errors import StoreError
from tests.training.conftest import run_ranks
from asepr.training.rundir.checkpoint import RunDir
from asepr.training.group.comm import Comm
from asepr.training.config import TrainConfig
from asepr.training.graph.data import load_local_graph
from asepr.training.loop.distributed import global_weights, train_rounds
from asepr.training.loop.local import batch_stream, steps_per_round, train_local
from asepr.training.models import build_model
from asepr.training.reconcile import Reconciler
from asepr.training.tasks import make_task

SMALL = TrainConfig(hidden=32, rounds=3, local_epochs=2, threads=1, seed=3, feature_norm="none", reconcile="avg",
                    eval_mode="local")


def _args(out, run_dir, config: TrainConfig, *extra: str) -> list[str]:
    return [str(out), "--config", str(RunDir(run_dir).write_config(config)), "--run-dir", str(run_dir), "-q", *extra]


@pytest.mark.slow  # ~50 s; exact resume is guarded by test_distributed.test_resume_reproduces_the_uninterrupted_run_exactly
def test_fedadam_resume_equals_the_uninterrupted_run(cora_parts, tmp_path):
    out = cora_parts(2)
    config = dataclasses.replace(SMALL, server_opt="fedadam", server_lr=0.05, reconcile="avg+kd+corr", batch_size=256,
                                 fanouts=(5, 5), sync_every=3)
    run_ranks(2, _args(out, tmp_path / "a", config))
    run_ranks(2, _args(out, tmp_path / "b", dataclasses.replace(config, rounds=1)))
    run_ranks(2, _args(out, tmp_path / "b", config, "--resume"))
    assert torch.equal(global_weights(tmp_path / "a"), global_weights(tmp_path / "b"))
    runs = RunDir(tmp_path / "a")
    server = runs.load_global(2)["reconcile"]["server"]
    syncs = 3 * -(-runs.read_run_info()["steps_per_round"] // 3)
    assert server["steps"] == syncs and server["m"].numel() == server["v"].numel() == len(global_weights(tmp_path / "a"))
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
def test_a_stream_of_batches_gives_the_steps_asked_across_epochs(cora_parts, batch_size):
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
    gen = torch.Generator().manual_seed(0)
    stream = batch_stream(task, gen)
    losses = [train_local(model, optimizer, task, config, gen, steps=7, stream=stream) for _ in range(2)]
    assert steps["n"] == 14 and all(loss == loss for loss in losses)
    per_epoch = 1 if not batch_size else -(-task.num_train // batch_size)
    assert batch_size == 0 or per_epoch < 7  # the 7 steps crossed epochs


def test_sync_every_reconciles_within_rounds_of_equal_steps(cora_parts, tmp_path, monkeypatch):
    graph = load_local_graph(cora_parts(2), [0])
    config = dataclasses.replace(SMALL, batch_size=128, fanouts=(3, 3), sync_every=4, local_epochs=2)
    calls = []
    original = Reconciler.__call__

    def counting(self, *args, **kwargs):
        calls.append(1)
        return original(self, *args, **kwargs)

    monkeypatch.setattr(Reconciler, "__call__", counting)
    rows = train_rounds(graph, tmp_path, config, comm=Comm())
    task = make_task(load_local_graph(cora_parts(2), [0]), config, 7)
    per_round = steps_per_round(task, config, Comm())
    assert per_round == -(-2 * task.num_train // 128)  # two epochs of the (one-rank) training set
    assert len(calls) == config.rounds * -(-per_round // 4)
    assert [r["epoch"] for r in rows] == [2, 4, 6]


@pytest.mark.slow  # ~40 s: three launches of 2 gloo ranks
def test_scaffold_resume_equals_the_uninterrupted_run_and_its_variates_are_the_ranks_mean(cora_parts, tmp_path):
    out = cora_parts(2)
    config = dataclasses.replace(SMALL, reconcile="avg+scaffold", batch_size=256, fanouts=(5, 5), sync_every=3)
    run_ranks(2, _args(out, tmp_path / "a", config))
    run_ranks(2, _args(out, tmp_path / "b", dataclasses.replace(config, rounds=1)))
    run_ranks(2, _args(out, tmp_path / "b", config, "--resume"))
    assert torch.equal(global_weights(tmp_path / "a"), global_weights(tmp_path / "b"))
    runs = RunDir(tmp_path / "a")
    drift = [runs.load_rank(2, r)["drift"] for r in range(2)]
    weights = [float(load_local_graph(out, [r]).train_mask.sum()) for r in range(2)]
    mean = (weights[0] * drift[0]["c_local"] + weights[1] * drift[1]["c_local"]) / sum(weights)
    assert torch.equal(drift[0]["c_global"], drift[1]["c_global"])
    assert torch.allclose(drift[0]["c_global"], mean, atol=1e-6)
    assert not torch.equal(drift[0]["c_local"], drift[1]["c_local"])
    # The correction changed the trajectory.
    run_ranks(2, _args(out, tmp_path / "c", dataclasses.replace(config, reconcile="avg")))
    assert not torch.equal(global_weights(tmp_path / "a"), global_weights(tmp_path / "c"))
