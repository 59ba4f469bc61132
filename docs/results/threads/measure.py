"""The centralized baseline's torch threads, side by side: ``--threads 1``, ``2`` and the
default, on Cora and tolokers, without and with a background load of two busy processes;
one round of the headline protocol's length each.

    python docs/results/threads/measure.py [WORK]     (WORK: scratch folder, default /tmp/threads)

Each run is a fresh ``asepr train --centralized`` process (the default measures the idle
cores as it starts); the settings alternate within each dataset and load, so that any
change in the machine's other work falls on all of them. Prints a Markdown table and
writes ``WORK/threads.csv``.
"""

from __future__ import annotations

import csv
import subprocess
import sys
import time
from pathlib import Path

from asepr.training.rundir.checkpoint import RunDir
from asepr.workflows.datasets import resolve_dataset

DATASETS = ("cora", "tolokers")
SETTINGS = ("1", "2", "default")
FLAGS = ["--rounds", "1", "--local-epochs", "2", "--feature-projection", "256", "-q"]
BUSY = "while True: pass"


def run(input_dir: Path, run_dir: Path, setting: str) -> dict[str, float]:
    threads = [] if setting == "default" else ["--threads", setting]
    t0 = time.perf_counter()
    subprocess.run(["asepr", "train", "--centralized", str(input_dir), "--run-dir", str(run_dir), "--overwrite",
                    *FLAGS, *threads], check=True, stdout=subprocess.DEVNULL)
    wall = time.perf_counter() - t0
    row = RunDir(run_dir).read_metrics()[-1]
    used = RunDir(run_dir).read_run_info().get("threads", "")
    return {"train_s": float(row["train_seconds"]), "eval_s": float(row["eval_seconds"]), "wall_s": wall,
            "threads_used": used}


def main(work: Path) -> None:
    work.mkdir(parents=True, exist_ok=True)
    rows = []
    for name in DATASETS:
        input_dir = resolve_dataset(name, work / "inputs")
        for load in ("idle", "loaded"):
            busy = [subprocess.Popen([sys.executable, "-c", BUSY]) for _ in range(2 if load == "loaded" else 0)]
            try:
                for setting in SETTINGS:
                    result = run(input_dir, work / "runs" / f"{name}-{load}-{setting}", setting)
                    rows.append({"dataset": name, "load": load, "threads": setting, **result})
                    print(rows[-1], flush=True)
            finally:
                for proc in busy:
                    proc.kill()
                    proc.wait()
    with open(work / "threads.csv", "w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    print("\n| dataset | machine | --threads | threads used | training s | evaluation s | wall s | vs best |")
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        best = min(o["train_s"] for o in rows if (o["dataset"], o["load"]) == (r["dataset"], r["load"]))
        print(f"| {r['dataset']} | {r['load']} | {r['threads']} | {r['threads_used']} | {r['train_s']:.2f} | "
              f"{r['eval_s']:.2f} | {r['wall_s']:.1f} | {r['train_s'] / best:.2f}x |")


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else Path("/tmp/threads"))
