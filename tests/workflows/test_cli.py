"""The `asepr` command line as a user runs it: demo, import, synth, validate, clean."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from asepr.workflows.cli import main

REPO = Path(__file__).resolve().parents[2]


def _asepr(*args: str, cwd: Path, timeout: float = 300) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    return subprocess.run(
        [sys.executable, "-m", "asepr.workflows.cli", *args],
        cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout,
    )


@pytest.mark.slow  # the README's install command runs `asepr demo` itself
def test_demo_runs_from_any_directory(tmp_path):
    result = _asepr("demo", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "2,708" in result.stdout and "5,278" in result.stdout
    # The 4 trainers learn (Cora's majority class is 0.30) and are compared with the baseline.
    m = re.search(r"final test accuracy (\S+) with 4 partitioned ranks vs (\S+) centralized", result.stdout)
    assert m, result.stdout[-2000:]
    assert float(m.group(1)) >= 0.70 and float(m.group(2)) >= 0.70
    assert list(tmp_path.iterdir()) == []  # nothing left behind in the working directory


def test_import_then_validate_then_clean(tmp_path, capsys):
    from asepr.workflows.demo import bundled_cora

    out = tmp_path / "cora"
    assert main(["import", "gnn-npz", str(bundled_cora()), str(out), "--shard-rows", "1000"]) == 0
    assert "2,708 nodes, 5,278 edges" in capsys.readouterr().out
    assert len(list((out / "edges").glob("*.parquet"))) == 6
    assert main(["validate", str(out), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["num_nodes"] == 2708 and report["duplicate_edges"] == 0
    # Importing over an existing output needs --overwrite.
    assert main(["import", "gnn-npz", str(bundled_cora()), str(out)]) == 1
    assert "--overwrite" in capsys.readouterr().err


def test_edgelist_import_drops_on_request(tmp_path, capsys):
    src = tmp_path / "g.tsv"
    src.write_text("# a comment\na\tb\nb\tc\na\tb\nc\tc\n")
    # String ids look like a header line, so say there is none.
    assert main(["import", "edgelist", str(src), str(tmp_path / "raw"), "--no-header"]) == 0
    assert main(["validate", str(tmp_path / "raw")]) == 0
    text = capsys.readouterr().out
    assert "self-loops   1" in text and "duplicates   1" in text
    assert main(["import", "edgelist", str(src), str(tmp_path / "clean"), "--no-header",
                 "--drop-self-loops", "--drop-duplicates"]) == 0
    table = pq.read_table(tmp_path / "clean" / "edges")
    assert table.num_rows == 2
    ids = pq.read_table(tmp_path / "clean" / "id_map.parquet")
    assert sorted(ids["original_id"].to_pylist()) == ["a", "b", "c"]


def test_import_of_bad_input_leaves_nothing(tmp_path, capsys):
    src = tmp_path / "g.csv"
    src.write_text("src,dst\n0,1\n1,2\n")
    table = tmp_path / "nodes.csv"
    table.write_text("id,label,f0\n0,1,0.5\n1,0,nan\n2,1,1.0\n")
    code = main(["import", "edgelist", str(src), str(tmp_path / "out"), "--node-table", str(table)])
    assert code == 1
    err = capsys.readouterr().err
    assert "nodes.csv" in err or "out" in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["g.csv", "nodes.csv"]


def test_synth_cli_is_reproducible(tmp_path, capsys):
    args = ["--nodes", "500", "--edges", "4000", "--classes", "4", "--dim", "6", "--seed", "3"]
    assert main(["synth", str(tmp_path / "a"), *args]) == 0
    assert main(["synth", str(tmp_path / "b"), *args]) == 0
    for sub in ("edges", "nodes"):
        for f in sorted((tmp_path / "a" / sub).iterdir()):
            assert f.read_bytes() == (tmp_path / "b" / sub / f.name).read_bytes()
    assert main(["synth", str(tmp_path / "c"), *args, "--homophily", "1.5"]) == 1
    assert "--homophily" in capsys.readouterr().err
    assert main(["synth", str(tmp_path / "d"), *args, "--split", "0.5,0.2,0.2"]) == 1
    assert "--split" in capsys.readouterr().err
    assert main(["synth", str(tmp_path / "e"), *args, "--split", "0.08,0.02,0.9"]) == 0
    assert json.loads((tmp_path / "e" / "meta.json").read_text())["split"]["fractions"] == [0.08, 0.02, 0.9]


def test_killed_synth_leaves_no_output_and_a_rerun_completes(tmp_path):
    env = dict(os.environ, PYTHONPATH=str(REPO))
    out = tmp_path / "big"
    cmd = [sys.executable, "-m", "asepr.workflows.cli", "synth", str(out), "--nodes", "200000",
           "--edges", "20000000", "--dim", "4", "--shard-rows", "200000"]
    proc = subprocess.Popen(cmd, cwd=tmp_path, env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    try:
        # Wait until edge shards are being written inside the hidden staging directory.
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            staged = list(tmp_path.glob(".big.partial-*/edges/part-00002.parquet"))
            if staged or proc.poll() is not None:
                break
            time.sleep(0.05)
        assert proc.poll() is None, "the generator finished before it could be killed"
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    finally:
        if proc.poll() is None:
            proc.kill()
    assert not out.exists()
    assert [p.name.startswith(".big.partial-") for p in tmp_path.iterdir()] == [True]
    # A rerun (smaller, to stay quick) sweeps the dead run's staging directory.
    assert main(["synth", str(out), "--nodes", "300", "--edges", "2000", "--dim", "4"]) == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["big"]
    assert json.loads((out / "meta.json").read_text())["num_edges"] == 2000


@pytest.mark.slow  # starts a local cluster; the cluster's result is checked by tests/pipeline/test_write.py
def test_quiet_partition_on_a_local_cluster_prints_nothing(tmp_path):
    """`-q` silences distributed's scheduler, nanny and worker lines too."""
    synth = _asepr("synth", str(tmp_path / "in"), "--nodes", "300", "--edges", "2000", "--dim", "4",
                   "--classes", "3", "-q", cwd=tmp_path)
    assert synth.returncode == 0, synth.stderr
    result = _asepr("partition", str(tmp_path / "in"), str(tmp_path / "out"), "-k", "2",
                    "--workers", "2", "-q", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert result.stdout == "" and result.stderr == "", result.stderr[-2000:]


def test_console_script_flushes_its_output_and_keeps_the_exit_code(tmp_path):
    # `asepr` ends the process without the interpreter's teardown (asepr.workflows.cli.run):
    # what a command printed to a pipe still arrives, and the exit code is kept.
    ok = _asepr("synth", str(tmp_path / "g"), "--nodes", "300", "--edges", "2000", "--dim", "4", cwd=tmp_path)
    assert ok.returncode == 0, ok.stderr
    assert ok.stdout.rstrip().splitlines(), ok.stdout
    bad = _asepr("validate", str(tmp_path / "missing"), cwd=tmp_path)
    assert bad.returncode == 1
    assert "asepr validate: error:" in bad.stderr and "missing" in bad.stderr


def test_an_unwritable_output_is_the_projects_error_not_a_traceback(tmp_path, capsys):
    """`asepr import` and `asepr synth` into a read-only filesystem name the path and the fix."""
    from tests.security.tmpfs import mounted_tmpfs
    from asepr.workflows.demo import bundled_cora

    with mounted_tmpfs(tmp_path / "ro", "1m", read_only=True) as ro:
        assert main(["import", "gnn-npz", str(bundled_cora()), str(ro / "cora")]) == 1
        err = capsys.readouterr().err
        assert err.startswith("asepr import: error: ") and str(ro) in err
        assert "read-only filesystem (EROFS" in err and "Fix: " in err
        synth = _asepr("synth", str(ro / "g"), "--nodes", "300", "--edges", "2000", cwd=tmp_path)
        assert synth.returncode == 1
        assert "Traceback" not in synth.stderr and len(synth.stderr.strip().splitlines()) == 1, synth.stderr
        assert synth.stderr.startswith("asepr synth: error: ") and str(ro) in synth.stderr
        assert "read-only filesystem (EROFS" in synth.stderr


def test_verify_of_a_missing_output_says_so(tmp_path, capsys):
    assert main(["verify", str(tmp_path / "nope")]) == 1
    err = capsys.readouterr().err
    assert err.startswith("asepr verify: error: output ") and "no manifest" in err and "None" not in err
