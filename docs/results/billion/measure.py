"""Run one command and record its wall time, its process tree's CPU time and peak RSS
(overall and per logged stage).

    python docs/results/billion/measure.py NAME OUT.json -- COMMAND ...

Uses ``asepr.workflows.bench.scale.run_measured``: the summed RSS of the command and all its
descendants (Dask workers included), sampled every 50 ms. The command's output goes to
``OUT.log``. A stage's peak is the largest sample between its start and its end, read
from the command's ``stage NAME: S s`` log lines (``-v``), which are logged when the
stage ends.
"""

from __future__ import annotations

import json
import re
import sys
import time
from datetime import datetime
from pathlib import Path

from asepr.workflows.bench.scale import children_cpu_seconds, run_measured

_STAGE = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}) INFO \S+: stage ([^:]+): ([0-9.]+) s")


def stage_peaks(log_text: str, samples: list[tuple[float, int]]) -> dict[str, dict[str, float]]:
    """``{stage: {"seconds", "peak_rss_gib"}}`` from the log's stage lines and the samples."""
    out: dict[str, dict[str, float]] = {}
    for line in log_text.splitlines():
        m = _STAGE.match(line)
        if not m:
            continue
        end = datetime.strptime(m.group(1), "%Y-%m-%d %H:%M:%S,%f").timestamp()
        seconds = float(m.group(3))
        window = [rss for t, rss in samples if end - seconds - 0.05 <= t <= end + 0.05]
        out[m.group(2)] = {"seconds": seconds,
                           "peak_rss_gib": round(max(window) / 2**30, 3) if window else float("nan")}
    return out


def main(argv: list[str]) -> int:
    name, out = argv[0], Path(argv[1])
    cmd = argv[argv.index("--") + 1:]
    cpu_before = children_cpu_seconds()
    started = time.strftime("%Y-%m-%d %H:%M:%S")
    samples: list[tuple[float, int]] = []
    log_path = out.with_suffix(".log")
    wall, peak = run_measured(cmd, log_path, samples)
    record = {
        "name": name, "command": " ".join(cmd), "started": started, "wall_s": round(wall, 1),
        "peak_rss_gib": round(peak / 2**30, 3), "cpu_s": round(children_cpu_seconds() - cpu_before, 1),
        "stages": stage_peaks(log_path.read_text(errors="replace"), samples),
    }
    out.write_text(json.dumps(record, indent=2))
    print(out.read_text())
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
