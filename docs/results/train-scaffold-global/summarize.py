"""Print the tables of README.md from the runs' train.parquet files.

Run from this directory: `python summarize.py`. The path-estimate baselines are the runs
of ../train-scaffold (its sources: ../asep-tuning/training/tuning-k8-a0.5 for coauthor-cs
and amazon-photo, fb-mem0 for facebook-pagepage, ../asep-tuning/training/report-k8-a0.5
for coauthor-physics); the same partitions, seeds and protocol.
"""
from __future__ import annotations

from pathlib import Path

import pandas as pd

HERE = Path(__file__).parent
OLD = HERE / "../train-scaffold"
TUNING = ["coauthor-cs", "amazon-photo", "facebook-pagepage"]
BASE = {"tuning": HERE / "../asep-tuning/training/tuning-k8-a0.5", "report": HERE / "../asep-tuning/training/report-k8-a0.5"}
VARIANTS = {  # name -> run directories (tuning graphs), run directory (coauthor-physics seed 0)
    "path (default), no gate": ([BASE["tuning"], OLD / "fb-mem0"], BASE["report"]),
    "path, gate (`--scaffold-shrink`)": ([OLD / "tune-shrink", OLD / "fb-shrink"], OLD / "diag-shrink"),
    "global, full batch (`--scaffold-batches 0`)": (["tune-global-full", "fb-global-full"], "diag-global-full"),
    "global, full batch, clip 0 (unbounded)": (["tune-global-full-clip0", "fb-global-full-clip0"],
                                               "diag-global-full-clip0"),
    "global, 10 mini-batches": (["tune-global-b10", "fb-global-b10"], "diag-global-b10"),
    "path, tail-weighted segments (diagnostic patch)": (["tune-tail", "fb-tail"], "diag-tail-coauthor-physics"),
}


def _rows(run, strategy="avg+scaffold") -> pd.DataFrame:
    path = HERE / run / "train.parquet"
    if not path.exists():
        return pd.DataFrame(columns=["dataset", "k", "seed", "strategy", "test_at_best_val"])
    df = pd.read_parquet(path)
    return df[df.strategy == strategy]


def _physics(run, strategy="avg+scaffold") -> float:
    if run is None:
        return float("nan")
    p = _rows(run, strategy)
    p = p[(p.dataset == "coauthor-physics") & (p.seed == 0) & (p.k == 8)]
    return float(p.test_at_best_val.iloc[0]) if len(p) else float("nan")


def _line(name: str, cells: pd.Series, phys: float) -> str:
    mean = cells.reindex(TUNING).mean() if all(g in cells for g in TUNING) else float("nan")
    return (f"| {name} | " + " | ".join(f"{cells.get(g, float('nan')):.4f}" for g in TUNING)
            + f" | {mean:.4f} | {phys:.4f} |")


def tuning_table() -> None:
    print("| variant (avg+scaffold, k = 8) | " + " | ".join(TUNING) + " | mean of 3 | coauthor-physics seed 0 |")
    print("|---" * 6 + "|")
    avg = pd.concat([_rows(BASE["tuning"], "avg"), _rows(OLD / "fb-mem0", "avg")])
    print(_line("`avg` alone", avg.groupby("dataset").test_at_best_val.mean(), _physics(BASE["report"], "avg")))
    for name, (runs, physics) in VARIANTS.items():
        both = pd.concat([_rows(r) for r in runs])
        print(_line(name, both.groupby("dataset").test_at_best_val.mean(), _physics(physics)))


def headline_table(title: str, runs: list[str]) -> None:
    parts = [pd.read_parquet(HERE / run / "train.parquet") for run in runs if (HERE / run / "train.parquet").exists()]
    if not parts:
        return
    df = pd.concat(parts)
    path_runs = pd.read_parquet(HERE / "../train-scaffold/headline-ungated/train.parquet")
    # centralized, avg and fds: the runs of ../train-scaffold/headline-ungated, reused here.
    others = path_runs[path_runs.strategy != "avg+scaffold"]
    both = pd.concat([df[df.strategy == "avg+scaffold"], others])
    cells = both.groupby(["dataset", "k", "strategy"]).test_at_best_val.agg(["mean", "count"])
    old = path_runs[path_runs.strategy == "avg+scaffold"].groupby(["dataset", "k"]).test_at_best_val.mean()
    print()
    print(f"{title}:")
    print()
    print("| cell | this `avg+scaffold` | seeds | path (`../train-scaffold/headline-ungated`) | fds | centralized | avg | "
          "− fds | − centralized |")
    print("|---" * 9 + "|")
    mine = df[df.strategy == "avg+scaffold"].groupby(["dataset", "k"]).size()
    for dataset, k in mine.index:
        def get(strategy):  # centralized is recorded at k = 1
            return cells["mean"].get((dataset, 1 if strategy == "centralized" else k, strategy), float("nan"))
        g = get("avg+scaffold")
        n = int(cells["count"].get((dataset, k, "avg+scaffold"), 0))
        print(f"| {dataset} k = {k} | {g:.4f} | {n} | {old.get((dataset, k), float('nan')):.4f} | {get('fds'):.4f} "
              f"| {get('centralized'):.4f} | {get('avg'):.4f} | {100 * (g - get('fds')):+.2f} "
              f"| {100 * (g - get('centralized')):+.2f} |")


if __name__ == "__main__":
    tuning_table()
    headline_table("global, 10 mini-batches", ["headline-b10", "headline-b10-k4"])
    headline_table("global, full batch", ["headline-full"])
    headline_table("path, tail-weighted segments (diagnostic patch tail-weight.patch)",
                   ["diag-tail-coauthor-physics", "diag-tail-amazon-computers", "tail-report-seeds-1-2"])
