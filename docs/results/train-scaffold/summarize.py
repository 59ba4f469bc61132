"""Print the scaffold-variant tables of README.md from the runs' train.parquet files.

Run from this directory: `python summarize.py`. The gate-off, memory-0 baseline of the
tuning graphs coauthor-cs and amazon-photo is ../asep-tuning/training/tuning-k8-a0.5 (the
same partitions, seeds and protocol), and of coauthor-physics ../asep-tuning/training/report-k8-a0.5.
"""
from __future__ import annotations

from pathlib import Path

import pandas as pd

HERE = Path(__file__).parent
TUNING = ["coauthor-cs", "amazon-photo", "facebook-pagepage"]
BASE = {"tuning": HERE / "../asep-tuning/training/tuning-k8-a0.5", "report": HERE / "../asep-tuning/training/report-k8-a0.5"}
VARIANTS = {  # name -> run directories (tuning graphs), run directory (coauthor-physics seed 0)
    "memory 0, no gate (before)": ([BASE["tuning"], "fb-mem0"], BASE["report"]),
    "memory 0.5": (["tune-mem0.5", "fb-mem0.5"], "diag-mem0.5"),
    "memory 0.8": (["tune-mem0.8"], None),
    "memory 0.9": (["tune-mem0.9", "fb-mem0.9"], "diag-mem0.9"),
    "clip 0.25 (instead of 0.5)": ([], "diag-clip0.25"),
    "clip 0.1": ([], "diag-clip0.1"),
    "gate (--scaffold-shrink)": (["tune-shrink", "fb-shrink"], "diag-shrink"),
}


def _rows(run, strategy="avg+scaffold") -> pd.DataFrame:
    df = pd.read_parquet(HERE / run / "train.parquet")
    return df[df.strategy == strategy]


def main() -> None:
    avg = pd.concat([_rows(BASE["tuning"], "avg"), _rows("fb-mem0", "avg")])
    print("| variant (avg+scaffold, k = 8) | " + " | ".join(TUNING) + " | mean of 3 | coauthor-physics seed 0 |")
    print("|---" * 6 + "|")
    cells = avg.groupby("dataset").test_at_best_val.mean()
    p = _rows(BASE["report"], "avg")
    phys = float(p[(p.dataset == "coauthor-physics") & (p.seed == 0) & (p.k == 8)].test_at_best_val.iloc[0])
    print("| `avg` alone | " + " | ".join(f"{cells.get(g, float('nan')):.4f}" for g in TUNING)
          + f" | {cells.reindex(TUNING).mean():.4f} | {phys:.4f} |")
    for name, (runs, physics) in VARIANTS.items():
        cells = pd.concat([_rows(r) for r in runs]).groupby("dataset").test_at_best_val.mean() if runs else pd.Series()
        mean = cells.reindex(TUNING).mean() if len(cells) == 3 else float("nan")
        phys = float("nan")
        if physics is not None:
            p = _rows(physics)
            p = p[(p.dataset == "coauthor-physics") & (p.seed == 0) & (p.k == 8)]
            phys = float(p.test_at_best_val.iloc[0])
        print(f"| {name} | " + " | ".join(f"{cells.get(g, float('nan')):.4f}" for g in TUNING)
              + f" | {mean:.4f} | {phys:.4f} |")


if __name__ == "__main__":
    main()
