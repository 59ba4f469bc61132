"""Time ``asepr verify`` before and after, alternating, and write results.csv / results.md.

Each run is ``flock -x LOCK /usr/bin/time -v asepr verify OUT`` from ``/tmp`` (the
exclusive lock waits until no other heavy job holds the shared lock; ``--shared`` takes
the shared lock instead, for runs beside other jobs; their ``cpu_s`` against their
``wall_s`` then shows how much the other work slowed them). Rows are appended to the CSV as
they are measured, and results.md is rewritten from the whole CSV. "before" runs the same command with ``PYTHONPATH`` set to
a worktree of the commit before the change. A row also gives the in-process time of
``verify_output`` (the stage line it logs), which leaves out the CLI's start-up.

Usage (see README.md)::

    python docs/results/verify/measure.py --old-tree /work/scratch/verify/wt-old \\
        --lock /work/scratch/cpu.lock --repeat 2 /tmp/o50 /work/scratch/verify/o20
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import re
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent

_TIME_FIELDS = {
    "wall_s": r"Elapsed \(wall clock\) time \(h:mm:ss or m:ss\): (\S+)",
    "user_s": r"User time \(seconds\): (\S+)",
    "sys_s": r"System time \(seconds\): (\S+)",
    "peak_rss_mib": r"Maximum resident set size \(kbytes\): (\S+)",
}


def _seconds(clock: str) -> float:
    parts = [float(p) for p in clock.split(":")]
    return sum(p * 60 ** i for i, p in enumerate(reversed(parts)))


def run_once(version: str, out: str, old_tree: str, lock: str, mode: str) -> dict:
    env = dict(os.environ)
    if version == "before":
        env["PYTHONPATH"] = old_tree
    else:
        env.pop("PYTHONPATH", None)
    cmd = ["flock", mode, lock, "/usr/bin/time", "-v", "asepr", "verify", out, "-v"]
    res = subprocess.run(cmd, cwd="/tmp", env=env, capture_output=True, text=True)
    text = res.stdout + res.stderr
    row = {"version": version, "output": out, "lock": mode, "exit": res.returncode}
    for key, pattern in _TIME_FIELDS.items():
        value = re.search(pattern, text).group(1)
        row[key] = _seconds(value) if key == "wall_s" else float(value)
    row["peak_rss_mib"] = round(row["peak_rss_mib"] / 1024, 1)
    row["cpu_s"] = round(row["user_s"] + row["sys_s"], 2)
    stage = re.search(r"stage verify: ([\d.]+) s", text)
    row["verify_output_s"] = float(stage.group(1)) if stage else None
    edges = int(json.loads((Path(out) / "manifest.json").read_text())["num_edges"])
    row["edges"] = edges
    row["edges_per_s"] = round(edges / row["wall_s"])
    timings = dict(re.findall(r"verify ([a-z_ ,]+): ([\d.]+) s", text))
    row["task_seconds"] = json.dumps({k: float(v) for k, v in timings.items()})
    if res.returncode != 0:
        print(text[-3000:], file=sys.stderr)
    return row


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("outputs", nargs="+")
    p.add_argument("--old-tree", required=True, help="worktree of the commit before the change")
    p.add_argument("--lock", required=True)
    p.add_argument("--repeat", type=int, default=2)
    p.add_argument("--shared", action="store_true", help="take the shared lock (runs beside other jobs)")
    p.add_argument("--csv", default=str(HERE / "results.csv"))
    args = p.parse_args()
    path = Path(args.csv)
    for out in args.outputs:
        for _ in range(args.repeat):
            for version in ("before", "after"):
                row = run_once(version, out, args.old_tree, args.lock, "-s" if args.shared else "-x")
                print(json.dumps(row), flush=True)
                new = not path.exists()
                with path.open("a", newline="") as fh:
                    writer = csv.DictWriter(fh, fieldnames=list(row))
                    if new:
                        writer.writeheader()
                    writer.writerow(row)
    write_table(path)


def write_table(path: Path) -> None:
    """results.md: every row of the CSV, in order."""
    with path.open() as fh:
        rows = list(csv.DictReader(fh))
    cols = ["version", "output", "lock", "wall_s", "verify_output_s", "user_s", "sys_s", "cpu_s",
            "peak_rss_mib", "edges", "edges_per_s", "exit"]
    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    lines += ["| " + " | ".join(str(r[c]) for c in cols) + " |" for r in rows]
    path.with_suffix(".md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
