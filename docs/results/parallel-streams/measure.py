"""W parallel assignment streams against one: RF, edge balance and merge traffic.

For every input, edge order, k and algorithm: one real ``partition()`` run (the
sequential stream, W = 1), then :func:`parallel.simulate_parallel_streams` (``parallel.py`` beside it)
from the same starting state (degrees, communities, attribute homes) at every W and B.
The W = 1 simulation must reproduce the run's loads and RF exactly (checked, not
assumed). Rows go to ``parallel-streams.csv`` and the table to ``table.md``.

Usage (from the repository root)::

    python docs/results/parallel-streams/measure.py --work WORK \\
        --inputs amazon-computers coauthor-physics --orders shuffled natural -k 4 16 \\
        --sync-edges 1000 10000 100000 1000000
    python docs/results/parallel-streams/measure.py --work WORK \\
        --inputs /work/scratch/s50 --orders natural -k 16 --sync-edges 10000 100000 1000000 --append
"""

from __future__ import annotations

import argparse
import csv
import os
import shutil
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
from parallel import replay_state, simulate_parallel_streams

from asepr.pipeline import PartitionConfig, attribute_clusters, compute_degrees, partition
from asepr.storage.inputs.directory import open_input, read_meta
from asepr.storage.resources import peak_rss_bytes
from asepr.workflows.bench.partition import ordered_inputs

HERE = Path(__file__).resolve().parent
COLUMNS = ["input", "order", "edges", "nodes", "k", "algo", "streams", "sync_edges", "epochs", "rf", "rf_change_pct",
           "edge_balance", "cap_balance", "over_cap", "merges", "full_mib", "sparse_mib", "sparse_kib_per_merge",
           "changed_words_up", "touched_vertices", "kernel_s", "critical_s", "merge_s", "peak_rss_mib"]


def _row(r, *, name, order, a, algo, rf1) -> dict:
    t = r.traffic
    parallel = r.num_streams > 1
    return {
        "input": name, "order": order, "edges": a.num_edges, "nodes": a.num_nodes, "k": a.config.num_parts,
        "algo": algo, "streams": r.num_streams, "sync_edges": r.epoch_edges if parallel else "",
        "epochs": r.epochs, "rf": round(r.replication_factor, 4),
        "rf_change_pct": round(100.0 * (r.replication_factor / rf1 - 1.0), 2),
        "edge_balance": round(r.edge_balance, 4), "cap_balance": round(r.cap / r.loads.mean(), 4),
        "over_cap": r.over_cap, "merges": t.merges if parallel else 0,
        "full_mib": round(t.full_bytes / 2**20, 1) if parallel else 0,
        "sparse_mib": round(t.sparse_bytes / 2**20, 1) if parallel else 0,
        "sparse_kib_per_merge": round(t.sparse_bytes / 2**10 / max(t.merges, 1), 1) if parallel else 0,
        "changed_words_up": t.changed_words_up if parallel else 0,
        "touched_vertices": t.touched_vertices if parallel else 0,
        "kernel_s": round(r.kernel_seconds, 2), "critical_s": round(r.critical_seconds, 2),
        "merge_s": round(r.merge_seconds, 2), "peak_rss_mib": round(peak_rss_bytes() / 2**20),
    }


def _sweep(a, *, name, order, algo, streams, sync_edges, echo) -> list[dict]:
    """W = 1 (checked against the run ``a``), then every W > 1 at every B."""
    state, settings = replay_state(a)
    one = simulate_parallel_streams(a.edge_shards, state, settings, 1, max(sync_edges))
    if one.loads.tolist() != a.loads.tolist() or not np.array_equal(one.replicas, a.replicas):
        raise SystemExit(f"{name} {order} k={a.config.num_parts} {algo}: W = 1 differs from partition()")
    rf1 = one.replication_factor
    rows = [_row(one, name=name, order=order, a=a, algo=algo, rf1=rf1)]
    for w in streams:
        for b in sync_edges:
            if w == 1:
                continue
            state, settings = replay_state(a)
            r = simulate_parallel_streams(a.edge_shards, state, settings, w, b)
            rows.append(_row(r, name=name, order=order, a=a, algo=algo, rf1=rf1))
            del state, r
    for row in rows:
        echo(f"{name:18s} {order:8s} k={row['k']:<3d} {algo:5s} W={row['streams']} B={row['sync_edges']!s:8s} "
             f"RF {row['rf']:.3f} ({row['rf_change_pct']:+.2f} %)  bal {row['edge_balance']:.3f} "
             f"over {row['over_cap']}  sparse {row['sparse_mib']} MiB  full {row['full_mib']} MiB")
    return rows


def _save(csv_path: Path, rows: list[dict]) -> None:
    """Append ``rows`` to ``csv_path`` (with a header when it is new), so a crash keeps what was measured."""
    fresh = not csv_path.exists()
    with open(csv_path, "a", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=COLUMNS)
        if fresh:
            writer.writeheader()
        writer.writerows(rows)


