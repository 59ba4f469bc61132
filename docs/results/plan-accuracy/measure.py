"""The plan of ``asepr partition`` against the run it planned, one row per input.

For each input: ``asepr partition IN OUT -k K --dry-run`` prints the plan (peak memory,
committed disk, the replication factor and how it was estimated); then ``asepr
partition IN OUT -k K -q --ignore-plan`` runs as a child process whose own high-water
mark (``VmHWM`` of ``/proc/PID/status``) is read every 20 ms until it exits, and the
committed output is measured with ``du`` (blocks used, and apparent bytes). On a
machine of up to two cores the run's stages execute on threads of that one process
(``asepr.workflows.dask_client.default_workers``), so its VmHWM is the run's whole peak.

    python docs/results/plan-accuracy/measure.py --work DIR -k 8 --out table.csv NAME=INPUT ...
"""

from __future__ import annotations

import argparse
import csv
import json
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

from asepr.storage.resources import vm_hwm_bytes

UNITS = {"B": 1, "KiB": 2**10, "MiB": 2**20, "GiB": 2**30, "TiB": 2**40}
SIZE = r"([\d.]+ (?:B|KiB|MiB|GiB|TiB))"
MIB = 2**20


def to_bytes(text: str) -> float:
    value, unit = text.split()
    return float(value) * UNITS[unit]


def parse_plan(stdout: str) -> dict:
    """Peak memory, committed disk and the RF line of a printed plan."""
    found: dict = {}
    for line in stdout.splitlines():
        m = re.match(r"\s+RF planned ([\d.]+) \((.*)\)$", line)
        if m:
            found["rf"], found["rf_source"] = float(m.group(1)), m.group(2)
        m = re.search(rf"peak memory {SIZE} \(stage (.+?)\); disk {SIZE} staged .*?, {SIZE} committed", line)
        if m:
            found["peak"], found["peak_stage"] = to_bytes(m.group(1)), m.group(2)
            found["staging"], found["committed"] = to_bytes(m.group(3)), to_bytes(m.group(4))
    if "peak" not in found:
        raise SystemExit(f"no plan in the output:\n{stdout}")
    return found


def run_measured(cmd: list[str]) -> int:
    """Run ``cmd``; the largest VmHWM read while it ran."""
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    peak = 0
    while proc.poll() is None:
        peak = max(peak, vm_hwm_bytes(proc.pid) or 0)
        time.sleep(0.02)
    err = proc.stderr.read()
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed ({proc.returncode}):\n{err}")
    return peak


def du(path: Path, apparent: bool) -> int:
    args = ["du", "-s", "--block-size=1"] + (["--apparent-size"] if apparent else []) + [str(path)]
    return int(subprocess.run(args, capture_output=True, text=True, check=True).stdout.split()[0])


def measure(name: str, inp: str, work: Path, k: int) -> dict:
    out = work / f"{name}-k{k}"
    shutil.rmtree(out, ignore_errors=True)
    base = ["asepr", "partition", inp, str(out), "-k", str(k)]
    plan = parse_plan(subprocess.run(base + ["--dry-run"], capture_output=True, text=True, check=True).stdout)
    peak = run_measured(base + ["-q", "--ignore-plan", "--no-progress"])
    manifest = json.loads((out / "manifest.json").read_text())
    used, apparent = du(out, apparent=False), du(out, apparent=True)
    shutil.rmtree(out, ignore_errors=True)
    return {
        "input": name, "nodes": manifest["num_nodes"], "edges": manifest["num_edges"],
        "feat_dim": manifest["feat_dim"], "k": k,
        "rf_planned": plan["rf"], "rf_measured": round(manifest["metrics"]["replication_factor"], 3),
        "peak_planned_mib": round(plan["peak"] / MIB, 1), "peak_measured_mib": round(peak / MIB, 1),
        "peak_ratio": round(plan["peak"] / peak, 2),
        "committed_planned_mib": round(plan["committed"] / MIB, 2),
        "committed_du_mib": round(used / MIB, 2), "committed_apparent_mib": round(apparent / MIB, 2),
        "committed_ratio": round(plan["committed"] / used, 2),
        "rf_source": plan["rf_source"],
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("inputs", nargs="+", metavar="NAME=INPUT")
    p.add_argument("--work", required=True, type=Path, help="scratch directory for the outputs")
    p.add_argument("-k", type=int, default=8)
    p.add_argument("--out", type=Path, required=True, help="the CSV table to write")
    args = p.parse_args()
    args.work.mkdir(parents=True, exist_ok=True)
    rows = []
    for item in args.inputs:
        name, _, inp = item.partition("=")
        row = measure(name, inp, args.work, args.k)
        print(", ".join(f"{k}={v}" for k, v in row.items()), file=sys.stderr, flush=True)
        rows.append(row)
    with open(args.out, "w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)


if __name__ == "__main__":
    main()
