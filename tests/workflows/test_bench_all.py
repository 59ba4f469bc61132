"""`asepr bench all --quick` writes a complete report (files and columns, never values)."""

from __future__ import annotations

import pyarrow.parquet as pq

from workflows.cli import main


def test_bench_all_quick_writes_every_part(tmp_path, capsys):
    out = tmp_path / "report"
    assert main(["bench", "all", "--quick", "--out", str(out)]) == 0
    report = (out / "report.md").read_text()
    assert "ASEPR (avg+kd+con) against the fully-decentralized baseline" in report
    assert "| dataset | k | asepr MiB/epoch | fds MiB/epoch |" in report
    for name in ("train.md", "partition.md", "ingest/ingest.md"):
        assert (out / name).exists() and f"]({name})" in report
    train = pq.read_table(out / "train.parquet").to_pylist()
    assert {r["strategy"] for r in train} == {"centralized", "avg", "avg+kd+con", "fds"}
    for col in ("final_test", "rounds_to_target", "seconds_to_target", "bytes_per_epoch", "wall_s", "torch", "cores"):
        assert col in train[0]
    curves = pq.read_table(out / "train_rounds.parquet").column_names
    assert {"round", "val", "elapsed_s", "bytes_sent_round", "strategy", "dataset", "k"} <= set(curves)
    assert {"algo", "rf", "edge_balance"} <= set(pq.read_table(out / "partition.parquet").column_names)
    assert pq.read_table(out / "ingest" / "ingest.parquet").num_rows > 0
    for prefix, page in (("train-", "train.md"), ("partition-", "partition.md")):
        pngs = sorted(p.name for p in out.glob(f"{prefix}*.png"))
        assert pngs and all(f"({p})" in (out / page).read_text() for p in pngs)
        for p in pngs:
            assert (out / p).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
