"""`bench train`'s aggregation over seeds, its headline and its run summaries (synthetic rows), and
the ranks' own peak RSS."""

from __future__ import annotations

import json
import math

import pyarrow.parquet as pq
import pytest

from asepr.workflows.bench.tables import parquet_table
from asepr.workflows.bench.train_report import (
    headline,
    modelled_seconds,
    over_seeds,
    spread,
    summarise_run,
    table_rows,
)


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


def _metrics(**extra):
    return {"round": 1, "epoch": 2, "eval_mode": "exact", "val": 0.8, "test": 0.7, "elapsed_s": 10.0,
            "eval_elapsed_s": 1.0, "bytes_sent_cum": 1e6, "bytes_sent_cum_max": 2e6, "messages_sent_cum_max": 100,
            "eval_bytes_sent_round": 5e5, **extra}


def test_summary_reports_each_ranks_own_peak_rss_mean_and_max():
    rows = [_metrics(peak_rss_mib=300.0, peak_rss_mib_mean=250.0, eval_peak_ratio_max=1.2),
            _metrics(round=2, peak_rss_mib=400.0, peak_rss_mib_mean=350.0, eval_peak_ratio_max=1.05)]
    summary = summarise_run(rows, None)
    assert (summary["peak_rss_mib_mean"], summary["peak_rss_mib_max"]) == (350.0, 400.0)
    assert summary["eval_peak_ratio_max"] == 1.2
    # Rows from before the ranks reported their own peak: nothing claimed.
    old = summarise_run([_metrics(peak_rss_mib=300.0)], None)
    assert math.isnan(old["peak_rss_mib_mean"]) and math.isnan(old["peak_rss_mib_max"])


def test_summary_and_table_give_the_test_interval_at_the_best_validation_point():
    rows = [_metrics(val=0.8, test=0.70, test_ci_low=0.68, test_ci_high=0.72, test_scored=5000.0, test_split=9e5),
            _metrics(round=2, val=0.9, test=0.75, test_ci_low=0.74, test_ci_high=0.76, test_scored=5000.0,
                     test_split=9e5),
            _metrics(round=3, val=0.85, test=0.78, test_ci_low=0.77, test_ci_high=0.79, test_scored=5000.0,
                     test_split=9e5)]
    summary = summarise_run(rows, None)
    assert (summary["test_at_best_val"], summary["test_ci_low"], summary["test_ci_high"]) == (0.75, 0.74, 0.76)
    (row,) = table_rows([{**summary, "modelled_s_to_target_1gbit": None, "modelled_s_to_target_10gbit": None,
                          "modelled_s_to_target_100gbit": None}])
    assert row["test 95% interval"] == "0.7400–0.7600" and row["test scored"] == "5,000 of 900,000"
    # Rows without the interval (before it existed): nothing claimed.
    (old,) = table_rows([{**summarise_run([_metrics()], None), "modelled_s_to_target_1gbit": None,
                          "modelled_s_to_target_10gbit": None, "modelled_s_to_target_100gbit": None}])
    assert old["test 95% interval"] == "-" and old["test scored"] == "-"


def test_modelled_time_includes_the_evaluation_traffic():
    plain = summarise_run([_metrics()], None)["modelled_train_s_1gbit"]
    assert plain == pytest.approx(modelled_seconds(10.0, 2e6, 100, 1))
    folded = summarise_run([_metrics(bytes_sent_total_max=3e6, messages_sent_total_max=150)], None)
    assert folded["modelled_train_s_1gbit"] == pytest.approx(modelled_seconds(10.0, 3e6, 150, 1))
    assert folded["modelled_train_s_1gbit"] > plain


def test_a_rank_reports_its_own_peak_not_its_launchers(tmp_path):
    """ru_maxrss carries the launcher's high-water mark into the children it starts; the
    ranks' VmHWM does not."""
    import resource
    import subprocess
    import sys

    import numpy as np

    block = np.ones(2**30 // 8)  # touched: this process's high-water mark passes 1 GiB
    del block
    code = ("import json; from asepr.storage.resources import peak_rss_bytes; from asepr.training.loop.rounds import "
            "rank_peak_rss_bytes; print(json.dumps([rank_peak_rss_bytes(), peak_rss_bytes()]))")
    own, inherited = json.loads(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                                               check=True).stdout)
    launcher = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    assert inherited >= 2**30 and launcher >= 2**30
    assert own < 900 * 2**20  # torch's CUDA build imports to about 620 MiB, the CPU build less


def test_curves_mixing_text_and_numbers_in_a_column_are_written(tmp_path):
    """A per-rank column reads back as text from a k-rank run and as a number from a
    one-rank run; the report's Parquet files take both (as text), and the other columns
    keep their types."""
    rows = [{"strategy": "centralized", "peak_rss_mib_ranks": 8608, "val": 0.8},
            {"strategy": "avg", "peak_rss_mib_ranks": "2810 2925 3326 2731", "val": 0.7, "round": 1}]
    table = parquet_table(rows)
    pq.write_table(table, tmp_path / "t.parquet")
    back = pq.read_table(tmp_path / "t.parquet").to_pylist()
    assert [r["peak_rss_mib_ranks"] for r in back] == ["8608", "2810 2925 3326 2731"]
    assert [r["val"] for r in back] == [0.8, 0.7] and [r["round"] for r in back] == [None, 1]
