"""Collect run.sh's runs (batches of 1,024) beside train-link-scaffold's (batches of 4,096).

Usage: python collect.py WORK > table.md
Copies each run's metrics.csv of WORK/ac-b1024 into metrics/ (``scaffoldb256-s0``: batches
of 256 per rank), then prints the per-run table and the comparisons of the test MRR at
the best validation point, per seed and on the mean: the same batch for both, each
strategy at its better batch, and the same global batch (centralized 4,096 against
4 ranks of 1,024; 1,024 against 4 × 256).
"""
from __future__ import annotations

import importlib.util
import re
import shutil
import statistics
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
BATCH_DIRS = {1024: "ac-b1024", 4096: "ac"}


def _scaffold_collect():
    """``../train-link-scaffold/collect.py``, whose ``summary`` reads a run here too."""
    path = HERE.parent / "train-link-scaffold" / "collect.py"
    spec = importlib.util.spec_from_file_location("train_link_scaffold_collect", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


summary = _scaffold_collect().summary


def load(work: Path) -> dict[tuple[str, int, int], dict]:
    """(strategy, batch, seed) -> summary, for the complete 80-epoch runs."""
    out = HERE / "metrics"
    out.mkdir(exist_ok=True)
    runs = {}
    for batch, sub in BATCH_DIRS.items():
        for run in sorted((work / sub).glob("*-s*")):
            m = re.fullmatch(r"(central|scaffold)(?:b(\d+))?-s(\d+)", run.name)
            if not m or not (run / "metrics.csv").exists():
                continue
            run_batch = int(m.group(2) or batch)
            s = summary(run)
            if s["epochs"] != 80:
                continue
            if batch == 1024:
                shutil.copy(run / "metrics.csv", out / f"ac-{run.name}.csv")
            runs[(m.group(1), run_batch, int(m.group(3)))] = s
    return runs


def compare(runs: dict, title: str, a: tuple[str, int], b: tuple[str, int]) -> None:
    """One row: strategy/batch ``a`` against the centralized ``b``, per seed and on the mean."""
    seeds = sorted(sd for (st, bt, sd) in runs if (st, bt) == a and (*b, sd) in runs)
    if not seeds:
        print(f"| {title} | (runs missing) | | | |")
        return
    ta = [runs[(*a, sd)]["test"] for sd in seeds]
    tb = [runs[(*b, sd)]["test"] for sd in seeds]
    gaps = [x / y - 1 for x, y in zip(ta, tb)]
    print(f"| {title} | {' / '.join(f'{x:.3f}' for x in ta)} | {' / '.join(f'{x:.3f}' for x in tb)} | "
          f"**{100 * (statistics.mean(ta) / statistics.mean(tb) - 1):+.1f} %** | {100 * min(gaps):+.1f} % |")


def main(work: Path) -> None:
    runs = load(work)
    print("| strategy | batch | seed | loss first → last | best val MRR (epoch) | test MRR at best val | "
          "final test |")
    print("|---|---|---|---|---|---|---|")
    for (strat, batch, seed), s in sorted(runs.items()):
        print(f"| {strat} | {batch} | {seed} | {s['loss_first']:.3f} → {s['loss']:.3f} | {s['best_val']:.3f} "
              f"({s['best_epoch']}) | **{s['test']:.3f}** | {s['final_test']:.3f} |")
    print("\n| comparison | ASEPR (`avg+scaffold`), seeds 0 / 1 / 2 | centralized, seeds 0 / 1 / 2 | "
          "vs centralized, mean | worst seed |")
    print("|---|---|---|---|---|")
    compare(runs, "same batch, 1,024", ("scaffold", 1024), ("central", 1024))
    compare(runs, "same batch, 4,096", ("scaffold", 4096), ("central", 4096))
    compare(runs, "same global batch (4 × 1,024 against 4,096)", ("scaffold", 1024), ("central", 4096))
    compare(runs, "same global batch (4 × 256 against 1,024)", ("scaffold", 256), ("central", 1024))
    best = {}  # among the batches run on all 3 seeds
    for strat in ("central", "scaffold"):
        tests = {bt: [s["test"] for (st, b, _), s in runs.items() if (st, b) == (strat, bt)] for bt in (256, 1024, 4096)}
        means = {bt: statistics.mean(t) for bt, t in tests.items() if len(t) >= 3}
        if means:
            best[strat] = max(means, key=means.get)
    if len(best) == 2:
        compare(runs, f"each at its better batch of those run on 3 seeds (ASEPR {best['scaffold']:,}, centralized {best['central']:,})",
                ("scaffold", best["scaffold"]), ("central", best["central"]))


if __name__ == "__main__":
    main(Path(sys.argv[1]))
