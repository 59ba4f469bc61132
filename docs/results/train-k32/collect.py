"""Print the k = 32 accuracy and memory tables from the `asepr bench train` outputs of commands.sh.

usage: python collect.py OUT_ROOT
  OUT_ROOT/coauthor-physics/{auto,auto-s12}: the k = 32 runs; OUT_ROOT/coauthor-physics/{central,
  central-s12}: the centralized runs of ../train-k16/ (same graph, protocol and seeds).
The time-to-accuracy table is ../train-k16/collect.py's, run on the same OUT_ROOT (commands.sh).
"""

from __future__ import annotations

import sys
from pathlib import Path
from statistics import mean

import pyarrow.parquet as pq

DATASET = "coauthor-physics"
RUNS = ("central", "central-s12", "auto", "auto-s12")


def _load(root: Path):
    """``(run name, summary row, its curve rows)`` of every finished run."""
    for name in RUNS:
        path = root / DATASET / name / "train.parquet"
        if not path.exists():
            continue
        curves = pq.read_table(path.parent / "train_rounds.parquet").to_pylist()
        for r in pq.read_table(path).to_pylist():
            yield name, r, [c for c in curves if c["strategy"] == r["strategy"] and c["seed"] == r["seed"]
                            and c["k"] == r["k"]]


def _first_epoch(curve, target: float) -> str:
    return str(next((c["epoch"] for c in curve if c["val"] >= target), "not reached"))


def _span(values) -> str:
    return f"{mean(values):.4f} ({min(values):.4f}–{max(values):.4f})"


def main(root: Path) -> None:
    runs = list(_load(root))
    central = [r for _, r, _ in runs if r["strategy"] == "centralized"]
    best = mean(r["best_val"] for r in central)
    print(f"centralized best validation, mean of seeds {sorted(r['seed'] for r in central)}: {best:.4f}\n")
    print("| run | strategy | k | seed | batch per rank | test at best val | best val (epoch) | final test "
          "| epoch at 95 % / 99 % of central's best val | MiB/rank/epoch (max) | eval MiB/rank/eval "
          "| peak RSS MiB/rank mean (max) | eval/train peak | training s (wall, loaded) |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for name, r, curve in runs:
        sizes = [b for b in (r.get("batch_sizes") or []) if b is not None] or [256]
        batch = f"{min(sizes)}" if min(sizes) == max(sizes) else f"{min(sizes)}–{max(sizes)}"
        print(f"| {name} | {r['strategy']} | {r['k']} | {r['seed']} | {batch} | {r['test_at_best_val']:.4f} "
              f"| {r['best_val']:.4f} ({r['best_epoch']}) | {r['final_test']:.4f} "
              f"| {_first_epoch(curve, 0.95 * best)} / {_first_epoch(curve, 0.99 * best)} "
              f"| {r['bytes_per_epoch'] / 2**20:.2f} ({r['bytes_per_epoch_max'] / 2**20:.2f}) "
              f"| {(r['eval_bytes_per_eval'] or 0) / 2**20:.2f} "
              f"| {r['peak_rss_mib_mean']:,.0f} ({r['peak_rss_mib_max']:,.0f}) | {r['eval_peak_ratio_max']:.3f} "
              f"| {r['train_seconds']:.0f} |")
    print("\n| strategy | k | seeds | test at best val, mean (range) | final test, mean (range) | mean − centralized |")
    print("|---|---|---|---|---|---|")
    groups: dict[tuple[str, int], list[dict]] = {}
    for _, r, _ in runs:
        groups.setdefault((r["strategy"], r["k"]), []).append(r)
    base = mean(r["test_at_best_val"] for r in central)
    for (strategy, k), rows in groups.items():
        tests = [r["test_at_best_val"] for r in rows]
        print(f"| {strategy} | {k} | {', '.join(str(r['seed']) for r in rows)} | {_span(tests)} "
              f"| {_span([r['final_test'] for r in rows])} | {100 * (mean(tests) - base):+.2f} points |")


if __name__ == "__main__":
    main(Path(sys.argv[1]))
