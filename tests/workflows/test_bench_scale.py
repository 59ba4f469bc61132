"""asepr bench scale: the measuring harness and one tiny end-to-end row."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from asepr.storage.errors import InputError
from asepr.workflows.bench.code import ROOMS, code_of
from asepr.workflows.bench.scale import COLUMNS, bench_scale, children_cpu_seconds, run_measured

REPO = Path(__file__).resolve().parents[2]


def test_run_measured_sees_the_memory_of_a_child_process(tmp_path):
    """The peak is the process tree's: a grandchild's 300 MB allocation is counted."""
    code = ("import subprocess, sys; subprocess.run([sys.executable, '-c', "
            "'b = bytearray(300_000_000); b[::4096] = b\"x\" * len(b[::4096]); import time; time.sleep(1.0)'], check=True)")
    samples: list = []
    wall, peak = run_measured([sys.executable, "-c", code], tmp_path / "log.txt", samples)
    assert peak >= 300_000_000
    assert wall > 0 and samples and max(rss for _, rss in samples) == peak


def test_children_cpu_seconds_counts_a_grandchilds_work(tmp_path):
    """The CPU time across one run is the process tree's: a grandchild's busy loop is counted."""
    burn = "import time; t = time.process_time(); exec('while time.process_time() - t < 0.5: pass')"
    code = f"import subprocess, sys; subprocess.run([sys.executable, '-c', {burn!r}], check=True)"
    before = children_cpu_seconds()
    run_measured([sys.executable, "-c", code], tmp_path / "log.txt")
    assert children_cpu_seconds() - before >= 0.5


def test_run_measured_names_the_log_of_a_failed_command(tmp_path):
    with pytest.raises(RuntimeError, match="log.txt"):
        run_measured([sys.executable, "-c", "import sys; print('boom'); sys.exit(3)"], tmp_path / "log.txt")
    assert "boom" in (tmp_path / "log.txt").read_text()


@pytest.mark.slow
def test_bench_scale_writes_a_consistent_row(tmp_path):
    rows = bench_scale(tmp_path / "out", [20_000], k=4, dim=8, classes=4, verify=True, echo=lambda *_: None)
    (row,) = rows
    assert set(COLUMNS) - {"remote_ratio", "same_stores"} <= set(row) and row["target"] == "local"
    assert row["edges"] == 20_000 and row["nodes"] == 2_000
    assert row["edges_per_s"] * row["wall_s"] == pytest.approx(20_000)
    assert row["kernel_edges_per_s"] > row["edges_per_s"]  # the kernel is part of the command
    assert 1.0 <= row["rf"] <= 4.0 and row["peak_gib"] > 0 and row["plan_gib"] > 0
    assert row["cpu_s"] > 0 and row["verify_cpu_s"] > 0
    assert not any(name.startswith("load") for name in row)
    assert "assignment kernel" in json.loads(row["stage_seconds"])
    for name in ("scale.md", "scale.parquet"):
        assert (tmp_path / "out" / name).exists()
    assert "| cpu_s |" in (tmp_path / "out" / "scale.md").read_text()
    assert not (tmp_path / "out" / "work" / "out-e20000-k4").exists()  # removed without --keep


def _checkout_copy(root: Path) -> Path:
    """This checkout's package folders, copied: another tree of the same code."""
    for name in ("api", *ROOMS):
        shutil.copytree(REPO / name, root / name, ignore=shutil.ignore_patterns("__pycache__"))
    return root


def test_code_of_runs_either_layout_of_a_checkout_and_refuses_anything_else(tmp_path):
    tree = _checkout_copy(tmp_path / "tree")
    code = code_of(tree, tmp_path / "work")
    done = subprocess.run(code.command("--version"), env=code.environ(), cwd=tmp_path, capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0 and done.stdout.startswith("asepr "), done.stderr
    where = subprocess.run([*code.argv[:2], "-c", "import asepr.pipeline as p; print(p.__file__)"],
                           env=code.environ(), capture_output=True, text=True, timeout=600)
    assert Path(where.stdout.strip()).resolve() == (tree / "pipeline" / "__init__.py").resolve()

    old = tmp_path / "old"
    (old / "workflows").mkdir(parents=True)
    (old / "workflows" / "__main__.py").write_text("")
    assert code_of(old, tmp_path / "work").argv[-1] == "workflows"
    assert code_of(old, tmp_path / "work").env == {"PYTHONPATH": str(old.resolve())}
    with pytest.raises(InputError, match="a checkout of asepr"):
        code_of(tmp_path / "work", tmp_path / "work")


@pytest.mark.slow
def test_bench_scale_runs_a_baseline_side_by_side_and_compares_the_stores(tmp_path):
    tree = _checkout_copy(tmp_path / "base-tree")
    rows = bench_scale(tmp_path / "out", [20_000], k=4, dim=8, classes=4, baseline=tree, pairs=2,
                       echo=lambda *_: None)
    assert [r["code"] for r in rows] == ["base", "this", "base", "this"]
    assert [r["same_stores"] for r in rows] == [None, True, None, True]
    assert len({r["rf"] for r in rows}) == 1
    assert "Side by side" in (tmp_path / "out" / "scale.md").read_text()
    # each code partitioned a tiny graph once before the measured rows (numba's compilation)
    assert all((tmp_path / "out" / "work" / f"warm-up-{code}.log").exists() for code in ("base", "this"))