def _input_rows(name: str, args, echo, csv_path: Path) -> list[dict]:
    label = Path(name).name if os.sep in name else name
    paths = ordered_inputs(name, tuple(args.orders), Path(args.work) / "inputs", 0)
    num_nodes = int((read_meta(paths["natural"]) or {})["num_nodes"])
    rows = []
    for order in args.orders:
        source = open_input(paths[order])
        degrees = compute_degrees(source.edge_shards, num_nodes)
        for k in args.k:
            # ASEP's own one-pass stream (the two-phase fallback is a second, sequential stream).
            base = PartitionConfig(num_parts=k, seed=0, two_phase_fallback=False)
            attr = attribute_clusters(source.node_shards, num_nodes, base.attr_clusters, seed=0,
                                      max_passes=base.kmeans_max_passes, tol=base.kmeans_tol,
                                      sample_size=base.kmeans_sample, projection_dim=base.projection_dim,
                                      projection_threshold=base.projection_threshold)
            for algo in args.algos:
                workdir = Path(args.work) / f"assign-{label}-{order}-{k}-{algo}"
                shutil.rmtree(workdir, ignore_errors=True)
                with partition(source, config=replace(base, algo=algo), attr=attr, degrees=degrees,
                               validate=False, workdir=workdir) as a:
                    done = _sweep(a, name=label, order=order, algo=algo, streams=args.streams,
                                  sync_edges=args.sync_edges, echo=echo)
                _save(csv_path, done)
                rows += done
                shutil.rmtree(workdir, ignore_errors=True)
    return rows


def _fmt(v) -> str:
    if isinstance(v, float):
        return f"{v:.3f}" if abs(v) < 100 else f"{v:,.0f}"
    if isinstance(v, int):
        return f"{v:,}"
    return str(v)


def write_table(csv_path: Path, md_path: Path) -> None:
    """``table.md`` from every row of ``csv_path``."""
    with open(csv_path) as f:
        rows = list(csv.DictReader(f))
    shown = ["input", "order", "k", "algo", "streams", "sync_edges", "stale_pct", "epochs", "rf", "rf_change_pct",
             "edge_balance", "over_cap", "merges", "full_mib", "sparse_mib", "sparse_kib_per_merge"]
    lines = ["| " + " | ".join(shown) + " |", "|" + "---|" * len(shown)]
    for r in rows:
        # The edges assigned between two merges, as a share of the whole stream.
        stale = int(r["streams"]) * int(r["sync_edges"] or 0) / int(r["edges"])
        r["stale_pct"] = f"{100 * min(stale, 1.0):.2f}" if r["sync_edges"] else ""
        cells = []
        for c in shown:
            v = r[c]
            try:
                v = int(v) if v.lstrip("-").isdigit() else float(v)
            except ValueError:
                pass
            cells.append(_fmt(v))
        lines.append("| " + " | ".join(cells) + " |")
    md_path.write_text("\n".join(lines) + "\n")


def write_summary(csv_path: Path, md_path: Path) -> None:
    """``summary.md``: per input, order, k, algorithm and B, the RF change and the balance at each W."""
    with open(csv_path) as f:
        rows = list(csv.DictReader(f))
    groups: dict[tuple, dict] = {}
    for r in rows:
        key = (r["input"], r["order"], int(r["k"]), r["algo"])
        groups.setdefault(key, {})[(int(r["streams"]), r["sync_edges"])] = r
    streams = sorted({int(r["streams"]) for r in rows if int(r["streams"]) > 1})
    head = (["input", "order", "k", "algo", "B", "RF (W=1)", "balance (W=1)"]
            + [f"RF W={w}" for w in streams] + [f"balance W={w}" for w in streams]
            + [f"sparse MiB W={w}" for w in streams])
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for key, cells in groups.items():
        one = cells.get((1, ""))
        if one is None:
            continue
        for b in sorted({s for (_, s) in cells if s}, key=int):
            row = [*map(str, key), f"{int(b):,}", f"{float(one['rf']):.3f}", f"{float(one['edge_balance']):.3f}"]
            picked = [cells.get((w, b)) for w in streams]
            row += [f"{float(c['rf_change_pct']):+.2f} %" if c else "" for c in picked]
            row += [f"{float(c['edge_balance']):.3f}" + (" *" if c and int(c["over_cap"]) else "") if c else ""
                    for c in picked]
            row += [f"{float(c['sparse_mib']):,.1f}" if c else "" for c in picked]
            lines.append("| " + " | ".join(row) + " |")
    md_path.write_text("\n".join(lines) + "\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--inputs", nargs="+", default=[], help="shared dataset names or input directories")
    parser.add_argument("--orders", nargs="+", default=["shuffled"], choices=["shuffled", "natural"])
    parser.add_argument("-k", nargs="+", type=int, default=[16])
    parser.add_argument("--algos", nargs="+", default=["asep", "hdrf"])
    parser.add_argument("--streams", nargs="+", type=int, default=[1, 2, 4, 8])
    parser.add_argument("--sync-edges", nargs="+", type=int, default=[100_000, 1_000_000])
    parser.add_argument("--work", default="", help="scratch: imported inputs and the runs' edge partitions")
    parser.add_argument("--out", default=str(HERE))
    parser.add_argument("--append", action="store_true", help="add rows to an existing parallel-streams.csv")
    parser.add_argument("--table", action="store_true", help="only render table.md from parallel-streams.csv")
    args = parser.parse_args()
    out = Path(args.out)
    csv_path = out / "parallel-streams.csv"
    if args.table:
        write_table(csv_path, out / "table.md")
        write_summary(csv_path, out / "summary.md")
        return
    if not args.inputs or not args.work:
        parser.error("--inputs and --work are needed to measure (or --table to render the tables)")
    started = time.strftime("%Y-%m-%d %H:%M:%S")
    print(f"started {started}")
    out.mkdir(parents=True, exist_ok=True)
    if not args.append and csv_path.exists():
        csv_path.unlink()
    for name in args.inputs:
        _input_rows(name, args, print, csv_path)
    write_table(csv_path, out / "table.md")
    write_summary(csv_path, out / "summary.md")
    print(f"finished {time.strftime('%Y-%m-%d %H:%M:%S')}; wrote {csv_path}")


if __name__ == "__main__":
    main()
