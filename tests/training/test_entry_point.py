"""The README's torchrun recipe, run from a user's project that has packages of its own
named like asepr's rooms: the ranks import asepr's, never the user's."""

from __future__ import annotations

import csv
import os
import subprocess
import sys
from pathlib import Path

from tests.training.conftest import free_port


def _users_project(root: Path) -> Path:
    """A working directory holding ``training/``, ``storage/``, ``pipeline/``,
    ``workflows/`` and ``asepr/`` packages that fail loudly when imported."""
    for name in ("training", "storage", "pipeline", "workflows", "asepr"):
        (root / name).mkdir(parents=True)
        (root / name / "__init__.py").write_text(f"raise ImportError(\"the user's own {name!r} package was imported\")\n")
    return root


def test_the_torchrun_recipe_trains_from_a_folder_holding_training_and_storage_packages(cora_parts, tmp_path):
    project = _users_project(tmp_path / "project")
    bindir = Path(sys.executable).parent
    env = dict(os.environ, PATH=f"{bindir}{os.pathsep}{os.environ.get('PATH', '')}", OMP_NUM_THREADS="1")
    env.pop("PYTHONPATH", None)
    run_dir = tmp_path / "run"
    cmd = [str(bindir / "torchrun"), "--nnodes", "1", "--nproc-per-node", "2", "--rdzv-backend", "c10d",
           "--rdzv-endpoint", f"127.0.0.1:{free_port()}", "--rdzv-id", "recipe", "--no-python", "asepr-rank",
           str(cora_parts(2)), "--run-dir", str(run_dir), "--rounds", "3", "--local-epochs", "1", "--seed", "0"]
    done = subprocess.run(cmd, cwd=project, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "own" not in done.stderr  # no user package was imported, not even in a warning

    with open(run_dir / "metrics.csv") as f:
        rows = list(csv.DictReader(f))
    assert [int(r["round"]) for r in rows] == [1, 2, 3]
    # Cora has 7 classes (the largest holds 30 % of the nodes): the global model has learned.
    assert float(rows[-1]["val"]) > 0.5, rows[-1]

    # `python -m` puts the working directory first on sys.path: the same ranks started that
    # way import the user's `asepr` folder, which the console script cannot.
    shadowed = subprocess.run([sys.executable, "-m", "asepr.training.main", "--help"], cwd=project, env=env,
                              capture_output=True, text=True, timeout=600)
    assert shadowed.returncode != 0 and "the user's own 'asepr' package was imported" in shadowed.stderr
