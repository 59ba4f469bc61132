"""Redraw a bench-train directory's plots from its train_rounds.parquet with the current
plotting code (one line per seed): python docs/results/train-scaffold/headline-unbounded/replot.py [DIR]
(from the repository root; DIR defaults to this script's directory).

The benchmark's own plots joined the seeds of a strategy into one line; the curves
themselves are the benchmark's, unchanged."""

import sys
from pathlib import Path

import pyarrow.parquet as pq

from asepr.workflows.bench.train import plot_curves

here = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).parent
curves = pq.read_table(here / "train_rounds.parquet").to_pylist()
for dataset in dict.fromkeys(c["dataset"] for c in curves):
    mine = [c for c in curves if c["dataset"] == dataset]
    central = [{**c, "label": "centralized"} for c in mine if c["strategy"] == "centralized"]
    for k in sorted({c["k"] for c in mine if c["strategy"] != "centralized"}):
        runs = [{**c, "label": c["strategy"]} for c in mine if c["k"] == k and c["strategy"] != "centralized"]
        plot_curves(central + runs, here, f"train-{dataset}-k{k}", f"{dataset}, k={k}", mine[0]["metric"])
