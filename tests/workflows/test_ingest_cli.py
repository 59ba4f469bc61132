"""``asepr ingest``, ``asepr rebalance``, drift in ``asepr inspect``, SIGKILL, ``asepr bench ingest``."""

from __future__ import annotations

import importlib.metadata
import os
import shutil
import signal
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from asepr.pipeline.verify import verify_output
from asepr.storage.partitions.manifest import JOURNAL_NAME, STAGING_NAME, read_manifest
from asepr.storage.partitions.output_stores import open_partition
from asepr.storage.partitions.state import read_state
from tests.pipeline.ingest_cases import skewed_edges, split_case
from tests.storage.helpers import edge_table
from tests.workflows.helpers import spawn_paused, wait_for_pause
from asepr.workflows.cli import main

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def case(tmp_path_factory) -> dict:
    """A 90/10 cut with 100 new nodes, and generation 1 of its base (k=3, asep) via the CLI."""
    root = tmp_path_factory.mktemp("cli-ingest")
    info = split_case(root, nodes=1000, edges=7000, new_nodes=60)
    assert main(["partition", str(root / "base"), str(root / "gen1"), "-k", "3", "--workers", "0", "-q"]) == 0
    return info


def _args(case, out: Path) -> list[str]:
    root = case["root"]
    return ["ingest", str(out), str(root / "inc" / "edges"), "--nodes", str(root / "inc" / "nodes"), "--workers", "0"]


def test_ingest_inspect_verify_and_ingest_again(case, tmp_path, capsys, caplog):
    out = tmp_path / "out"
    shutil.copytree(case["root"] / "gen1", out)
    assert main(_args(case, out)) == 0
    text = capsys.readouterr().out
    assert f"committed generation 2 of {out}: +{case['inc_edges']:,} edges, +60 nodes" in text
    assert "replication factor" in text and "partitions" in text
    assert main(["inspect", str(out)]) == 0
    text = capsys.readouterr().out
    for needle in ("generation   2", "increments   1 ingested", "drift", "community volume balance",
                   "last ingest off community", "rebuild edges", "rebuild nodes"):
        assert needle in text, needle
    assert ("rebalance advised" in text) or ("no rebalance needed" in text)
    assert main(["verify", str(out)]) == 0, capsys.readouterr().err
    capsys.readouterr()
    # The same shards again: a message, exit 0, nothing changes.
    before = (out / "manifest.json").read_bytes()
    assert main(_args(case, out)) == 0
    assert "nothing new to ingest" in capsys.readouterr().out
    assert "already ingested in generation 2" in caplog.text
    assert (out / "manifest.json").read_bytes() == before


def test_bad_input_exits_1_and_names_the_file(case, tmp_path, capsys):
    out = tmp_path / "out"
    shutil.copytree(case["root"] / "gen1", out)
    (tmp_path / "e").mkdir()
    pq.write_table(edge_table([0], [case["n"] + 10]), tmp_path / "e" / "stray.parquet")
    assert main(["ingest", str(out), str(tmp_path / "e"), "--workers", "0"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("asepr ingest: error:") and "stray.parquet" in err and "column 'dst'" in err
    assert read_manifest(out)["generation"] == 1 and not (out / STAGING_NAME).exists()
    assert main(["ingest", str(tmp_path / "none"), str(tmp_path / "e"), "--workers", "0"]) == 1
    assert "no manifest" in capsys.readouterr().err
    assert main(["rebalance", str(tmp_path / "none"), "--workers", "0"]) == 1


def test_rebalance_command_and_advice(tmp_path, capsys):
    """Drift advised by inspect after a skewed ingest; rebalance commits and clears the advice."""
    from asepr.pipeline.inputs.synth import SynthConfig, generate

    base = tmp_path
    generate(base / "in", SynthConfig(num_nodes=1200, num_edges=8000, num_classes=24, dim=8), shard_rows=4000)
    out = base / "out"
    assert main(["partition", str(base / "in"), str(out), "-k", "4", "--workers", "0", "-q"]) == 0
    hot = skewed_edges(out, base / "hot")
    assert main(["ingest", str(out), str(hot), "--workers", "0", "-q"]) == 0
    assert main(["inspect", str(out)]) == 0
    text = capsys.readouterr().out
    assert "rebalance advised" in text and f"asepr rebalance {out}" in text
    assert main(["rebalance", str(out), "--workers", "0"]) == 0
    text = capsys.readouterr().out
    assert "committed generation 3" in text and "community balance" in text
    assert main(["inspect", str(out)]) == 0
    text = capsys.readouterr().out
    assert "no rebalance needed" in text and "rebalances   1; last in generation 3" in text
    assert main(["verify", str(out)]) == 0
    assert main(["rebalance", str(out), "--workers", "0"]) == 0
    assert "nothing to rebalance" in capsys.readouterr().out


# --- crash safety: SIGKILL a real `asepr ingest` at known points -----------------------------


@pytest.mark.parametrize("stage", [
    pytest.param("route", marks=pytest.mark.slow),
    pytest.param("finalize", marks=pytest.mark.slow),
    pytest.param("between-commits", marks=pytest.mark.slow),
    "swap",
])
def test_sigkill_during_ingest_leaves_generation_1_and_a_rerun_completes(case, tmp_path, stage):
    out = tmp_path / "out"
    shutil.copytree(case["root"] / "gen1", out)
    before = read_manifest(out)
    marker = tmp_path / "paused"
    proc = spawn_paused(_args(case, out), stage, marker)
    try:
        wait_for_pause(marker, proc, "ingest")
        assert marker.read_text().split()[0] == stage
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        proc.stderr.close()
    assert proc.returncode == -signal.SIGKILL
    assert (out / ".asepr.lock").exists()
    if stage == "swap":
        assert (out / STAGING_NAME / JOURNAL_NAME).exists()
    report = verify_output(out)
    assert report.ok and report.generation == 1, report.summary()
    assert read_manifest(out) == before and read_state(out).generation == 1
    assert open_partition(out, 0).generation == 1
    assert main(_args(case, out) + ["-q"]) == 0
    manifest = read_manifest(out)
    assert manifest["generation"] == 2 and manifest["num_nodes"] == case["n"]
    report = verify_output(out)
    assert report.ok and report.generation == 2, report.summary()
    assert not (out / STAGING_NAME).exists() and not (out / ".asepr.lock").exists()


# --- the benchmark ------------------------------------------------------------------------------


@pytest.mark.slow
def test_bench_ingest_quick_writes_both_tables(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)  # a relative --out from another directory
    assert main(["bench", "ingest", "--quick", "--out", "report", "--verify"]) == 0
    text = (tmp_path / "report" / "ingest.md").read_text()
    assert "| partition base |" in text and "| ingest |" in text and "| full repartition |" in text
    assert "Ingest / full repartition: wall time" in text and "Machine:" in text
    assert "own CPU time" in text and "load average" not in text.lower()
    assert f'"asepr": "{importlib.metadata.version("asepr")}"' in text  # the release, not a revision
    rows = pq.read_table(tmp_path / "report" / "ingest.parquet").to_pylist()
    assert [r["phase"] for r in rows] == ["partition base", "ingest", "full repartition"]
    assert all(r["verify_ok"] for r in rows)
    assert rows[1]["edges_total"] == rows[2]["edges_total"] == rows[0]["edges_processed"] + rows[1]["edges_processed"]
    assert not (tmp_path / "report" / "work").exists()
