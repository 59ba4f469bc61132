"""Print the products-like tables from the WORK folder of run.sh.

usage: python collect.py WORK
  WORK/report/{train.parquet,train_rounds.parquet}  (asepr bench train)
  WORK/runs: the run directories (run.json: training seeds per rank)
  WORK/{synth,partition-k4,partition-k8}.time       (/usr/bin/time -v)
  WORK/mlp.json                                     (mlp.py)
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pyarrow.parquet as pq


def _time(path: Path) -> tuple[float, float]:
    """Wall seconds and maximum RSS (GiB) of a /usr/bin/time -v log."""
    text = path.read_text()
    wall = re.search(r"Elapsed \(wall clock\) time \(h:mm:ss or m:ss\): (\S+)", text).group(1)
    seconds = sum(float(p) * 60**i for i, p in enumerate(reversed(wall.split(":"))))
    rss = int(re.search(r"Maximum resident set size \(kbytes\): (\d+)", text).group(1))
    return seconds, rss / 2**20


def _seeds(work: Path, row: dict) -> int:
    """Training seeds over all ranks (every rank's run.json entry)."""
    name = "centralized" if row["strategy"] == "centralized" else f"k{row['k']}-{row['strategy'].replace('+', '-')}"
    path = work / "report" / "runs" / "products-like" / name / "run.json"
    if not path.exists():
        return 0
    info = json.loads(path.read_text())
    seeds = info.get("train_seeds") or [r["train"] for r in info.get("ranks", [])]
    return int(sum(seeds))


def main(work: Path) -> None:
    rows = pq.read_table(work / "report" / "train.parquet").to_pylist()
    mlp = json.loads((work / "mlp.json").read_text())
    print(f"synth: {_time(work / 'synth.time')[0]:.1f} s, max RSS {_time(work / 'synth.time')[1]:.2f} GiB")
    for k in (4, 8):
        path = work / f"partition-k{k}.time"
        if path.exists():
            s, rss = _time(path)
            print(f"partition k = {k}: {s:.1f} s ({60e6 / s / 1e6:.2f}M edges/s), max RSS {rss:.2f} GiB")
    print(f"MLP on the features alone: test {mlp['test_at_best_val']:.4f} at its best validation "
          f"{mlp['best_val']:.4f} (epoch {mlp['best_epoch']} of {mlp['epochs']}; every validation and test node)\n")
    central = next((r for r in rows if r["strategy"] == "centralized"), None)
    print("| k | strategy | test at best val | best val | best val epoch | stopped at epoch | "
          "modelled s to 95 % @10G | to 99 % @10G | slowest-rank CPU s | wall s / epoch | "
          "seeds / cluster CPU s | − centralized (points) |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        epochs = float(r["epochs"]) or 1.0
        compute = r.get("compute_s")
        seeds = _seeds(work, r)
        rate = seeds * epochs / (r["k"] * compute) if compute and seeds else float("nan")
        gap = 100 * (r["test_at_best_val"] - central["test_at_best_val"]) if central else float("nan")
        cells = [r["k"], r["strategy"], f"{r['test_at_best_val']:.4f}", f"{r['best_val']:.4f}", r["best_val_epoch"],
                 r["stop_epoch"], _s(r.get("cluster_s_to_95_10gbit")), _s(r.get("cluster_s_to_99_10gbit")),
                 _s(compute), f"{r['train_seconds'] / epochs:.0f}", f"{rate:.0f}", f"{gap:+.2f}"]
        print("| " + " | ".join(str(c) for c in cells) + " |")
    print("\n| k | strategy | peak RSS MiB/rank mean | max | eval / train peak (max) | "
          "MiB/rank/epoch mean | max | eval MiB/rank/eval |")
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        cells = [r["k"], r["strategy"], _s(r.get("peak_rss_mib_mean"), 0), _s(r.get("peak_rss_mib_max"), 0),
                 _s(r.get("eval_peak_ratio_max"), 3), _s(r["bytes_per_epoch"] / 2**20, 2),
                 _s(r["bytes_per_epoch_max"] / 2**20, 2), _s(r["eval_bytes_per_eval"] / 2**20, 2)]
        print("| " + " | ".join(str(c) for c in cells) + " |")


def _s(value, digits: int = 1) -> str:
    return "not reached" if value is None else f"{float(value):,.{digits}f}"


if __name__ == "__main__":
    main(Path(sys.argv[1]))
