"""``asepr bench train``: training strategies side by side on the same partitions.

For every dataset: the centralized baseline once (its best validation metric sets the
target, 95 % of it), then for every k an ASEP partition (cached) and every strategy
launched as k trainer processes through torchrun's API, one after the other, with the
same model, seed, rounds and local epochs. Outputs in ``OUT``:

* ``train.md``: the table (final test metric, rounds and seconds to the target, bytes
  sent per rank per round and per epoch: the mean and the largest rank, evaluation
  traffic apart) with the run's settings and machine;
* ``train.parquet``: one row per (dataset, k, strategy); ``train_rounds.parquet``: every
  metrics row of every run (the curves);
* ``train-<dataset>-k<k>-time.png`` / ``-bytes.png``: validation metric against wall
  time and against bytes sent (when matplotlib is installed).

This module only orchestrates: the training is :mod:`training`, the launch
:mod:`workflows.launch`.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import shutil
import time
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from pipeline.config import PartitionConfig
from pipeline.store.write import partition_to_store
from storage.manifest import read_manifest
from training.checkpoint import RunDir
from training.config import TrainConfig
from workflows.bench import machine_info, markdown_table, pyplot, save_figure
from workflows.datasets import resolve_dataset
from workflows.launch import launch_trainers

__all__ = ["TRAIN_STRATEGIES", "bench_train", "summarise_run"]

log = logging.getLogger(__name__)

#: What `asepr bench train` compares by default ("fds" joins when requested).
TRAIN_STRATEGIES = ["centralized", "avg", "avg+kd", "avg+con", "avg+kd+con"]
TARGET_FRACTION = 0.95


def _versions() -> dict[str, str]:
    import torch
    import torch_geometric

    return {"torch": torch.__version__, "torch_geometric": torch_geometric.__version__}


def _mean_of(rows: list[dict[str, Any]], column: str) -> float:
    values = [float(r.get(column, 0.0)) for r in rows]
    return sum(values) / len(values)


def summarise_run(rows: list[dict[str, Any]], target: float | None, local_epochs: int) -> dict[str, Any]:
    """Final and best metrics, rounds/seconds to ``target``, bytes per rank per round/epoch.

    Bytes (averaged over the evaluated rounds): ``bytes_per_round`` / ``bytes_per_epoch``
    are the training traffic of the mean rank, ``*_max`` that of the largest rank, and
    ``eval_bytes_per_round`` the mean rank's evaluation traffic, which the others leave out.
    """
    if not rows:
        return {"rounds": 0}
    last = rows[-1]
    reached = next((r for r in rows if target is not None and float(r["val"]) >= target), None)
    epochs = max(local_epochs, 1)
    per_round, per_round_max = _mean_of(rows, "bytes_sent_round"), _mean_of(rows, "bytes_sent_round_max")
    return {
        "rounds": int(last["round"]),
        "final_val": float(last["val"]),
        "final_test": float(last["test"]),
        "best_val": max(float(r["val"]) for r in rows),
        "rounds_to_target": int(reached["round"]) if reached else None,
        "seconds_to_target": float(reached["elapsed_s"]) if reached else None,
        "train_seconds": float(last["elapsed_s"]),
        "bytes_per_round": per_round,
        "bytes_per_round_max": per_round_max,
        "bytes_per_epoch": per_round / epochs,
        "bytes_per_epoch_max": per_round_max / epochs,
        "eval_bytes_per_round": _mean_of(rows, "eval_bytes_sent_round"),
        "peak_rss_mib_rank0": float(last.get("peak_rss_mib", float("nan"))),
    }


def _finished(run_dir: Path, config: TrainConfig) -> list[dict[str, Any]] | None:
    """The metrics of an earlier complete run of the same config in ``run_dir`` (reused), else None."""
    runs = RunDir(run_dir)
    info = runs.read_run_info()
    rows = runs.read_metrics()
    if not info or not rows or int(rows[-1]["round"]) != config.rounds:
        return None
    saved = dict(info.get("config", {}))
    mine = config.to_dict()
    return rows if all(saved.get(k) == v for k, v in mine.items() if k not in ("timeout_s", "threads")) else None


def _wall(run_dir: Path) -> float:
    try:
        return float(json.loads((run_dir / "bench.json").read_text())["wall_s"])
    except (FileNotFoundError, ValueError, KeyError):
        return float("nan")


def _partition(input_dir: Path, cache: Path, name: str, k: int, seed: int) -> Path:
    out = cache / f"{name}-asep-k{k}"
    if not (out / "manifest.json").exists():
        partition_to_store(input_dir, out, PartitionConfig(num_parts=k, algo="asep", seed=seed), overwrite=True)
    return out


def _plots(curves: list[dict[str, Any]], out: Path, dataset: str, k: int, metric: str) -> list[str]:
    plt = pyplot()
    if plt is None:
        return []
    names = []
    for kind, xlabel in (("time", "wall time of training (s, cumulative over rounds)"),
                         ("bytes", "bytes sent per rank (mean over ranks, MiB, cumulative)")):
        fig, ax = plt.subplots(figsize=(6.4, 4.2))
        for strategy in dict.fromkeys(c["strategy"] for c in curves):
            rows = [c for c in curves if c["strategy"] == strategy]
            if kind == "time":
                xs = [float(r["elapsed_s"]) for r in rows]
            else:
                if strategy == "centralized":
                    continue
                total, xs = 0.0, []
                for r in rows:
                    total += float(r["bytes_sent_round"])
                    xs.append(total / 2**20)
            ax.plot(xs, [float(r["val"]) for r in rows], marker="o", markersize=3, label=strategy)
        if kind == "bytes":
            # fds sends 10-200x more than the ASEPR strategies: a linear axis squashes them at 0.
            ax.set_xscale("log")
        ax.set_xlabel(xlabel + (" (log scale)" if kind == "bytes" else ""))
        ax.set_ylabel(f"validation {metric}")
        ax.set_title(f"{dataset}, k={k}")
        ax.grid(alpha=0.3)
        ax.legend()
        name = f"train-{dataset}-k{k}-{kind}.png"
        save_figure(fig, out / name, dpi=110)
        names.append(name)
    return names


def bench_train(
    datasets: list[str],
    ks: list[int],
    strategies: list[str],
    out: Path,
    *,
    config: TrainConfig,
    cache: Path | None = None,
    keep_runs: bool = False,
    echo=print,
) -> list[dict[str, Any]]:
    """Run every dataset × k × strategy; write the report files into ``out``."""
    out.mkdir(parents=True, exist_ok=True)
    cache = cache or out / "inputs"
    runs_dir = out / "runs"
    machine = machine_info()
    versions = _versions()
    results: list[dict[str, Any]] = []
    curves: list[dict[str, Any]] = []
    plots: list[str] = []
    started = time.strftime("%Y-%m-%d %H:%M")
    for dataset in datasets:
        name = Path(dataset).name
        input_dir = resolve_dataset(dataset, cache)
        base = {"dataset": name, "model": config.model, "task": config.task, "rounds_config": config.rounds,
                "local_epochs": config.local_epochs, "hidden": config.hidden, "seed": config.seed,
                "feature_projection": config.feature_projection, **versions,
                "cores": machine["cores"], "memory_gib": machine["memory_gib"]}
        central_rows: list[dict[str, Any]] = []
        target = None
        if "centralized" in strategies:
            from training.centralized import run_centralized

            echo(f"bench train: {name}: centralized")
            run_dir = runs_dir / name / "centralized"
            central_rows = _finished(run_dir, dataclasses.replace(config, reconcile="avg"))
            if central_rows is None:
                t0 = time.perf_counter()
                central_rows = run_centralized(input_dir, run_dir, config)
                (run_dir / "bench.json").write_text(json.dumps({"wall_s": time.perf_counter() - t0}))
            wall = _wall(run_dir)
            target = TARGET_FRACTION * max(float(r["val"]) for r in central_rows)
            row = {**base, "k": 1, "strategy": "centralized", "wall_s": wall,
                   **summarise_run(central_rows, target, config.local_epochs)}
            results.append(row)
        for k in ks:
            parts = _partition(input_dir, cache, name, k, config.seed)
            manifest = read_manifest(parts)
            run_curves = [{**r, "strategy": "centralized"} for r in central_rows]
            for strategy in strategies:
                if strategy == "centralized":
                    continue
                echo(f"bench train: {name}: k={k}: {strategy}")
                run_dir = runs_dir / name / f"k{k}-{strategy.replace('+', '-')}"
                run_config = dataclasses.replace(config, reconcile="avg" if strategy == "fds" else strategy)
                rows = _finished(run_dir, run_config) if keep_runs else None
                if rows is None:
                    t0 = time.perf_counter()
                    launch_trainers(input_dir if strategy == "fds" else parts, run_dir, run_config, k,
                                    strategy="fds" if strategy == "fds" else "asepr", quiet=True)
                    (run_dir / "bench.json").write_text(json.dumps({"wall_s": time.perf_counter() - t0}))
                    rows = RunDir(run_dir).read_metrics()
                else:
                    echo("  (reusing the finished run in " + str(run_dir) + ")")
                wall = _wall(run_dir)
                summary = summarise_run(rows, target, config.local_epochs)
                results.append({**base, "k": k, "strategy": strategy, "wall_s": wall,
                                "replication_factor": manifest.get("metrics", {}).get("replication_factor"),
                                **summary})
                run_curves += [{**r, "strategy": strategy} for r in rows]
                echo(f"  final test {summary.get('final_test', float('nan')):.4f}, rounds to target "
                     f"{summary.get('rounds_to_target')}, {summary.get('bytes_per_round', 0) / 2**20:.2f} MiB/rank/round "
                     f"(largest rank {summary.get('bytes_per_round_max', 0) / 2**20:.2f})")
                # The report so far is rewritten after every run: a long benchmark stopped
                # midway keeps what it measured.
                _write(results, curves + [{**c, "dataset": name, "k": k} for c in run_curves], plots, out,
                       config, strategies, started, machine)
            curves += [{**c, "dataset": name, "k": k} for c in run_curves]
            metric = (central_rows or rows or [{}])[-1].get("metric", "metric")
            plots += _plots(run_curves, out, name, k, metric)
        if not keep_runs:
            shutil.rmtree(runs_dir / name, ignore_errors=True)
    _write(results, curves, plots, out, config, strategies, started, machine)
    return results


def _write(results, curves, plots, out: Path, config: TrainConfig, strategies, started, machine) -> None:
    if results:
        pq.write_table(pa.Table.from_pylist(results), out / "train.parquet")
    if curves:
        keys = sorted({k for c in curves for k in c})
        pq.write_table(pa.Table.from_pylist([{k: c.get(k) for k in keys} for c in curves]),
                       out / "train_rounds.parquet")
    table_rows = []
    for r in results:
        t = dict(r)
        for key, column in (("bytes_per_round", "MiB/rank/round"), ("bytes_per_round_max", "max MiB/rank/round"),
                            ("bytes_per_epoch", "MiB/rank/epoch"), ("bytes_per_epoch_max", "max MiB/rank/epoch"),
                            ("eval_bytes_per_round", "eval MiB/rank/round")):
            t[column] = r.get(key, 0) / 2**20
        t["rounds to 95%"] = r.get("rounds_to_target") if r.get("rounds_to_target") is not None else "not reached"
        t["s to 95%"] = r.get("seconds_to_target") if r.get("seconds_to_target") is not None else "-"
        table_rows.append(t)
    columns = ["dataset", "k", "strategy", "final_test", "best_val", "rounds to 95%", "s to 95%",
               "train_seconds", "wall_s", "MiB/rank/round", "max MiB/rank/round", "MiB/rank/epoch",
               "max MiB/rank/epoch", "eval MiB/rank/round"]
    lines = [
        "# asepr bench train",
        "",
        (f"Run {started}; {machine['cores']} cores, {machine['memory_gib']} GiB; "
         f"strategies {', '.join(strategies)}; model {config.model}, hidden {config.hidden}, "
         f"{config.num_layers} layers, {config.rounds} rounds × {config.local_epochs} local epochs "
         f"(the centralized run: {config.rounds * config.local_epochs} epochs, one row per "
         f"{config.local_epochs}); seed {config.seed}; feature projection {config.feature_projection or 'off'}; "
         f"feature norm {config.feature_norm}; defaults of TrainConfig otherwise."),
        "",
        ("`rounds to 95%`: the first round whose validation metric reaches 95 % of the centralized run's "
         "best validation metric; `s to 95%`: the training seconds (summed round times, without process "
         "start-up) at that round. `wall_s`: the whole launch, start-up included. Bytes: sent per rank, as "
         "counted by `training.comm` (ring cost model for all_reduce / all_gather, exact for all_to_all), "
         "averaged over the evaluated rounds: `MiB/rank/...` is the mean over ranks, `max ...` the rank that "
         "sent the most; both leave out the evaluation traffic, which `eval MiB/rank/round` shows (mean rank)."),
        "",
        markdown_table(table_rows, columns),
        "",
    ]
    for p in plots:
        lines.append(f"![{p}]({p})")
    (out / "train.md").write_text("\n".join(lines) + "\n")
