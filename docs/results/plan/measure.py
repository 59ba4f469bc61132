"""Check the memory and disk plan of ``asepr partition`` against measured peaks.

For each input: run ``/usr/bin/time -v asepr partition IN OUT -k K -v`` (the default
worker setting unless ``--workers`` is given), sample the resident memory of the
whole process tree (the driver and its Dask worker processes, with psutil, every
0.1 s) and the disk used by OUT and by the k-means spill (every 0.5 s), attribute the
samples to stages by the ``stage NAME: ...`` log lines, and compare with the plan the
run printed first. A dry run with ``--plan-rf`` set to the run's measured RF gives the
plan with a known RF. Writes ``plan-vs-measured.csv`` and ``stages.csv``.

    python docs/results/plan/measure.py --work /work/scratch/plan -k 16 IN1 IN2 ...
"""

from __future__ import annotations

import argparse
import csv
import glob
import json
import os
import re
import shutil
import subprocess
import tempfile
import threading
import time
from pathlib import Path

import psutil

HERE = Path(__file__).resolve().parent
UNITS = {"B": 1, "KiB": 2**10, "MiB": 2**20, "GiB": 2**30, "TiB": 2**40}
SIZE = r"([\d.]+ (?:B|KiB|MiB|GiB|TiB))"
ROW = re.compile(rf"^  (.+?)\s+{SIZE}\s+{SIZE}\s+{SIZE}\s+{SIZE}$")
STAGE_END = re.compile(r"stage (.+?): [\d.]+ s, peak RSS")
# Log names of the stages -> the plan's names.
LOG_TO_PLAN = {"attr_cluster": "attribute clustering", "commit": "node map"}


def to_bytes(text: str) -> float:
    value, unit = text.split()
    return float(value) * UNITS[unit]


def parse_plan(stdout: str) -> dict:
    """The plan table printed by ``asepr partition``: per stage (driver, workers, peak, written)."""
    stages, summary = {}, {}
    for line in stdout.splitlines():
        m = ROW.match(line)
        if m and m.group(1).strip() not in ("stage", "total"):
            stages[m.group(1).strip()] = [to_bytes(m.group(i)) for i in range(2, 6)]
        if line.startswith("  RF planned"):
            summary["rf"] = float(line.split()[2])
        m = re.search(rf"disk {SIZE} staged under the output until the commit, {SIZE} committed", line)
        if m:
            summary["staging"], summary["committed"] = to_bytes(m.group(1)), to_bytes(m.group(2))
    return {"stages": stages, **summary}


def dir_bytes(*roots: str) -> int:
    total = 0
    for root in roots:
        for dirpath, _, files in os.walk(root):
            for f in files:
                try:
                    total += os.lstat(os.path.join(dirpath, f)).st_blocks * 512
                except OSError:
                    pass
    return total


def _ctime(path: str) -> float:
    try:
        return os.stat(path).st_ctime
    except OSError:  # removed since it was listed
        return 0.0


class Sampler:
    """RSS of a process tree (driver = the child of ``/usr/bin/time``) and disk of OUT."""

    def __init__(self, time_pid: int, out: str, spill_glob: str):
        self.root = psutil.Process(time_pid)
        self.out, self.spill_glob = out, spill_glob
        self.samples: list[tuple[float, int, int]] = []  # (t, driver, others)
        self.disk_peak = 0
        self.started = time.time() - 1.0
        self.stop = threading.Event()

    def _rss(self) -> tuple[int, int]:
        driver = others = 0
        try:
            children = self.root.children(recursive=True)
        except psutil.Error:  # the run has ended
            return 0, 0
        for proc in children:
            try:
                rss = proc.memory_info().rss
            except psutil.Error:
                continue
            if proc.ppid() == self.root.pid:
                driver += rss
            else:
                others += rss
        return driver, others

    def run(self) -> None:
        last_disk = 0.0
        while not self.stop.is_set():
            now = time.time()
            self.samples.append((now, *self._rss()))
            if now - last_disk >= 0.5:
                # Only this run's spill (other runs may have left theirs).
                spill = [d for d in glob.glob(self.spill_glob) if _ctime(d) >= self.started]
                self.disk_peak = max(self.disk_peak, dir_bytes(self.out, *spill))
                last_disk = now
            time.sleep(0.1)


def run_partition(inp: str, out: str, k: int, workers: int | None) -> dict:
    """One measured run; returns the printed plan, the samples and the stage end times."""
    cmd = ["/usr/bin/time", "-v", "asepr", "partition", inp, out, "-k", str(k), "-v", "--no-progress"]
    if workers is not None:
        cmd += ["--workers", str(workers)]
    spill_glob = os.path.join(tempfile.gettempdir(), "asepr-attr-*")
    start = time.time()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    sampler = Sampler(proc.pid, out, spill_glob)
    ends: list[tuple[float, str]] = []
    err_lines: list[str] = []

    def read_err() -> None:
        for line in proc.stderr:
            err_lines.append(line)
            m = STAGE_END.search(line)
            if m:
                ends.append((time.time(), m.group(1)))

    threads = [threading.Thread(target=sampler.run), threading.Thread(target=read_err)]
    for t in threads:
        t.start()
    stdout = proc.stdout.read()
    proc.wait()
    sampler.stop.set()
    for t in threads:
        t.join()
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed:\n{''.join(err_lines[-30:])}")
    max_rss = next(int(line.split(":")[1]) * 1024 for line in err_lines if "Maximum resident set size" in line)
    return {"plan": parse_plan(stdout), "samples": sampler.samples, "ends": ends, "max_rss": max_rss,
            "disk_peak": sampler.disk_peak, "wall": time.time() - start}


