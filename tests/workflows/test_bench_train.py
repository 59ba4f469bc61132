"""`bench train`'s aggregation over seeds and its headline (pure functions, synthetic rows)."""

from __future__ import annotations

import pytest

from workflows.bench_train import headline, over_seeds, spread


def _row(strategy, k, seed, test, seconds, nbytes, partitioner="asep"):
    return {"dataset": "g", "k": k, "strategy": strategy, "partitioner": partitioner, "seed": seed,
            "eval_mode": "exact", "test_at_best_val": test, "final_test": test - 0.01, "best_val": test,
            "seconds_to_target": seconds, "modelled_s_to_target_10gbit": None if seconds is None else seconds + 1,
            "bytes_per_epoch": nbytes, "bytes_per_epoch_max": 2 * nbytes}


def _results():
    return [
        _row("centralized", 1, 0, 0.90, 10.0, 0, "-"), _row("centralized", 1, 1, 0.92, 12.0, 0, "-"),
        _row("avg", 4, 0, 0.89, 4.0, 2**20), _row("avg", 4, 1, 0.91, None, 3 * 2**20),
        _row("fds", 4, 0, 0.88, 8.0, 40 * 2**20, None), _row("fds", 4, 1, 0.90, 12.0, 40 * 2**20, None),
    ]


def test_over_seeds_averages_each_group_and_counts_the_seeds_that_reached_the_target():
    rows = {r["strategy"]: r for r in over_seeds(_results())}
    avg = rows["avg"]
    assert avg["seeds"] == 2 and avg["reached"] == 1
    assert avg["test_at_best_val"] == pytest.approx(0.90)
    assert (avg["test_at_best_val_seedmin"], avg["test_at_best_val_seedmax"]) == (0.89, 0.91)
    # A time to the target is averaged over the seeds that reached it only.
    assert avg["seconds_to_target"] == 4.0
    assert avg["bytes_per_epoch"] == 2 * 2**20
    assert spread(avg, "test_at_best_val") == "0.9000 (0.8900–0.9100)"
    assert spread(avg, "bytes_per_epoch", 1, 2**20) == "2.0 (1.0–3.0)"
    assert spread(rows["centralized"], "replication_factor") == "-"


def test_headline_gives_the_gaps_in_points_and_the_ratios_of_the_means():
    (row,) = headline(_results(), "avg")
    assert row["dataset"] == "g" and row["k"] == 4 and row["seeds"] == 2
    assert row["asepr − centralized (points)"] == "-1.00"
    assert row["asepr − fds (points)"] == "+1.00"
    assert row["fds/asepr time"] == "2.50"  # fds 10 s on average, avg 4 s (one seed of two)
    assert row["asepr s to 95%"] == "4.0 (1/2 seeds)"
    assert row["fds/asepr bytes"] == "20.00"
    # No fds run at a k: no headline row there.
    assert headline([r for r in _results() if r["strategy"] != "fds"], "avg") == []
