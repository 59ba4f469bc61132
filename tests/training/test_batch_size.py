"""``batch_size="auto"``: each rank's share of the centralized batch (asepr.training.config.resolve_batch_size)."""

from __future__ import annotations

import dataclasses
import json
import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.training.conftest import fork_ranks
from asepr.training.centralized import load_input_graph
from asepr.training.rundir.checkpoint import RunDir
from asepr.training.group.comm import Comm
from asepr.training.config import (
    AUTO_BATCH_MAX,
    AUTO_BATCH_MIN,
    AUTO_BATCH_STEPS,
    TrainConfig,
    load_config,
    parse_batch_size,
    resolve_batch_size,
)
from asepr.training.graph.data import load_local_graph
from asepr.training.loop.distributed import global_weights, train_rounds
from asepr.training.fds.trainer import fds_config
from asepr.training.loop.local import share_training_seeds, steps_per_round
from asepr.training.main import add_train_arguments, config_from_args
from asepr.training.loop.rounds import batch_columns
from asepr.training.tasks import make_task

SMALL = TrainConfig(hidden=16, rounds=1, local_epochs=1, threads=1, seed=5, feature_norm="none", reconcile="avg",
                    eval_mode="local", fanouts=(3, 3))


def test_auto_is_the_default_and_resolves_to_a_quarter_of_the_rank_between_16_and_256():
    assert TrainConfig().batch_size == "auto"
    assert (AUTO_BATCH_STEPS, AUTO_BATCH_MIN, AUTO_BATCH_MAX) == (4, 16, 256)
    # amazon-photo's smallest and largest rank at k = 16 (186 and 493 training nodes)
    assert [resolve_batch_size("auto", n) for n in (0, 1, 64, 65, 186, 493, 1020, 1021, 20694)] == \
        [16, 16, 16, 17, 47, 124, 255, 256, 256]
    assert [resolve_batch_size(b, 500) for b in (0, 64, 256, 1024)] == [0, 64, 256, 1024]
    # a rank's share: amazon-photo at k = 16 (4,590 training nodes, 186-493 per rank)
    assert [resolve_batch_size("auto", n, 4590) for n in (0, 186, 287, 493, 4590)] == [16, 16, 17, 28, 256]
    assert [resolve_batch_size(b, 186, 4590) for b in (0, 64)] == [0, 64]


@settings(deadline=None, max_examples=300)
@given(st.integers(min_value=1, max_value=200_000), st.integers(min_value=1, max_value=64), st.data())
def test_every_rank_takes_about_the_centralized_runs_steps_per_epoch(total, ranks, data):
    share = data.draw(st.integers(min_value=1, max_value=total))
    central = resolve_batch_size("auto", total)
    b = resolve_batch_size("auto", share, total)
    assert b == resolve_batch_size("auto", share, total) and AUTO_BATCH_MIN <= b <= central
    central_steps, steps = total / central, share / b
    if b > AUTO_BATCH_MIN:  # not held up by the smallest batch: the centralized run's steps or fewer
        assert steps <= central_steps and steps >= central_steps * (b - 1) / b
    assert resolve_batch_size("auto", total, total) == central  # one rank holding every seed


@settings(deadline=None, max_examples=200)
@given(st.integers(min_value=1, max_value=100_000))
def test_auto_gives_at_least_four_steps_per_epoch_unless_capped(n):
    b = resolve_batch_size("auto", n)
    assert AUTO_BATCH_MIN <= b <= AUTO_BATCH_MAX
    steps = math.ceil(n / b)
    if AUTO_BATCH_MIN < b < AUTO_BATCH_MAX:
        assert steps == AUTO_BATCH_STEPS
    assert (b == AUTO_BATCH_MAX) == (n > AUTO_BATCH_STEPS * (AUTO_BATCH_MAX - 1))  # 1021 seeds or more: 256


def _parse(*flags: str) -> TrainConfig:
    import argparse

    p = argparse.ArgumentParser()
    p.add_argument("out")
    add_train_arguments(p)
    return config_from_args(p.parse_args(["OUT", *flags]))


