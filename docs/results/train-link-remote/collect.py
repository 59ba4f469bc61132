"""Collect the runs of run.sh into metrics/*.csv and print the README's table.

Usage: python collect.py WORK
"""
from __future__ import annotations

import csv
import json
import shutil
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent


def last(run: Path) -> dict:
    with open(run / "metrics.csv") as f:
        rows = list(csv.DictReader(f))
    info = json.loads((run / "run.json").read_text())
    r = rows[-1]
    return {"epochs": r["epoch"], "loss_first": float(rows[0]["loss"]), "loss": float(r["loss"]),
            "best_val": float(r["best_val"]), "test_at_best_val": float(r["test_at_best_val"]),
            "final_test": float(r["test"]), "pool_mib": info.get("negative_pool_bytes_sent_mean", 0.0) / 2**20,
            "placement_mib": info.get("placement_bytes_mean", 0.0) / 2**20}


def main(work: Path) -> None:
    out = HERE / "metrics"
    out.mkdir(exist_ok=True)
    print("| run | epochs | loss first → last | best val MRR | test MRR at best val | final test | "
          "pool MiB sent/rank | placement MiB/rank |")
    print("|---|---|---|---|---|---|---|---|")
    for run in sorted(p for p in work.glob("*/*") if (p / "metrics.csv").exists()):
        name = f"{run.parent.name}-{run.name}"
        shutil.copy(run / "metrics.csv", out / f"{name}.csv")
        m = last(run)
        print(f"| {name} | {m['epochs']} | {m['loss_first']:.3f} → {m['loss']:.3f} | {m['best_val']:.3f} | "
              f"**{m['test_at_best_val']:.3f}** | {m['final_test']:.3f} | {m['pool_mib']:.1f} | "
              f"{m['placement_mib']:.1f} |")


if __name__ == "__main__":
    main(Path(sys.argv[1]))
