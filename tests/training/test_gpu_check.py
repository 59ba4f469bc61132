"""The GPU check's CPU path (``docs/results/gpu/check.sh``), so that the script keeps
working on machines without a GPU between the runs on one."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_the_gpu_checks_cpu_path_trains_every_case_and_passes(tmp_path):
    # the bundled Cora, laid out as the datasets folder holds it
    (tmp_path / "datasets" / "cora").mkdir(parents=True)
    os.symlink(REPO / "workflows" / "data" / "cora.npz", tmp_path / "datasets" / "cora" / "cora.npz")
    # the script's `python` and `asepr` are the test's own
    path = f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"
    env = {**os.environ, "PATH": path, "ASEPR_GPU_CHECK": "cpu", "ASEPR_GPU_CHECK_CASES": "cora",
           "ASEPR_DATASETS": str(tmp_path / "datasets")}
    work = tmp_path / "work"
    done = subprocess.run(["bash", str(REPO / "docs/results/gpu/check.sh"), str(work)], env=env,
                          capture_output=True, text=True, timeout=900, cwd=tmp_path)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "asepr gpu check: passed" in done.stdout
    table = (work / "gpu-check.md").read_text()
    for case in ("cora-k2", "cora-k4", "cora-central"):
        assert f"| {case} | cpu |" in table