def test_the_flag_takes_auto_or_a_count_and_refuses_anything_else(capsys):
    assert _parse().batch_size == "auto"
    assert _parse("--batch-size", "auto").batch_size == "auto"
    assert _parse("--batch-size", "64").batch_size == 64
    assert _parse("--batch-size", "0").batch_size == 0
    for bad in ("-1", "big", "6.5"):
        with pytest.raises(SystemExit):
            _parse("--batch-size", bad)
        assert "argument --batch-size: Unsupported batch size" in capsys.readouterr().err
    assert parse_batch_size(" auto ") == "auto"


def test_a_config_of_before_with_an_explicit_256_is_read_and_auto_round_trips(tmp_path):
    before = TrainConfig(batch_size=256).to_dict()
    path = tmp_path / "config.json"
    path.write_text(json.dumps(before))
    assert load_config(path).batch_size == 256
    assert load_config(RunDir(tmp_path / "run").write_config(TrainConfig())).batch_size == "auto"
    # a resume under the other setting is refused: the batches may differ
    assert TrainConfig().resume_conflicts(before) == ["batch_size"]
    for bad, expected in (("big", '"auto" or an integer >= 0'), (-3, '"auto" or an integer >= 0'),
                          (True, "a JSON integer or string")):
        path.write_text(json.dumps({**before, "batch_size": bad}))
        with pytest.raises(ValueError, match="batch_size") as info:
            load_config(path)
        assert expected in str(info.value)


def test_fds_keeps_its_batch_of_256_and_full_batch_stays_1024():
    assert fds_config(TrainConfig()).batch_size == 256
    assert fds_config(TrainConfig(batch_size=0)).batch_size == 1024
    assert fds_config(TrainConfig(batch_size=64)).batch_size == 64


def _ranks_resolve(rank, world, out, config):
    graph = load_local_graph(out, [rank])
    task = make_task(graph, config, 7)
    share_training_seeds(task, Comm())
    n, total = int(graph.train_mask.sum()), task.total_train
    assert task.num_train == n and task.batch_size == resolve_batch_size("auto", n, total) < 256
    assert sum(1 for _ in task.batches(torch.Generator().manual_seed(0))) == math.ceil(n / task.batch_size)
    columns = batch_columns(task.num_train, task.batch_size, Comm())
    seeds, sizes = columns["train_seeds"], columns["batch_sizes"]
    assert seeds[rank] == n and sum(seeds) == total and sizes == [resolve_batch_size("auto", s, total) for s in seeds]
    # the synchronised round: local_epochs epochs of the whole training set at the ranks' own batches
    assert steps_per_round(task, config, Comm()) == math.ceil(config.local_epochs * sum(seeds) / sum(sizes))


def test_each_rank_resolves_its_share_and_the_round_counts_their_sum(cora_parts):
    # Cora at k = 4: 300-500 training nodes per rank, batches below 256
    fork_ranks(4, _ranks_resolve, cora_parts(4), dataclasses.replace(SMALL, local_epochs=2))


def test_a_rank_that_resolves_to_256_trains_exactly_as_the_explicit_256(cora_input, tmp_path):
    # the whole of Cora (1,625 training nodes) in one rank, as the centralized run holds it
    weights, infos = [], []
    for name, batch in (("auto", "auto"), ("fixed", 256)):
        graph = load_input_graph(cora_input)
        train_rounds(graph, tmp_path / name, dataclasses.replace(SMALL, batch_size=batch), comm=Comm())
        weights.append(global_weights(tmp_path / name))
        infos.append(RunDir(tmp_path / name).read_run_info())
    assert torch.equal(weights[0], weights[1])
    assert infos[0]["batch_sizes"] == infos[1]["batch_sizes"] == [256]
    assert infos[0]["train_seeds"] == [int(load_input_graph(cora_input).train_mask.sum())]
    assert infos[0]["steps_per_round"] == infos[1]["steps_per_round"]
