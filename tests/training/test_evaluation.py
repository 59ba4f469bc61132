"""One evaluation for every strategy: the round loop's exact evaluation on 2 gloo ranks
equals the whole-graph evaluation of the same global weights; the schedule in epochs;
evaluation time, bytes and the best-validation point kept apart; data placement."""

from __future__ import annotations

import dataclasses
import math
import os
import socket

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from asepr.training.centralized import centralized_config, load_input_graph, run_centralized
from asepr.training.rundir.checkpoint import RunDir
from asepr.training.group.comm import Comm
from asepr.training.config import TrainConfig
from asepr.training.graph.data import load_local_graph, prepare_features, rank_partitions
from asepr.training.loop.distributed import global_weights, train_rounds
from asepr.training.models import build_model, unflatten_into
from asepr.training.loop.rounds import evaluates, evaluates_epoch
from asepr.training.tasks import NodeTask

CORA_NODES, CORA_DIM, CORA_CLASSES = 2708, 1433, 7
WORLD = 2
CONFIG = TrainConfig(hidden=32, rounds=2, local_epochs=2, reconcile="avg", threads=1, seed=5)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _rank(rank: int, world: int, port: int, out: str, run_dir: str, config: TrainConfig) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    try:
        graph = load_local_graph(out, rank_partitions(WORLD, rank, world))
        train_rounds(graph, run_dir, config, comm=Comm())
    finally:
        dist.destroy_process_group()


@pytest.fixture(scope="module")
def asepr_run(cora_parts, tmp_path_factory):
    """Two rounds of two epochs on 2 gloo ranks (ASEP, k = 2), evaluated exactly every round."""
    run_dir = tmp_path_factory.mktemp("eval") / "run"
    mp.start_processes(_rank, args=(WORLD, _free_port(), str(cora_parts(WORLD)), str(run_dir), CONFIG),
                       nprocs=WORLD, join=True, start_method="fork")
    return run_dir


def test_the_round_loop_evaluates_the_global_model_exactly(cora_input, asepr_run):
    rows = RunDir(asepr_run).read_metrics()
    assert [(r["round"], r["epoch"], r["eval_mode"]) for r in rows] == [(1, 2, "exact"), (2, 4, "exact")]
    full = load_input_graph(cora_input)
    full.x = prepare_features(full.x, CONFIG)
    model = build_model(CONFIG, full.x.shape[1], CORA_CLASSES)
    unflatten_into(model, global_weights(asepr_run))
    ref = NodeTask(full, CORA_CLASSES, CONFIG).evaluate(model, Comm())
    # The logits agree to 1e-5 (tests/training/test_inference.py): at most a near-tie flips.
    assert abs(ref["val"] - rows[-1]["val"]) <= 1 / 500 and abs(ref["test"] - rows[-1]["test"]) <= 1 / 1000


def test_evaluation_time_bytes_and_the_best_validation_point_are_recorded_apart(asepr_run):
    rows = RunDir(asepr_run).read_metrics()
    for previous, row in zip([{}] + rows, rows):
        assert row["eval_seconds"] > 0 and row["train_seconds"] > 0
        assert row["elapsed_s"] == pytest.approx(previous.get("elapsed_s", 0) + row["train_seconds"], abs=1e-3)
        assert row["eval_elapsed_s"] == pytest.approx(previous.get("eval_elapsed_s", 0) + row["eval_seconds"],
                                                      abs=1e-3)
        assert row["seconds"] == pytest.approx(row["train_seconds"] + row["eval_seconds"], abs=1e-3)
        # The exact evaluation moves partials and rows between replicas: bytes, kept apart.
        assert row["eval_bytes_sent_round"] > 0 and row["bytes_sent_round"] > 0
        assert row["messages_sent_round"] > 0
        best = max(rows[: rows.index(row) + 1], key=lambda r: r["val"])
        assert (row["best_val"], row["test_at_best_val"], row["best_epoch"]) == (best["val"], best["test"],
                                                                                 best["epoch"])
    # Cumulative training bytes: the rounds' (every round is evaluated here) and the setup's
    # few control bytes (the ranks agree on the classes and the feature width).
    assert 0 <= rows[-1]["bytes_sent_cum"] - sum(r["bytes_sent_round"] for r in rows) < 64
    assert rows[-1]["bytes_sent_cum"] <= rows[-1]["bytes_sent_cum_max"]
    # avg: one ring all_reduce per round, 2 (W - 1) messages, plus the setup's control collectives.
    assert rows[-1]["messages_sent_cum_max"] >= CONFIG.rounds * 2 * (WORLD - 1)


def test_run_json_records_the_data_placement(asepr_run):
    info = RunDir(asepr_run).read_run_info()
    assert info["placement_rows_mean"] * WORLD >= CORA_NODES  # replicas: at least one row per vertex
    assert info["placement_rows_max"] >= info["placement_rows_mean"]
    assert info["placement_bytes_mean"] == info["placement_rows_mean"] * CORA_DIM * 4
    assert info["placement_bytes_max"] == info["placement_rows_max"] * CORA_DIM * 4


def test_centralized_is_evaluated_exactly_every_n_epochs(cora_input, tmp_path):
    config = dataclasses.replace(CONFIG, eval_every=1, eval_mode="local")
    rows = run_centralized(cora_input, tmp_path / "run", config)
    assert [(r["epoch"], r["eval_mode"]) for r in rows] == [(e, "exact") for e in (1, 2, 3, 4)]
    assert RunDir(tmp_path / "run").read_run_info()["placement_rows_mean"] == CORA_NODES
    assert rows[-1]["bytes_sent_cum"] == 0 and rows[-1]["messages_sent_cum_max"] == 0
    best = max(rows, key=lambda r: r["val"])
    assert rows[-1]["test_at_best_val"] == best["test"]


@pytest.mark.parametrize(("every", "local_epochs", "rounds"), [(1, 2, 3), (2, 2, 3), (6, 4, 5), (3, 5, 4), (4, 2, 3)])
def test_the_schedules_align(every, local_epochs, rounds):
    """Centralized and fds evaluate at every multiple of N epochs (and the last); ASEPR at
    the first round end at or after each multiple, every round end when N <= E."""
    config = TrainConfig(eval_every=every, local_epochs=local_epochs, rounds=rounds)
    total = rounds * local_epochs
    exact = [e for e in range(1, total + 1) if evaluates_epoch(config, e)]
    assert exact == sorted({*range(every, total + 1, every), total})
    asepr = [(r + 1) * local_epochs for r in range(rounds) if evaluates(config, r)]
    assert asepr == sorted({math.ceil(e / local_epochs) * local_epochs for e in exact})
    central = centralized_config(config)
    assert central.rounds * central.local_epochs == total and central.eval_interval == every
    assert [(r + 1) * central.local_epochs for r in range(central.rounds) if evaluates(central, r)] == exact


def test_local_evaluation_is_labelled(cora_parts, tmp_path):
    graph = load_local_graph(cora_parts(2), [0])
    rows = train_rounds(graph, tmp_path, dataclasses.replace(CONFIG, rounds=1, eval_mode="local"), comm=Comm())
    assert rows[-1]["eval_mode"] == "local"
    with pytest.raises(ValueError, match='Unsupported eval_mode "whole"'):
        TrainConfig(eval_mode="whole")
