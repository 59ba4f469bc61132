"""`asepr bench scale`: end-to-end ``asepr partition`` speed and memory against |E|.

For each size a synthetic graph (``asepr synth``, |V| = |E| / 10, cached in the work
directory) is partitioned by the real command, ``python -m workflows partition``, in a
child process, exactly as a user runs it (validation to committed stores, the default
Dask setup). The harness measures:

- ``wall_s``: the child's wall time (process start-up included), and ``edges_per_s``;
- ``kernel_edges_per_s``: the streaming kernel's rate *in the same run* (|E| over the
  run's own ``assignment kernel`` seconds from its manifest), and ``kernel_ratio``, how
  many times slower the whole command is than its kernel;
- ``peak_gib``: the peak, over the run, of the summed RSS of the child and all its
  descendants (the Dask workers), sampled every 50 ms (shared pages count once per
  process, so this errs high); ``plan_gib``: what ``pipeline.plan`` predicted for the
  same run, and their ratio;
- ``disk_gib``: the committed output's size; ``rf``: its replication factor;
- ``cpu_s``: the user + system CPU seconds of the command and every descendant it
  reaped (the Dask workers), a fact about the run itself: on a machine shared with
  other work the wall time stretches while the CPU time changes much less;
- with ``--verify``, the same for ``asepr verify`` on the output.

A figure is written too: seconds and GiB against edges.
"""

from __future__ import annotations

import json
import resource
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from workflows.bench import machine_info, markdown_table, pyplot, save_figure

__all__ = ["COLUMNS", "DEFAULT_SIZES", "bench_scale", "children_cpu_seconds", "run_measured"]

DEFAULT_SIZES = [5_000_000, 20_000_000, 50_000_000, 100_000_000]
COLUMNS = ["edges", "nodes", "k", "wall_s", "edges_per_s", "kernel_edges_per_s", "kernel_ratio",
           "peak_gib", "plan_gib", "plan_ratio", "disk_gib", "rf", "verify_s", "verify_edges_per_s",
           "verify_peak_gib", "cpu_s", "verify_cpu_s"]
_POLL_S = 0.05


def _tree_rss(proc) -> int:
    import psutil

    total = 0
    for p in [proc, *proc.children(recursive=True)]:
        try:
            total += p.memory_info().rss
        except (psutil.NoSuchProcess, psutil.ZombieProcess):
            pass
    return total


def children_cpu_seconds() -> float:
    """User + system CPU seconds of every child this process has waited for, and theirs.

    A child's own reaped descendants are included (the kernel adds them to the child's
    total when it reaps them), so the difference across one ``run_measured`` call is the
    CPU time of that command's whole process tree.
    """
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def run_measured(cmd: list[str], log_path: Path, samples: list | None = None) -> tuple[float, int]:
    """Run ``cmd``; return ``(wall seconds, peak summed RSS of its process tree)``.

    Output goes to ``log_path``; a non-zero exit raises ``RuntimeError`` naming the log.
    ``samples``, when given, receives every ``(unix time, summed RSS bytes)`` sample.
    """
    import psutil

    with open(log_path, "wb") as log_file:
        start = time.perf_counter()
        child = subprocess.Popen(cmd, stdout=log_file, stderr=subprocess.STDOUT)
        proc = psutil.Process(child.pid)
        peak = 0
        done = threading.Event()

        def poll() -> None:
            nonlocal peak
            while not done.is_set():
                try:
                    rss = _tree_rss(proc)
                except psutil.NoSuchProcess:
                    return
                peak = max(peak, rss)
                if samples is not None:
                    samples.append((time.time(), rss))
                time.sleep(_POLL_S)

        poller = threading.Thread(target=poll, daemon=True)
        poller.start()
        code = child.wait()
        wall = time.perf_counter() - start
        done.set()
        poller.join()
    if code != 0:
        raise RuntimeError(f"{' '.join(cmd[:4])} ... exited with {code}; see {log_path}")
    return wall, peak


def _cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "workflows", *args]


def _synth(workdir: Path, edges: int, nodes: int, dim: int, classes: int, seed: int) -> Path:
    """The cached synthetic input of this size (made once)."""
    path = workdir / f"synth-e{edges}-v{nodes}-d{dim}-c{classes}-s{seed}"
    if not (path / "meta.json").exists():
        shutil.rmtree(path, ignore_errors=True)
        run_measured(_cli("synth", str(path), "--nodes", str(nodes), "--edges", str(edges), "--dim", str(dim),
                          "--classes", str(classes), "--seed", str(seed), "-q"), workdir / f"{path.name}.log")
    return path


