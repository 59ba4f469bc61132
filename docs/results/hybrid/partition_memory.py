"""`asepr partition -k 16` on the 50M-edge synthetic graph: streaming against the hybrid.

Runs the real command (default workers) with no budget and with a budget of 10 bytes per
edge, one after the other, and records wall seconds, the peak summed RSS of the process
tree (sampled every 50 ms, `asepr.workflows.bench.scale.run_measured`), RF and the hybrid's
figures from the manifest. Writes partition-memory.md beside this file.

Usage: python docs/results/hybrid/partition_memory.py INPUT [SCRATCH]
  (INPUT: `asepr synth INPUT --nodes 5000000 --edges 50000000 --dim 32 --seed 1`)
"""
from __future__ import annotations

import json
import shutil
import sys
import tempfile
import time
from pathlib import Path

from asepr.workflows.bench.scale import run_measured

HERE = Path(__file__).resolve().parent


def main() -> None:
    source = Path(sys.argv[1])
    scratch = Path(tempfile.mkdtemp(dir=sys.argv[2] if len(sys.argv) > 2 else None))
    edges = json.loads((source / "meta.json").read_text())["num_edges"]
    lines = ["# The hybrid in `asepr partition`: peak memory against streaming", "",
             f"Input {source.name} ({edges:,} edges), k = 16, run {time.strftime('%Y-%m-%d %H:%M')}.", "",
             "| run | wall s | peak RSS, process tree (GiB) | RF | kept | held edges | held MiB | threshold |",
             "|---|---|---|---|---|---|---|---|"]
    try:
        for name, extra in (("streaming", []), ("hybrid, 10 B/edge", ["--memory-budget", str(10 * edges)])):
            out = scratch / "out"
            cmd = ["asepr", "partition", str(source), str(out), "-k", "16", "-q", "--overwrite", *extra]
            wall, peak = run_measured(cmd, scratch / "log.txt")
            m = json.loads((out / "manifest.json").read_text())["metrics"]
            h = m.get("hybrid", {})
            kept = m.get("two_phase_fallback", {}).get("chosen", "")
            lines.append(f"| {name} | {wall:.1f} | {peak / 2**30:.2f} | {m['replication_factor']:.3f} | {kept} | "
                         f"{h.get('held_edges', 0):,} | {h.get('held_bytes', 0) / 2**20:.0f} | "
                         f"{h.get('threshold', '')} |")
            shutil.rmtree(out)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    (HERE / "partition-memory.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
