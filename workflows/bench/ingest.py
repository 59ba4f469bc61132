"""``asepr bench ingest``: incremental ingest against a full repartition, side by side.

One run generates a synthetic graph (:func:`asepr.pipeline.inputs.synth.generate`), cuts its edge
stream after the first ``base`` edges, partitions those (``asepr partition``), ingests
the rest (``asepr ingest``), and partitions all edges from scratch, each phase in its
own child process, so that its wall time and peak RSS are its own. With ``repeat`` > 1
the ingest (into a fresh hard-linked copy of generation 1 each time) and the full
repartition alternate that many times, and the summary compares their medians: on a
shared machine one pair of runs can land on very different loads. Everything runs
through the pipeline's public APIs on local threads (no Dask cluster), so both sides
get the same two resources. ``ingest.md`` and ``ingest.parquet`` record per phase the
wall time, peak RSS, replication factor and edge balance, with the input, k, seed,
versions and machine.

Benchmarks are not tests: this times things. No algorithm lives here.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import subprocess
import sys
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from asepr.storage.resources import own_peak_rss_bytes
from asepr.workflows.bench.tables import machine_info, markdown_table

__all__ = ["QUICK", "bench_ingest", "split_stream"]

log = logging.getLogger(__name__)

#: ``--quick``: seconds, for the test and a smoke run.
QUICK = {"nodes": 20_000, "base_edges": 180_000, "new_edges": 20_000, "dim": 16, "classes": 8, "k": 4}


def split_stream(full: Path, base: Path, increment: Path, base_edges: int) -> tuple[int, int]:
    """Cut ``full``'s edge stream after ``base_edges`` rows: ``base`` (input dir) and ``increment/edges``.

    The node shards and ``meta.json`` go to ``base`` (with the base edge count). Whole
    shards are hard-linked (copied across devices); the shard holding the cut is split.
    """
    from asepr.storage.inputs.directory import open_input

    source = open_input(full)
    shards = source.edge_shards
    for d in (base / "edges", base / "nodes", increment / "edges"):
        d.mkdir(parents=True, exist_ok=True)

    def link(src: str, dst: Path) -> None:
        try:
            os.link(src, dst)
        except OSError:
            shutil.copyfile(src, dst)

    seen = 0
    rows_base = rows_inc = 0
    for i, shard in enumerate(shards):
        rows = pq.ParquetFile(shard.path).metadata.num_rows
        name = f"part-{i:05d}.parquet"
        if seen + rows <= base_edges:
            link(shard.path, base / "edges" / name)
            rows_base += rows
        elif seen >= base_edges:
            link(shard.path, increment / "edges" / name)
            rows_inc += rows
        else:
            table = pq.read_table(shard.path)
            cut = base_edges - seen
            pq.write_table(table.slice(0, cut), base / "edges" / name)
            pq.write_table(table.slice(cut), increment / "edges" / name)
            rows_base += cut
            rows_inc += rows - cut
        seen += rows
    for shard in source.node_shards:
        link(shard.path, base / "nodes" / Path(shard.path).name)
    meta = dict(source.meta)
    meta.pop("shards", None)
    meta["num_edges"] = rows_base
    (base / "meta.json").write_text(json.dumps(meta, indent=2))
    return rows_base, rows_inc


# --- one phase, in a child process ------------------------------------------------------------


def _phase(args: dict[str, Any]) -> dict[str, Any]:
    """Run one phase in this process; return its figures (called in the child)."""
    import resource

    from asepr.pipeline import PartitionConfig
    from asepr.pipeline.increment.ingest import ingest
    from asepr.pipeline.partition_run import partition_to_store
    from asepr.pipeline.verify import verify_output
    from asepr.storage.resources import peak_rss_bytes

    config = PartitionConfig(num_parts=int(args["k"]), seed=int(args["seed"]))
    usage = resource.getrusage(resource.RUSAGE_SELF)
    cpu0 = usage.ru_utime + usage.ru_stime
    start = time.perf_counter()
    if args["phase"] == "ingest":
        manifest = ingest(args["out"], args["edges"])
    else:
        manifest = partition_to_store(args["input"], args["out"], config)
    wall = time.perf_counter() - start
    usage = resource.getrusage(resource.RUSAGE_SELF)
    cpu = usage.ru_utime + usage.ru_stime - cpu0
    rss = own_peak_rss_bytes() or peak_rss_bytes()
    result = {
        "wall_s": wall,
        "cpu_s": cpu,
        "peak_rss_mib": rss / 2**20,
        "generation": manifest["generation"],
        "num_nodes": manifest["num_nodes"],
        "num_edges": manifest["num_edges"],
        "rf": manifest["metrics"]["replication_factor"],
        "edge_balance": manifest["metrics"]["edge_balance"],
        "changed_partitions": len(manifest.get("run", {}).get("changed_partitions", range(manifest["num_parts"]))),
        "timings": manifest.get("timings", {}),
    }
    if args.get("verify"):
        t0 = time.perf_counter()
        report = verify_output(args["out"])
        result["verify_ok"] = report.ok
        result["verify_s"] = time.perf_counter() - t0
        if not report.ok:
            result["verify_problems"] = [str(p) for p in report.problems[:5]]
    return result




def _run_child(args: dict[str, Any]) -> dict[str, Any]:
    repo = Path(__file__).resolve().parents[1]
    env = dict(os.environ, PYTHONPATH=str(repo) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    proc = subprocess.run(
        [sys.executable, "-m", "asepr.workflows.bench.ingest", json.dumps(args)],
        env=env, capture_output=True, text=True, check=False,
    )
    if proc.returncode != 0:
        raise RuntimeError(f"bench phase {args['phase']} failed ({proc.returncode}):\n{proc.stderr[-4000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def bench_ingest(
    out: Path,
    *,
    nodes: int,
    base_edges: int,
    new_edges: int,
    dim: int = 16,
    classes: int = 16,
    k: int = 16,
    seed: int = 0,
    workdir: Path | None = None,
    keep: bool = False,
    verify: bool = False,
    shard_rows: int = 1_000_000,
    repeat: int = 1,
    echo=print,
) -> list[dict]:
    """Generate, split, partition the base, ingest the rest, repartition everything; write tables.

    Returns the rows written to ``ingest.parquet`` (one per phase).
    """
    from asepr.pipeline.inputs.synth import SynthConfig, generate

    # Absolute: the phases run in child processes whose working directory differs.
    out = Path(out).absolute()
    out.mkdir(parents=True, exist_ok=True)
    work = Path(workdir).absolute() if workdir else out / "work"
    if work.exists():
        shutil.rmtree(work)
    work.mkdir(parents=True)
    started = time.strftime("%Y-%m-%d %H:%M:%S")
    synth = SynthConfig(num_nodes=nodes, num_edges=base_edges + new_edges, num_classes=classes, dim=dim, seed=seed)
    t0 = time.perf_counter()
    generate(work / "full", synth, shard_rows=shard_rows)
    echo(f"generated {nodes:,} nodes and {base_edges + new_edges:,} edges in {time.perf_counter() - t0:.1f} s")
    rows_base, rows_new = split_stream(work / "full", work / "base", work / "increment", base_edges)
    common = {"k": k, "seed": seed, "verify": verify}
    phases = [("partition base", {"phase": "partition", "input": str(work / "base"), "out": str(work / "gen1"),
                                  **common}, rows_base, None)]
    for r in range(max(1, repeat)):
        ingest_phase = ("ingest", {"phase": "ingest", "out": str(work / f"out-{r}"),
                                   "edges": str(work / "increment" / "edges"), **common}, rows_new, r)
        full_phase = ("full repartition", {"phase": "partition", "input": str(work / "full"),
                                           "out": str(work / f"out-full-{r}"), **common}, rows_base + rows_new, r)
        phases += [ingest_phase, full_phase] if r % 2 == 0 else [full_phase, ingest_phase]
    info = machine_info()
    versions = {"asepr": _version(), "zarr": _module_version("zarr"), "dask": _module_version("dask")}
    rows = []
    for name, args, edges_in, rep_index in phases:
        if name == "ingest":
            # A fresh generation 1 each time: hard links, since a commit only adds and renames files.
            shutil.copytree(work / "gen1", args["out"], copy_function=os.link)
        figures = _run_child(args)
        if rep_index is not None and not keep:
            shutil.rmtree(args["out"], ignore_errors=True)
        row = {
            "phase": name, "repeat": rep_index if rep_index is not None else 0, "input": f"synth(nodes={nodes}, edges={base_edges + new_edges}, dim={dim}, "
                                    f"classes={classes}, seed={seed})",
            "nodes": nodes, "edges_processed": int(edges_in), "edges_total": figures["num_edges"], "k": k,
            "seed": seed, "wall_s": figures["wall_s"], "cpu_s": figures["cpu_s"],
            "peak_rss_mib": figures["peak_rss_mib"],
            "rf": figures["rf"], "edge_balance": figures["edge_balance"],
            "changed_partitions": figures["changed_partitions"],
            "verify_ok": figures.get("verify_ok"), "timings": json.dumps(figures["timings"]),
            "synth": json.dumps(asdict(synth)), "versions": json.dumps(versions), "machine": json.dumps(info),
        }
        rows.append(row)
        echo(f"{name:17s} {edges_in:>12,} edges  {row['wall_s']:8.1f} s  (CPU {row['cpu_s']:7.1f} s)  "
             f"peak RSS {row['peak_rss_mib']:8.0f} MiB  "
             f"RF {row['rf']:.3f}" + ("" if row["verify_ok"] is None else f"  verify {row['verify_ok']}"))
    pq.write_table(pa.Table.from_pylist(rows), out / "ingest.parquet")
    (out / "ingest.md").write_text(_report(rows, started, synth, k, seed, info, versions))
    if not keep:
        shutil.rmtree(work, ignore_errors=True)
    return rows


def _median(rows, phase, key):
    import statistics

    return statistics.median(r[key] for r in rows if r["phase"] == phase)


def _report(rows, started, synth, k, seed, info, versions) -> str:
    by = {r["phase"]: r for r in rows}
    ing, full = by["ingest"], by["full repartition"]
    t_ing, t_full = _median(rows, "ingest", "wall_s"), _median(rows, "full repartition", "wall_s")
    m_ing, m_full = _median(rows, "ingest", "peak_rss_mib"), _median(rows, "full repartition", "peak_rss_mib")
    ratio_t = t_ing / t_full if t_full else float("nan")
    ratio_m = m_ing / m_full if m_full else float("nan")
    rf_gap = ing["rf"] / full["rf"] - 1.0 if full["rf"] else float("nan")
    repeats = sum(r["phase"] == "ingest" for r in rows)
    c_ing, c_full = _median(rows, "ingest", "cpu_s"), _median(rows, "full repartition", "cpu_s")
    columns = ["phase", "repeat", "edges_processed", "edges_total", "k", "wall_s", "cpu_s", "peak_rss_mib", "rf",
               "edge_balance", "changed_partitions", "verify_ok"]
    stages = json.loads(ing["timings"])
    stage_lines = [f"| {name} | {sec:.2f} |" for name, sec in stages.items() if "kernel" not in name]
    return "\n".join([
        "# asepr bench ingest",
        "",
        (f"Run {started}; command: `asepr bench ingest` (k = {k}, seed {seed}). Input: synthetic graph "
         f"{json.dumps(asdict(synth))}; the first {by['partition base']['edges_processed']:,} edges of the "
         f"stream are partitioned, the last {ing['edges_processed']:,} ingested; the full repartition reads all "
         f"{full['edges_processed']:,}. Each phase ran in its own process on local threads (no Dask cluster); "
         "`peak_rss_mib` is that process's own high-water mark (VmHWM)."),
        f"Versions: {json.dumps(versions)}. Machine: {json.dumps(info)}.",
        "",
        markdown_table([{**r, "verify_ok": {True: "yes", False: "NO", None: "not run"}[r["verify_ok"]]}
                        for r in rows], columns),
        "",
        (f"**Ingest / full repartition{' (medians of ' + str(repeats) + ' runs each)' if repeats > 1 else ''}: "
         f"wall time {t_ing:.1f} s / {t_full:.1f} s = {100 * ratio_t:.1f} % (target <= 20 %), peak RSS "
         f"{m_ing:.0f} / {m_full:.0f} MiB = {100 * ratio_m:.1f} % (target <= 100 %); replication factor "
         f"{ing['rf']:.3f} / {full['rf']:.3f} ({100 * rf_gap:+.1f} %). CPU time (user + system, all threads): "
         f"{c_ing:.1f} s / {c_full:.1f} s = {100 * c_ing / c_full if c_full else float('nan'):.1f} %.**"),
        "",
        ("`wall_s` is the phase's wall time and the target's measure; `cpu_s` (user + system, all threads) "
         "is the phase's own CPU time, which other work sharing the machine changes much less than its wall "
         "time."),
        "",
        "Ingest stages (seconds, the first ingest run):",
        "",
        "| stage | s |",
        "|---|---|",
        *stage_lines,
        "",
    ])


def _module_version(name: str) -> str:
    try:
        return __import__(name).__version__
    except Exception:  # noqa: BLE001 - a version string is informative only
        return "?"


def _version() -> str:
    """The installed asepr package's version (the report names releases, not revisions)."""
    from importlib.metadata import version

    try:
        return version("asepr")
    except Exception:  # noqa: BLE001 - a version string is informative only
        return "?"


if __name__ == "__main__":  # a phase in a child process
    logging.basicConfig(level=logging.WARNING)
    print(json.dumps(_phase(json.loads(sys.argv[1]))))
