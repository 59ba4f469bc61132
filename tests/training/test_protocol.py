"""The time-to-accuracy protocol: early stopping inside the round loop, the ranks'
synchronous compute time, and the modelled cluster time to a target."""

from __future__ import annotations

import json

import pytest
import torch

from tests.training.conftest import fork_ranks
from asepr.training.rundir.checkpoint import RunDir
from asepr.training.group.comm import Comm
from asepr.training.config import TrainConfig
from asepr.training.graph.data import load_local_graph
from asepr.training.loop.distributed import train_rounds
from asepr.training.protocol import (
    ComputeClock,
    best_row,
    cluster_seconds,
    patience_spent,
    time_to_fraction,
)


def _rows(vals):
    return [{"val": v} for v in vals]


def test_patience_counts_the_evaluations_since_the_best():
    assert not patience_spent(_rows([0.5, 0.6, 0.6]), 0)  # 0: never stop
    assert not patience_spent([], 3)
    assert not patience_spent(_rows([0.5, 0.6, 0.55]), 2)
    assert patience_spent(_rows([0.5, 0.6, 0.55, 0.6]), 2)  # a tie is no improvement
    assert not patience_spent(_rows([0.5, 0.6, 0.55, 0.61]), 2)
    assert patience_spent(_rows([0.7, 0.1]), 1)
    assert best_row(_rows([0.5, 0.6, 0.6]))["val"] == 0.6


class _TwoRanks:
    """A stand-in for a 2-rank Comm: the other rank's seconds are fixed."""

    world_size = 2

    def __init__(self, other):
        self.other = torch.tensor(other, dtype=torch.float64)

    def gather_uncounted(self, values):
        return torch.stack([values.to(torch.float64), self.other])


def test_the_cluster_compute_is_the_slowest_rank_of_each_round_summed():
    clock = ComputeClock(cum_max=1.0)
    clock.pending = [2.0, 0.5, 3.0]
    assert clock.settle(_TwoRanks([1.0, 4.0, 3.0])) == pytest.approx(1.0 + 2.0 + 4.0 + 3.0)
    assert clock.pending == [] and clock.settle(_TwoRanks([])) == pytest.approx(10.0)
    # A real clock measures this process's CPU seconds, one entry per round.
    clock = ComputeClock()
    clock.start()
    sum(i * i for i in range(200_000))
    clock.stop()
    assert len(clock.pending) == 1 and clock.pending[0] > 0
    assert clock.settle(Comm()) == pytest.approx(clock.cum_max) and clock.cum_max > 0


def test_modelled_time_to_a_target_on_a_synthetic_metrics_frame():
    gbit = 10
    rows = [
        {"val": 0.50, "elapsed_s": 9.0, "compute_s_cum_max": 2.0, "bytes_sent_cum_max": 1e9,
         "messages_sent_cum_max": 100, "eval_bytes_sent_round_max": 0.5e9},
        {"val": 0.80, "elapsed_s": 19.0, "compute_s_cum_max": 4.0, "bytes_sent_cum_max": 2e9,
         "messages_sent_cum_max": 200, "eval_bytes_sent_round_max": 0.5e9},
        {"val": 0.95, "elapsed_s": 29.0, "compute_s_cum_max": 6.0, "bytes_sent_cum_max": 3e9,
         "messages_sent_cum_max": 300, "eval_bytes_sent_round_max": 0.5e9},
    ]
    # 4 s of compute, (2 + 2 × 0.5) GB at 10 Gbit/s = 2.4 s, 200 messages × 50 µs = 0.01 s.
    assert time_to_fraction(rows, 0.8, gbit) == pytest.approx(4.0 + 2.4 + 0.01)
    assert time_to_fraction(rows, 0.95, gbit) == pytest.approx(6.0 + (3e9 + 1.5e9) * 8 / 1e10 + 0.015)
    assert time_to_fraction(rows, 0.99, gbit) is None and time_to_fraction(rows, None, gbit) is None
    # The model's bandwidth term shrinks with the link; compute does not.
    assert time_to_fraction(rows, 0.8, 100) == pytest.approx(4.0 + 0.24 + 0.01)
    # Rows written before the compute column existed fall back to the training wall clock.
    old = {k: v for k, v in rows[0].items() if k != "compute_s_cum_max"}
    assert cluster_seconds(old, gbit) == pytest.approx(9.0 + 0.8 + 0.005)


def _train_rank(rank: int, world: int, out, run_dir, config) -> None:
    rows = train_rounds(load_local_graph(out, [rank]), run_dir, config, comm=Comm())
    (run_dir / f"rows-{rank}.json").write_text(json.dumps([[r["round"], r["val"]] for r in rows]))


def test_every_rank_stops_after_the_same_round_once_patience_is_spent(cora_parts, tmp_path):
    # A learning rate too small to move the accuracy: every evaluation after the first
    # fails to improve, so with patience 2 the run stops after its third round of 12.
    config = TrainConfig(hidden=16, rounds=12, local_epochs=1, lr=1e-12, threads=1, seed=1, patience=2,
                         batch_size=512, fanouts=(3, 3))
    fork_ranks(2, _train_rank, cora_parts(2), tmp_path, config)
    per_rank = [json.loads((tmp_path / f"rows-{r}.json").read_text()) for r in range(2)]
    assert per_rank[0] == per_rank[1]
    assert [r for r, _ in per_rank[0]] == [1, 2, 3]
    assert RunDir(tmp_path).latest_round() == 2  # rounds 0-2 committed, none after
    rows = RunDir(tmp_path).read_metrics()
    assert len(rows) == 3 and all(r["compute_s_cum_max"] > 0 for r in rows)
    assert rows[0]["compute_s_cum_max"] < rows[2]["compute_s_cum_max"]
    # Without patience the same run trains every round.
    (tmp_path / "all").mkdir()
    fork_ranks(2, _train_rank, cora_parts(2), tmp_path / "all", TrainConfig(**{**config.to_dict(), "patience": 0,
                                                                              "rounds": 4}))
    assert len(json.loads((tmp_path / "all" / "rows-0.json").read_text())) == 4


def test_the_bench_report_gives_test_at_best_val_and_cluster_time_to_95_and_99_percent():
    from asepr.workflows.bench.protocol import protocol_columns, protocol_section

    rows = [{"epoch": e, "val": v, "test": t, "elapsed_s": 10.0 * e, "compute_s_cum_max": 1.0 * e,
             "bytes_sent_cum_max": 0.0, "messages_sent_cum_max": 0, "eval_bytes_sent_round_max": 0.0}
            for e, v, t in ((2, 0.80, 0.79), (4, 0.96, 0.90), (6, 0.95, 0.93), (8, 0.94, 0.92))]
    got = protocol_columns(rows, central_best=1.0)
    assert (got["stop_epoch"], got["best_val_epoch"], got["compute_s"]) == (8, 4, 8.0)
    assert got["cluster_s_to_95_10gbit"] == pytest.approx(4.0)  # compute only: nothing sent
    assert got["cluster_s_to_99_10gbit"] is None
    assert protocol_columns(rows, None)["cluster_s_to_95_1gbit"] is None
    result = {"dataset": "g", "k": 4, "strategy": "avg+scaffold", "partitioner": "asep", "seed": 0,
              "test_at_best_val": 0.90, **got}
    text = "\n".join(protocol_section([result]))
    assert "| g | 4 | avg+scaffold | 0 | 0.9000 | 4 | 8 | 8.0 |" in text and "not reached" in text
