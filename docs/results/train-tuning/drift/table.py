"""The tables of README.md from DATASET/RUN/metrics.csv: python table.py (run from this directory)."""
import csv
import glob
import os

EPOCHS = (2, 4, 6, 8, 10, 12)
for dataset in ("photo", "cs"):
    runs = {os.path.basename(os.path.dirname(p)): list(csv.DictReader(open(p)))
            for p in sorted(glob.glob(f"{dataset}/*/metrics.csv"))}
    target = 0.95 * max(float(r["val"]) for r in runs["central"]) if "central" in runs else None
    print(f"\n## {dataset}" + (f" (target: 95 % of central's best val = {target:.4f})" if target else ""))
    print("\n| run | " + " | ".join(f"val @{e}" for e in EPOCHS)
          + " | epochs to target | s to target | best val | test at best val | epochs | train s | KiB/epoch (mean rank) |")
    print("|---" * (len(EPOCHS) + 8) + "|")
    for name, rows in runs.items():
        by_epoch = {int(float(r["epoch"])): float(r["val"]) for r in rows}
        reached = next((r for r in rows if target and float(r["val"]) >= target), None)
        best = max(rows, key=lambda r: float(r["val"]))
        last = rows[-1]
        kib = float(last["bytes_sent_cum"]) / float(last["epoch"]) / 1024
        print(f"| {name} | " + " | ".join(f"{by_epoch[e]:.3f}" if e in by_epoch else "-" for e in EPOCHS)
              + f" | {reached['epoch'] if reached else ('-' if not target else 'not reached')}"
              + (f" | {float(reached['elapsed_s']):.1f}" if reached else " | -")
              + f" | {float(best['val']):.4f} | {float(best['test']):.4f} | {last['epoch']} | {float(last['elapsed_s']):.1f}"
              + f" | {kib:.0f} |")