def _dir_bytes(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


def _planned_peak(inp: Path, out: Path, k: int) -> int:
    from pipeline.config import PartitionConfig
    from pipeline.plan import plan_partition
    from workflows.dask_client import default_workers

    return int(plan_partition(inp, out, PartitionConfig(num_parts=k), workers=default_workers()).peak_bytes)


def _one_size(workdir: Path, edges: int, *, k: int, dim: int, classes: int, seed: int, verify: bool,
              keep: bool, echo) -> dict:
    nodes = max(edges // 10, 2)
    inp = _synth(workdir, edges, nodes, dim, classes, seed)
    out = workdir / f"out-e{edges}-k{k}"
    shutil.rmtree(out, ignore_errors=True)
    plan = _planned_peak(inp, out, k)
    cpu_before = children_cpu_seconds()
    wall, peak = run_measured(_cli("partition", str(inp), str(out), "-k", str(k), "-q"), workdir / f"{out.name}.log")
    manifest = json.loads((out / "manifest.json").read_text())
    kernel_s = float(manifest["timings"].get("assignment kernel", float("nan")))
    row = {
        "edges": edges, "nodes": nodes, "k": k, "wall_s": wall, "edges_per_s": edges / wall,
        "kernel_edges_per_s": edges / kernel_s, "kernel_ratio": (edges / kernel_s) / (edges / wall),
        "peak_gib": peak / 2**30, "plan_gib": plan / 2**30, "plan_ratio": plan / peak,
        "disk_gib": _dir_bytes(out) / 2**30, "rf": float(manifest["metrics"]["replication_factor"]),
        "cpu_s": children_cpu_seconds() - cpu_before,
        "stage_seconds": json.dumps(manifest["timings"], sort_keys=True),
    }
    if verify:
        cpu_before = children_cpu_seconds()
        v_wall, v_peak = run_measured(_cli("verify", str(out), "-q"), workdir / f"verify-{out.name}.log")
        row.update(verify_s=v_wall, verify_edges_per_s=edges / v_wall, verify_peak_gib=v_peak / 2**30,
                   verify_cpu_s=children_cpu_seconds() - cpu_before)
    if not keep:
        shutil.rmtree(out, ignore_errors=True)
    echo(f"bench scale: {edges:,} edges: {wall:.1f} s ({edges / wall / 1e6:.2f}M edges/s; kernel "
         f"{row['kernel_edges_per_s'] / 1e6:.1f}M/s), peak {row['peak_gib']:.2f} GiB (plan {row['plan_gib']:.2f})")
    return row


def _plot(rows: list[dict], path: Path) -> None:
    plt = pyplot()
    if plt is None:
        return
    fig, (a, b) = plt.subplots(1, 2, figsize=(10, 4))
    edges = [r["edges"] / 1e6 for r in rows]
    a.plot(edges, [r["wall_s"] for r in rows], "o-", label="asepr partition (end to end)")
    a.plot(edges, [r["edges"] / r["kernel_edges_per_s"] for r in rows], "s--", label="streaming kernel alone")
    if any("verify_s" in r for r in rows):
        a.plot(edges, [r.get("verify_s", float("nan")) for r in rows], "^:", label="asepr verify")
    a.set_xlabel("edges (millions)")
    a.set_ylabel("seconds")
    a.legend()
    b.plot(edges, [r["peak_gib"] for r in rows], "o-", label="measured peak (process tree)")
    b.plot(edges, [r["plan_gib"] for r in rows], "s--", label="plan (--dry-run)")
    b.set_xlabel("edges (millions)")
    b.set_ylabel("GiB")
    b.legend()
    save_figure(fig, path, 120)


def bench_scale(out: Path, sizes: list[int] | None = None, *, k: int = 16, dim: int = 32, classes: int = 8,
                seed: int = 1, workdir: Path | None = None, keep: bool = False, verify: bool = False,
                echo=print) -> list[dict]:
    """Partition a synthetic graph of each size end to end; write ``scale.md``, ``.parquet``, ``.png``."""
    out.mkdir(parents=True, exist_ok=True)
    workdir = workdir or out / "work"
    workdir.mkdir(parents=True, exist_ok=True)
    started = time.strftime("%Y-%m-%d %H:%M")
    rows = [_one_size(workdir, e, k=k, dim=dim, classes=classes, seed=seed, verify=verify, keep=keep, echo=echo)
            for e in sorted(sizes or DEFAULT_SIZES)]
    pq.write_table(pa.Table.from_pylist(rows), out / "scale.parquet")
    _plot(rows, out / "scale.png")
    info = machine_info()
    lines = [
        "# asepr bench scale", "",
        f"Run {started}; {info['cores']} cores, {info['memory_gib']} GiB; `asepr synth --nodes E/10 --edges E "
        f"--dim {dim} --classes {classes} --seed {seed}`, then `asepr partition -k {k}` (default Dask setup) "
        "in a child process, one size after the other.", "",
        "`wall_s`: the command's wall time, start-up included; `kernel_edges_per_s`: the streaming "
        "assignment kernel's rate in the same run (from its manifest); `kernel_ratio`: kernel rate / "
        "end-to-end rate; `peak_gib`: peak summed RSS of the command's process tree (driver and Dask "
        "workers, sampled every 50 ms); `plan_gib`: `pipeline.plan`'s prediction for the run; "
        "`plan_ratio`: plan / measured; `disk_gib`: the committed output; `cpu_s` (`verify_cpu_s`): user + "
        "system CPU seconds of the command's process tree, to set against its wall time.", "",
        markdown_table(rows, COLUMNS), "",
        "Seconds per stage (from each run's manifest):", "",
    ]
    for r in rows:
        lines.append(f"- {r['edges']:,} edges: " + ", ".join(
            f"{name} {s:.1f}" for name, s in sorted(json.loads(r["stage_seconds"]).items(), key=lambda kv: -kv[1])))
    lines += ["", "![scale.png](scale.png)", ""]
    (out / "scale.md").write_text("\n".join(lines))
    return rows
