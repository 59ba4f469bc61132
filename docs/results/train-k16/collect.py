"""Print the k = 16 tuning table from the `asepr bench train` outputs of commands.sh.

usage: python collect.py OUT_ROOT   (OUT_ROOT/DATASET/RUN/train.parquet, as commands.sh writes)
"""

from __future__ import annotations

import sys
from pathlib import Path

import pyarrow.parquet as pq

FLAGS = {"base": "", "bs64": "--batch-size 64", "lr02": "--lr 0.02", "fedadam": "--server-opt fedadam",
         "corr": "--reconcile avg+scaffold+corr", "sync5": "--sync-every 5", "slr2": "--server-lr 2"}


def main(root: Path) -> None:
    print("| graph | run | flags | strategy | test at best val | best val | final test | epochs to 95 % of central "
          "| MiB/rank/epoch | training s (wall, loaded machine) |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for dataset in sorted(p for p in root.iterdir() if p.is_dir()):
        base = dataset / "base" / "train.parquet"
        central = [r for r in pq.read_table(base).to_pylist() if r["strategy"] == "centralized"] if base.exists() else []
        target = 0.95 * central[0]["best_val"] if central else None
        for name in FLAGS:
            path = dataset / name / "train.parquet"
            if not path.exists():
                continue
            curves = pq.read_table(dataset / name / "train_rounds.parquet").to_pylist()
            for r in pq.read_table(path).to_pylist():
                # against the base run's centralized target (the candidates ran without centralized)
                mine = [c for c in curves if c["strategy"] == r["strategy"]]
                reached = next((c["epoch"] for c in mine if target is not None and c["val"] >= target), None)
                print(f"| {dataset.name} | {name} | `{FLAGS[name]}` | {r['strategy']} | {r['test_at_best_val']:.4f} | "
                      f"{r['best_val']:.4f} | {r['final_test']:.4f} | {reached if reached is not None else 'not reached'} "
                      f"| {r['bytes_per_epoch'] / 2**20:.2f} | {r['train_seconds']:.0f} |")


if __name__ == "__main__":
    main(Path(sys.argv[1]))
