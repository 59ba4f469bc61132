"""Summarise the alpha/beta sweep on the tuning set (writes sweep.md beside this file).

Usage: python docs/results/asep-tuning/summarize.py
"""
from pathlib import Path

import pandas as pd

HERE = Path(__file__).resolve().parent
d = pd.concat([pd.read_csv(HERE / "sweep.csv"), pd.read_csv(HERE / "sweep2.csv")]).drop_duplicates(
    ["dataset", "order", "k", "variant"])
# With the two-phase fallback ASEP keeps the stream with fewer replicas: min(own, 2PS-HDRF).
d["with_fallback"] = d["ratio"].clip(upper=1.0)
g = d.groupby("variant").agg(
    cells=("ratio", "size"), own_mean=("ratio", "mean"), own_max=("ratio", "max"),
    own_wins=("ratio", lambda x: int((x <= 1.0).sum())), fallback_mean=("with_fallback", "mean"),
).sort_values("fallback_mean")
lines = ["# ASEP weight sweep on the tuning set (amazon-computers, coauthor-physics)", "",
         "RF of ASEP's own stream / RF of 2PS-HDRF (this project's faithful one) on the streams of "
         "`asepr bench partition`, both orders, k = 4, 8, 16, 32 (16 cells per row). "
         "`fallback_mean` is the mean of min(own, 1): ASEP with the two-phase fallback.", "",
         "| alpha-beta | cells | own mean | own max | own <= 2PS-HDRF | with fallback, mean |",
         "|---|---|---|---|---|---|"]
for name, r in g.iterrows():
    lines.append(f"| {name} | {int(r.cells)} | {r.own_mean:.4f} | {r.own_max:.4f} | {int(r.own_wins)} | {r.fallback_mean:.4f} |")
(HERE / "sweep.md").write_text("\n".join(lines) + "\n")
print("\n".join(lines))
