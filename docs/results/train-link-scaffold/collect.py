"""Collect the runs of run.sh: metrics/*.csv, the per-run table and the summary.

Usage: python collect.py WORK > table.md
The summary compares each strategy's test MRR at the best validation point with the
centralized run of the same graph and seed (relative gap), and gives the mean over seeds.
"""
from __future__ import annotations

import csv
import re
import shutil
import statistics
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent


def summary(run: Path) -> dict:
    with open(run / "metrics.csv") as f:
        rows = list(csv.DictReader(f))
    r = rows[-1]
    return {"epochs": int(r["epoch"]), "loss_first": float(rows[0]["loss"]), "loss": float(r["loss"]),
            "best_val": float(r["best_val"]), "best_epoch": int(r["best_epoch"]),
            "test": float(r["test_at_best_val"]), "final_test": float(r["test"]),
            "loss_falls": float(r["loss"]) < float(rows[0]["loss"])}


def main(work: Path) -> None:
    out = HERE / "metrics"
    out.mkdir(exist_ok=True)
    runs = {}
    for run in sorted(p for p in work.glob("*/*") if (p / "metrics.csv").exists()):
        graph, name = run.parent.name, run.name
        m = re.fullmatch(r"(.+)-s(\d+)", name)
        if not m:
            continue
        shutil.copy(run / "metrics.csv", out / f"{graph}-{name}.csv")
        runs[(graph, m.group(1), int(m.group(2)))] = summary(run)
    print("| graph | strategy | seed | epochs | loss first → last | best val MRR (epoch) | "
          "test MRR at best val | vs centralized, same seed | final test |")
    print("|---|---|---|---|---|---|---|---|---|")
    for (graph, strat, seed), s in sorted(runs.items()):
        c = runs.get((graph, "central", seed))
        gap = f"{100 * (s['test'] / c['test'] - 1):+.1f} %" if c and strat != "central" else ""
        print(f"| {graph} | {strat} | {seed} | {s['epochs']} | {s['loss_first']:.3f} → {s['loss']:.3f} | "
              f"{s['best_val']:.3f} ({s['best_epoch']}) | **{s['test']:.3f}** | {gap} | {s['final_test']:.3f} |")
    print("\n| graph | strategy | seeds | mean test MRR at best val | min–max | vs centralized mean | "
          "worst seed vs its centralized | loss falls in every run |")
    print("|---|---|---|---|---|---|---|---|")
    for graph, strat in sorted({(g, s) for g, s, _ in runs}):
        seeds = sorted(sd for g, s, sd in runs if (g, s) == (graph, strat))
        tests = [runs[(graph, strat, sd)]["test"] for sd in seeds]
        cent = [runs[(graph, "central", sd)]["test"] for sd in seeds if (graph, "central", sd) in runs]
        mean = statistics.mean(tests)
        rel = worst = ""
        if strat != "central" and cent:
            cmean = statistics.mean(runs[k]["test"] for k in runs if k[:2] == (graph, "central"))
            rel = f"{100 * (mean / cmean - 1):+.1f} %"
            gaps = [runs[(graph, strat, sd)]["test"] / runs[(graph, "central", sd)]["test"] - 1
                    for sd in seeds if (graph, "central", sd) in runs]
            worst = f"{100 * min(gaps):+.1f} %" if gaps else ""
        falls = all(runs[(graph, strat, sd)]["loss_falls"] for sd in seeds)
        print(f"| {graph} | {strat} | {','.join(map(str, seeds))} | **{mean:.3f}** | "
              f"{min(tests):.3f}–{max(tests):.3f} | {rel} | {worst} | {'yes' if falls else 'NO'} |")


if __name__ == "__main__":
    main(Path(sys.argv[1]))
