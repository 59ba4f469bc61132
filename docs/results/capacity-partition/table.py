"""Tables of run.sh's outputs: shares and replication factors, uniform against capacity-aware.

Usage: python table.py DIR   (DIR: this folder, with inspect/*.json and clustering-cap.csv)
"""

from __future__ import annotations

import csv
import json
import sys
from pathlib import Path

import numpy as np

HERE = Path(sys.argv[1])
SHARES = np.array([0.4, 0.2, 0.2, 0.2])


def load(name: str) -> dict:
    return json.loads((HERE / "inspect" / f"{name}.json").read_text())


def shares(counts) -> np.ndarray:
    counts = np.asarray(counts, dtype=np.float64)
    return counts / counts.sum()


def row(label: str, name: str, uniform: str) -> str:
    m, u = load(name)["metrics"], load(uniform)["metrics"]
    edges, masters = shares(m["loads"]), shares(m["masters"])
    capacity = "capacity" in name
    target = SHARES if capacity else np.full(4, 0.25)
    worst_e = np.abs(edges / target - 1).max()
    worst_m = np.abs(masters / target - 1).max()
    rf, rf_u = m["replication_factor"], u["replication_factor"]
    return (f"| {label} | {'2,1,1,1' if capacity else 'uniform'} | {' / '.join(f'{x:.3f}' for x in edges)} | "
            f"{100 * worst_e:.1f} % | {' / '.join(f'{x:.3f}' for x in masters)} | {100 * worst_m:.1f} % | "
            f"{rf:.4f} | {100 * (rf / rf_u - 1):+.1f} % | {m['one_hop_locality']:.3f} |")


HEAD = ("| run | capacities | edge shares | largest edge miss | master shares | largest master miss | RF | "
        "RF vs uniform | 1-hop locality |\n|---|---|---|---|---|---|---|---|---|")
print("## Done-when runs (asep, k = 4)\n")
print("Misses are relative to each partition's share (0.4 / 0.2 / 0.2 / 0.2, or 0.25 each uniform).\n")
print(HEAD)
for graph in ("amazon-computers", "synth-5m"):
    for stream, prefix in (("asep (default: with the two-phase fallback)", graph), ("asep's own stream", f"{graph}-own")):
        for run in ("uniform", "capacity"):
            print(row(f"{graph}, {stream}", f"{prefix}-{run}", f"{prefix}-uniform"))
print("\n## Every algorithm on amazon-computers (k = 4)\n")
print(HEAD)
for algo in ("hash", "dbh", "greedy", "hdrf", "2ps-l", "2ps-hdrf", "metis", "asep-hybrid", "hdrf-hybrid"):
    for run in ("uniform", "capacity"):
        name = f"amazon-computers-{algo}-{run}"
        if (HERE / "inspect" / f"{name}.json").exists():
            print(row(algo, name, f"amazon-computers-{algo}-uniform"))
cap_rows = list(csv.DictReader((HERE / "clustering-cap.csv").open()))
if cap_rows:
    print("\n## The structural clustering's volume cap with capacities 2,1,1,1\n")
    print("| graph | community volume cap | stream | RF | edge shares | master shares |\n|---|---|---|---|---|---|")
    for r in cap_rows:
        print(f"| {r['graph']} | {r['cap']} | {r['stream']} | {float(r['rf']):.4f} | "
              f"{r['edge_shares'].replace(' ', ' / ')} | {r['master_shares'].replace(' ', ' / ')} |")
