"""Redraw this directory's plots from train_rounds.parquet with the current plotting code
(one line per seed): python docs/results/train-headline/replot.py (from the repository root).

The benchmark's own plots (``command.sh``) joined the three seeds of a strategy into one
line; the curves themselves are the benchmark's, unchanged."""

from pathlib import Path

import pyarrow.parquet as pq

from workflows.bench_train import plot_curves

here = Path(__file__).parent
curves = pq.read_table(here / "train_rounds.parquet").to_pylist()
for dataset in dict.fromkeys(c["dataset"] for c in curves):
    mine = [c for c in curves if c["dataset"] == dataset]
    central = [{**c, "label": "centralized"} for c in mine if c["strategy"] == "centralized"]
    for k in sorted({c["k"] for c in mine if c["strategy"] != "centralized"}):
        runs = [{**c, "label": c["strategy"]} for c in mine if c["k"] == k and c["strategy"] != "centralized"]
        plot_curves(central + runs, here, f"train-{dataset}-k{k}", f"{dataset}, k={k}", mine[0]["metric"])
