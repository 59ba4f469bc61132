"""Peak RSS of `asepr partition -k 16` when the edges double at a fixed vertex count.

Makes two synthetic graphs with 2M vertices and 10M / 20M edges (d = 32, seed 1) under
SCRATCH, partitions each with the default settings (real command, default workers) and
records wall seconds and the peak summed RSS of the process tree
(`asepr.workflows.bench.scale.run_measured`). Writes edge-doubling.md beside this file.

Usage: python docs/results/edge-doubling/run.py SCRATCH
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
    scratch = Path(tempfile.mkdtemp(dir=sys.argv[1]))
    lines = ["# Peak RSS when the edges double (|V| fixed at 2M, k = 16)", "",
             f"Run {time.strftime('%Y-%m-%d %H:%M')}. "
             "`asepr synth IN --nodes 2000000 --edges E --dim 32 --seed 1`, then "
             "`asepr partition IN OUT -k 16 -q`.", "",
             "| edges | wall s | peak RSS, process tree (GiB) | RF | kernel edges/s |", "|---|---|---|---|---|"]
    peaks = []
    try:
        for edges in (10_000_000, 20_000_000):
            source, out = scratch / f"in-{edges}", scratch / "out"
            run_measured(["asepr", "synth", str(source), "--nodes", "2000000", "--edges", str(edges), "--dim", "32",
                          "--seed", "1", "-q"], scratch / "synth.log")
            wall, peak = run_measured(["asepr", "partition", str(source), str(out), "-k", "16", "-q", "--overwrite"],
                                      scratch / "partition.log")
            manifest = json.loads((out / "manifest.json").read_text())
            kernel = manifest["timings"].get("assignment kernel", float("nan"))
            lines.append(f"| {edges:,} | {wall:.1f} | {peak / 2**30:.2f} | "
                         f"{manifest['metrics']['replication_factor']:.3f} | {edges / kernel:,.0f} |")
            peaks.append(peak)
            shutil.rmtree(out)
            shutil.rmtree(source)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    lines += ["", f"Peak RSS grows {100 * (peaks[1] / peaks[0] - 1):.1f} % when the edges double."]
    (HERE / "edge-doubling.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
