"""The tables of this folder's README from ``asepr bench train``'s Parquet files.

    python docs/results/train-headline/collect.py REPORT [REPORT ...] > tables.md

A REPORT written ``DIR=STRATEGY,...`` contributes only those strategies' runs (the fds
runs of an earlier launch whose configuration the later ones share); runs whose rounds
have no CPU clock are not timed.
    python docs/results/train-headline/collect.py --diagnostics JSON [JSON ...]

Each REPORT is a ``bench train`` output directory (``train.parquet`` and
``train_rounds.parquet``); the reports of one graph may be split over several launches
(centralized in one, k = 32 in another). Prints, per dataset and k: the test metric at the
best validation point of centralized, the default (``avg+scaffold`` on ASEP partitions)
and fds, as the mean over seeds (lowest–highest), the gaps in points, and the modelled
cluster time to 99 % of the centralized runs' best validation metric (their mean over the
seeds, as ``bench train`` sets its target) at 10 Gbit/s, recomputed from every run's rounds
with :func:`asepr.training.protocol.time_to_fraction` so that runs launched without centralized
get it too (mean over the seeds that reached it, and how many did); then the default on
ASEP against 2PS-HDRF partitions; then every other strategy against the default of the
same seeds.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import polars as pl

from asepr.training.protocol import time_to_fraction

TUNED_ON = ("amazon-photo", "coauthor-cs")
DEFAULT = "avg+scaffold"
KEYS = ["dataset", "k", "strategy", "partitioner"]


def load(reports: list[str]) -> pl.DataFrame:
    columns = ["dataset", "k", "strategy", "partitioner", "seed", "test_at_best_val", "best_val",
               "bytes_per_epoch", "replication_factor", "compute_s"]
    frames, round_frames = [], []
    for report in reports:
        path, _, only = report.partition("=")  # DIR=fds,avg: only these strategies' runs of DIR
        keep = pl.col("strategy").is_in(only.split(",")) if only else pl.lit(True)
        frame = pl.read_parquet(f"{path}/train.parquet").filter(keep)
        frames.append(frame.select([c if c in frame.columns else pl.lit(None).alias(c) for c in columns]))
        rounds = pl.read_parquet(f"{path}/train_rounds.parquet").filter(keep)
        if "compute_s_cum_max" not in rounds.columns:  # no CPU clock (version 0.1.0): not timed
            rounds = rounds.head(0)
        round_frames.append(rounds)
    df = pl.concat(frames, how="vertical_relaxed").unique(subset=KEYS + ["seed"], keep="last", maintain_order=True)
    rounds = pl.concat(round_frames, how="diagonal_relaxed")
    central = df.filter(pl.col("strategy") == "centralized").group_by("dataset").agg(pl.col("best_val").mean())
    target = {r["dataset"]: 0.99 * r["best_val"] for r in central.to_dicts()}
    t99, timed = [], []
    for run in df.select(KEYS + ["seed"]).to_dicts():
        mine = rounds.filter(*(pl.col(c) == v for c, v in run.items())).unique("epoch", keep="last").sort("epoch")
        t99.append(time_to_fraction(mine.to_dicts(), target.get(run["dataset"]), 10) if len(mine) else None)
        timed.append(len(mine) > 0)
    return df.with_columns(pl.col("test_at_best_val") * 100, pl.Series("t99", t99, dtype=pl.Float64),
                           pl.Series("timed", timed))


def summary(df: pl.DataFrame) -> pl.DataFrame:
    return df.group_by(KEYS, maintain_order=True).agg(
        pl.len().alias("seeds"), pl.col("test_at_best_val").mean().alias("test"),
        pl.col("test_at_best_val").min().alias("lo"), pl.col("test_at_best_val").max().alias("hi"),
        pl.col("t99").mean().alias("t99"), pl.col("t99").count().alias("reached"), pl.col("timed").all(),
        pl.col("bytes_per_epoch").mean().alias("bytes"), pl.col("replication_factor").mean().alias("rf"))


def cell(row: dict | None) -> str:
    if not row:
        return "-"
    spread = "" if row["seeds"] == 1 else f" ({row['lo']:.2f}–{row['hi']:.2f})"
    return f"{row['test']:.2f}{spread}"


def mib(row: dict | None) -> str:
    return "-" if not row or row["bytes"] is None else f"{row['bytes'] / 2**20:.2f}"


def time_cell(row: dict | None) -> str:
    if not row or not row["timed"]:
        return "not timed" if row else "-"
    if row["t99"] is None:
        return "not reached"
    partial = "" if row["reached"] == row["seeds"] else f" ({row['reached']}/{row['seeds']})"
    return f"{row['t99']:.1f}{partial}"


def main(reports: list[str]) -> None:
    full = load(reports)
    s = summary(full)
    order = list(dict.fromkeys(s["dataset"]))
    rows = {(r["dataset"], r["k"], r["strategy"], r["partitioner"]): r
            for r in sorted(s.to_dicts(), key=lambda r: (order.index(r["dataset"]), r["k"]))}
    print("# Training headline: the tables\n")
    print("Written by `collect.py` (see [README.md](README.md)); test accuracy at the best validation point in "
          "points, mean over seeds (lowest–highest); modelled seconds to 99 % of centralized's best validation "
          "accuracy at 10 Gbit/s.\n")
    central = {d: r for (d, k, st, _), r in rows.items() if st == "centralized"}
    fds = {(d, k): r for (d, k, st, _), r in rows.items() if st == "fds"}
    print("| graph | k | seeds | centralized | default | fds | default − centralized | default − fds |"
          " s to 99 % @10G: centralized / default / fds | MiB/rank/epoch: default / fds |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for (d, k, st, p), r in rows.items():
        if st != DEFAULT or p != "asep":
            continue
        c, f = central.get(d), fds.get((d, k))
        name = f"{d} (tuned on)" if d in TUNED_ON else d
        gap_c = f"{r['test'] - c['test']:+.2f}" if c else "-"
        gap_f = f"{r['test'] - f['test']:+.2f}" if f else "-"
        print(f"| {name} | {k} | {r['seeds']} | {cell(c)} | {cell(r)} | {cell(f)} | {gap_c} | {gap_f} | "
              f"{time_cell(c)} / {time_cell(r)} / {time_cell(f)} | {mib(r)} / {mib(f)} |")
    print()
    print("| graph | k | seeds | ASEP: RF, test | 2PS-HDRF: RF, test | ASEP − 2PS-HDRF |")
    print("|---|---|---|---|---|---|")
    for (d, k, st, p), r in rows.items():
        other = rows.get((d, k, st, "2ps-hdrf"))
        if st != DEFAULT or p != "asep" or not other:
            continue
        name = f"{d} (tuned on)" if d in TUNED_ON else d
        print(f"| {name} | {k} | {r['seeds']} | {r['rf']:.2f}, {cell(r)} | {other['rf']:.2f}, {cell(other)} | "
              f"{r['test'] - other['test']:+.2f} |")
    extra = [(key, r) for key, r in rows.items() if key[2] not in (DEFAULT, "centralized", "fds")]
    if extra:
        print()
        print("| graph | k | strategy | seeds | test | default, same seeds | − default | s to 99 % @10G: it / default "
              "| MiB/rank/epoch: it / default |")
        print("|---|---|---|---|---|---|---|---|---|")
        for (d, k, st, p), r in extra:
            seeds = full.filter((pl.col("dataset") == d) & (pl.col("k") == k) & (pl.col("strategy") == st)
                                & (pl.col("partitioner") == p))["seed"]
            same = summary(full.filter((pl.col("dataset") == d) & (pl.col("k") == k) & (pl.col("strategy") == DEFAULT)
                                       & (pl.col("partitioner") == p) & pl.col("seed").is_in(seeds.implode())))
            base = same.to_dicts()[0] if len(same) else None
            diff = f"{r['test'] - base['test']:+.2f}" if base else "-"
            print(f"| {d} | {k} | {st} | {r['seeds']} | {cell(r)} | {cell(base)} | {diff} | "
                  f"{time_cell(r)} / {time_cell(base)} | {(r['bytes'] or 0) / 2**20:.2f} / "
                  f"{((base or {}).get('bytes') or 0) / 2**20:.2f} |")

def diagnostics(files: list[str]) -> None:
    """One row per ``asepr inspect OUT --diagnose --json`` file (named GRAPH-ALGO-kK.json)."""
    print("\n## Per-partition diagnostics\n")
    print("| graph | partitioner | k | RF | label JSD to the global, mean (max) | 2-hop coverage of training "
          "masters, mean (min) | training seeds per partition, min–max |")
    print("|---|---|---|---|---|---|---|")
    for name in files:
        data = json.loads(Path(name).read_text())
        d = data["diagnostics"]
        seeds = [p["seeds"] for p in d["per_partition"]]
        graph, algo, k = Path(name).stem.rsplit("-", 2) if "2ps" not in name else (
            Path(name).stem.split("-2ps-")[0], "2ps-hdrf", Path(name).stem.rsplit("-", 1)[1])
        print(f"| {graph} | {algo} | {k.lstrip('k')} | {data['metrics']['replication_factor']:.2f} | {d['jsd_mean']:.3f} "
              f"({d['jsd_max']:.3f}) | {d['coverage_mean']:.3f} ({d['coverage_min']:.3f}) | {min(seeds)}–{max(seeds)} |")


if __name__ == "__main__":
    if sys.argv[1:2] == ["--diagnostics"]:
        diagnostics(sys.argv[2:])
    else:
        main(sys.argv[1:])