def stage_peaks(samples, ends) -> dict[str, tuple[int, int, int]]:
    """Per stage: the largest driver, others and total RSS among its samples."""
    peaks: dict[str, tuple[int, int, int]] = {}
    i = 0
    for t_end, name in ends:
        name = LOG_TO_PLAN.get(name, name)
        d = o = s = 0
        while i < len(samples) and samples[i][0] <= t_end:
            _, drv, oth = samples[i]
            d, o, s = max(d, drv), max(o, oth), max(s, drv + oth)
            i += 1
        old = peaks.get(name, (0, 0, 0))
        peaks[name] = (max(old[0], d), max(old[1], o), max(old[2], s))
    return peaks


def measure(inp: str, work: Path, k: int, workers: int | None) -> tuple[dict, list[dict]]:
    out = str(work / (Path(inp).name + "-out"))
    shutil.rmtree(out, ignore_errors=True)
    result = run_partition(inp, out, k, workers)
    manifest = json.loads((Path(out) / "manifest.json").read_text())
    rf = manifest["metrics"]["replication_factor"]
    committed = dir_bytes(out)
    shutil.rmtree(out, ignore_errors=True)
    known = subprocess.run(["asepr", "partition", inp, out, "-k", str(k), "--dry-run", "--plan-rf", f"{rf:.4f}"]
                           + ([] if workers is None else ["--workers", str(workers)]),
                           capture_output=True, text=True, check=True)
    known_plan = parse_plan(known.stdout)
    plan = result["plan"]
    measured_peak = max(d + o for _, d, o in result["samples"])
    peak = max(v[2] for v in plan["stages"].values())
    known_peak = max(v[2] for v in known_plan["stages"].values())
    mib, gib = 2**20, 2**30
    row = {
        "edges": manifest["num_edges"], "nodes": manifest["num_nodes"], "k": k,
        "workers": "default" if workers is None else workers,
        "predicted_peak_mib": round(peak / mib), "measured_peak_mib": round(measured_peak / mib),
        "ratio": round(peak / measured_peak, 3),
        "rf_planned": plan["rf"], "rf_measured": round(rf, 3),
        "predicted_peak_known_rf_mib": round(known_peak / mib), "ratio_known_rf": round(known_peak / measured_peak, 3),
        "predicted_driver_mib": round(max(v[0] for v in plan["stages"].values()) / mib),
        "measured_driver_mib": round(result["max_rss"] / mib),
        "predicted_disk_gib": round(plan["staging"] / gib, 2), "predicted_disk_known_rf_gib":
            round(known_plan["staging"] / gib, 2), "measured_disk_peak_gib": round(result["disk_peak"] / gib, 2),
        "predicted_committed_gib": round(plan["committed"] / gib, 2),
        "predicted_committed_known_rf_gib": round(known_plan["committed"] / gib, 2),
        "measured_committed_gib": round(committed / gib, 2), "wall_s": round(result["wall"], 1),
    }
    peaks = stage_peaks(result["samples"], result["ends"])
    stages = [{"edges": row["edges"], "stage": name,
               "predicted_driver_mib": round(v[0] / mib), "measured_driver_mib": round(peaks.get(name, (0,))[0] / mib),
               "predicted_workers_mib": round(v[1] / mib),
               "measured_workers_mib": round(peaks.get(name, (0, 0))[1] / mib),
               "predicted_peak_mib": round(v[2] / mib), "measured_peak_mib": round(peaks.get(name, (0, 0, 0))[2] / mib),
               "predicted_peak_known_rf_mib": round(known_plan["stages"][name][2] / mib)}
              for name, v in plan["stages"].items()]
    return row, stages


def write_csv(path: Path, rows: list[dict]) -> None:
    with open(path, "w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("inputs", nargs="+", help="asepr input directories")
    parser.add_argument("--work", required=True, help="where the outputs go (each removed after its run)")
    parser.add_argument("-k", type=int, default=16)
    parser.add_argument("--workers", type=int, default=None, help="default: asepr's default")
    parser.add_argument("--results", default=str(HERE), help="where the CSV files go")
    parser.add_argument("--tag", default="", help="suffix of the CSV file names")
    args = parser.parse_args()
    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    rows, stages = [], []
    for inp in args.inputs:
        row, per_stage = measure(inp, work, args.k, args.workers)
        print(json.dumps(row), flush=True)
        rows.append(row)
        stages += per_stage
    write_csv(Path(args.results) / f"plan-vs-measured{args.tag}.csv", rows)
    write_csv(Path(args.results) / f"stages{args.tag}.csv", stages)


if __name__ == "__main__":
    main()
