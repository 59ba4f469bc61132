"""Print the k = 16 tables from the `asepr bench train` outputs of commands.sh.

usage: python collect.py OUT_ROOT [HEADLINE_PARQUET]
  OUT_ROOT/DATASET/RUN/{train.parquet,train_rounds.parquet}, as commands.sh writes them;
  HEADLINE_PARQUET: the headline's train.parquet (../train-headline/train.parquet), for
  the amazon-computers k = 8 cell rerun under the automatic batch size.
"""

from __future__ import annotations

import sys
from pathlib import Path
from statistics import mean

import pyarrow.parquet as pq

from workflows.bench.protocol import protocol_columns

FLAGS = {"base": "", "bs64": "--batch-size 64", "lr02": "--lr 0.02", "fedadam": "--server-opt fedadam",
         "corr": "--reconcile avg+scaffold+corr", "sync5": "--sync-every 5", "slr2": "--server-lr 2",
         "auto": "--batch-size auto (the new default)", "central": "", "central-s12": "--seeds 1 2",
         "auto-s12": "--batch-size auto --seeds 1 2", "k8auto": "-k 8 --seeds 0 1 2 (--batch-size auto)",
         "k8auto-avg": "-k 8 --seeds 0 1 2 (--batch-size auto)",
         "b256": "--batch-size 256 (the previous default)", "k8b256": "-k 8 --batch-size 256"}
#: The graphs the candidates were chosen on; the others are reported only.
TUNING = ("amazon-photo", "coauthor-cs")


def _runs(root: Path):
    """``(dataset, run name, summary rows, curve rows)`` of every finished bench output."""
    for dataset in sorted(p for p in root.iterdir() if p.is_dir()):
        for name in FLAGS:
            path = dataset / name / "train.parquet"
            if path.exists():
                yield (dataset.name, name, pq.read_table(path).to_pylist(),
                       pq.read_table(dataset / name / "train_rounds.parquet").to_pylist())


def _central_best(runs) -> dict[str, float]:
    """Per graph: the centralized runs' best validation accuracy, averaged over their seeds."""
    best: dict[str, list[float]] = {}
    for dataset, _, rows, _ in runs:
        best.setdefault(dataset, []).extend(r["best_val"] for r in rows if r["strategy"] == "centralized")
    return {d: mean(v) for d, v in best.items() if v}


def _curve(curves, r):
    return [c for c in curves if c["strategy"] == r["strategy"] and c.get("seed", r["seed"]) == r["seed"]
            and c.get("k", r["k"]) == r["k"]]


def _batches(r, name: str = "") -> str:
    """The ranks' batch sizes (runs of version 0.1.0 record none: their fixed flag)."""
    sizes = [b for b in (r.get("batch_sizes") or []) if b is not None] or [64 if name == "bs64" else 256]
    lo, hi = min(sizes), max(sizes)
    return (f"{lo}" if lo == hi else f"{lo}–{hi}") + (" (one rank)" if r["strategy"] == "centralized" else "")


def accuracy_table(runs, central) -> None:
    print("| graph | run | flags | strategy | seed | batch per rank | test at best val | best val | final test "
          "| epochs to 95 % of central | MiB/rank/epoch | training s (wall, loaded machine) |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for dataset, name, rows, curves in runs:
        target = 0.95 * central[dataset] if dataset in central else None
        for r in rows:
            if r["k"] not in (1, 16):
                continue
            reached = next((c["epoch"] for c in _curve(curves, r) if target is not None and c["val"] >= target), None)
            label = dataset + ("" if dataset in TUNING else " (report)")
            print(f"| {label} | {name} | `{FLAGS[name]}` | {r['strategy']} | {r['seed']} | {_batches(r, name)} "
                  f"| {r['test_at_best_val']:.4f} | {r['best_val']:.4f} | {r['final_test']:.4f} "
                  f"| {reached if reached is not None else 'not reached'} | {r['bytes_per_epoch'] / 2**20:.2f} "
                  f"| {r['train_seconds']:.0f} |")


def _s(value) -> str:
    return "not reached" if value is None else f"{value:.1f}"


def protocol_table(runs, central) -> None:
    """Modelled cluster time to 95 % / 99 % of centralized's best validation (workflows.bench.protocol)."""
    print("| graph | run | strategy | k | seed | test at best val | best val epoch | compute s "
          "| cluster s to 95 % @10G | cluster s to 99 % @1G | cluster s to 99 % @10G | cluster s to 99 % @100G |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for dataset, name, rows, curves in runs:
        for r in rows:
            mine = _curve(curves, r)
            if not mine or mine[-1].get("compute_s_cum_max") is None or dataset not in central:
                continue  # runs of version 0.1.0 have no CPU-time column
            p = protocol_columns(mine, central[dataset])
            print(f"| {dataset} | {name} | {r['strategy']} | {r['k']} | {r['seed']} | {r['test_at_best_val']:.4f} "
                  f"| {p['best_val_epoch']} | {p['compute_s']:.1f} | {_s(p['cluster_s_to_95_10gbit'])} "
                  f"| {_s(p['cluster_s_to_99_1gbit'])} | {_s(p['cluster_s_to_99_10gbit'])} "
                  f"| {_s(p['cluster_s_to_99_100gbit'])} |")


def headline_table(runs, headline: Path) -> None:
    """The amazon-computers k = 8 headline cell: the headline's runs against the automatic batch."""
    old = [r for r in pq.read_table(headline).to_pylist() if r["dataset"] == "amazon-computers"
           and r["k"] in (1, 8) and (r["partitioner"] in ("asep", "-") or r["strategy"] == "fds")]
    new = [(name, r) for dataset, name, rows, _ in runs if dataset == "amazon-computers" for r in rows if r["k"] == 8]
    print("| amazon-computers, k = 8 | strategy | batch per rank | seeds | test at best val, mean (range) |")
    print("|---|---|---|---|---|")
    groups = {}
    for r in old:
        groups.setdefault(("headline", r["strategy"], _batches(r)), []).append(r)
    for name, r in new:
        groups.setdefault((f"{name} (0.2.0)", r["strategy"], _batches(r, name)), []).append(r)
    for (source, strategy, batch), rows in groups.items():
        tests = [r["test_at_best_val"] for r in rows]
        print(f"| {source} | {strategy} | {batch} | {', '.join(str(r['seed']) for r in rows)} "
              f"| {mean(tests):.4f} ({min(tests):.4f}–{max(tests):.4f}) |")


def main(root: Path, headline: Path | None) -> None:
    runs = list(_runs(root))
    central = _central_best(runs)
    accuracy_table(runs, central)
    print()
    protocol_table(runs, central)
    if headline is not None:
        print()
        headline_table(runs, headline)


if __name__ == "__main__":
    main(Path(sys.argv[1]), Path(sys.argv[2]) if len(sys.argv) > 2 else None)
