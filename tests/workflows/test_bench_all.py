"""`asepr bench all --quick` writes a complete report (files and columns, never values)."""

from __future__ import annotations

import pyarrow.parquet as pq
import pytest

from asepr.workflows.bench.suite import DEFAULT_STRATEGY
from asepr.workflows.cli import main


@pytest.mark.slow  # every phase end to end; the phases have their own default tests
def test_bench_all_quick_writes_every_part(tmp_path, capsys, monkeypatch):
    # From another directory, with a relative --out: the trainers and bench phases
    # run as child processes and must get absolute paths.
    monkeypatch.chdir(tmp_path)
    out = tmp_path / "report"
    assert main(["bench", "all", "--quick", "--out", "report"]) == 0
    report = (out / "report.md").read_text()
    assert f"ASEPR ({DEFAULT_STRATEGY}) against the fully-decentralized baseline" in report
    assert "| dataset | k | seeds | centralized test@best val | asepr test@best val |" in report
    assert "asepr modelled s @10G" in report and "asepr test@best val" in report
    for name in ("train.md", "partition.md", "ingest/ingest.md"):
        assert (out / name).exists() and f"]({name})" in report
    train = pq.read_table(out / "train.parquet").to_pylist()
    assert {r["strategy"] for r in train} == {"centralized", "avg", DEFAULT_STRATEGY, "fds"}
    # The default strategy on ASEP (the strategies' run) and on hash partitions.
    assert sorted(r["partitioner"] for r in train if r["strategy"] == DEFAULT_STRATEGY) == ["asep", "hash"]
    for col in ("final_test", "test_at_best_val", "best_epoch", "epochs_to_target", "seconds_to_target",
                "modelled_s_to_target_1gbit", "modelled_s_to_target_10gbit", "modelled_s_to_target_100gbit",
                "train_seconds", "eval_seconds", "eval_mode", "bytes_per_epoch", "bytes_per_epoch_max",
                "messages_per_epoch_max", "eval_bytes_per_eval", "placement_bytes_mean", "placement_bytes_max",
                "replication_factor", "wall_s", "torch", "cores"):
        assert col in train[0]
    assert all(r["eval_mode"] == "exact" and r["placement_bytes_max"] >= r["placement_bytes_mean"] > 0
               for r in train)
    text = (out / "train.md").read_text()
    assert "## Partitioners" in text and "modelled" in text.lower()
    curves = pq.read_table(out / "train_rounds.parquet").column_names
    assert {"round", "epoch", "val", "elapsed_s", "eval_seconds", "bytes_sent_cum", "messages_sent_cum_max",
            "eval_mode", "strategy", "partitioner", "dataset", "k"} <= set(curves)
    assert {"algo", "rf", "edge_balance"} <= set(pq.read_table(out / "partition.parquet").column_names)
    assert pq.read_table(out / "ingest" / "ingest.parquet").num_rows > 0
    for prefix, page in (("train-", "train.md"), ("partition-", "partition.md")):
        pngs = sorted(p.name for p in out.glob(f"{prefix}*.png"))
        assert pngs and all(f"({p})" in (out / page).read_text() for p in pngs)
        for p in pngs:
            assert (out / p).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
