"""``asepr bench train``: training strategies, and partitioners, side by side.

For every dataset: the centralized baseline once (its best validation metric sets the
target, 95 % of it), then for every k an ASEP partition (cached) and every strategy
launched as k trainer processes through torchrun's API, one after the other, with the
same model, seed, rounds, local epochs and evaluation: the global model's exact
whole-graph metrics (or the partition-local ones with ``eval_mode="local"``, labelled so)
every ``eval_interval`` epochs (:class:`asepr.training.config.TrainConfig`; ASEPR at the first
round end at or after each multiple, centralized and fds exactly then). With
``partitioners``, the default strategy (``config.reconcile``) is also trained at the
same k on partitions from each of them: does the partitioner matter for training?

Outputs in ``OUT``:

* ``train.md``: the tables (final test metric and the test metric at the best
  validation point, epochs and training seconds to the target, measured and modelled
  on a network, bytes sent per rank per epoch: the mean and the largest rank, evaluation
  traffic apart, the one-time data placement) with the run's settings and machine;
* ``train.parquet``: one row per run (dataset, k, strategy, partitioner);
  ``train_rounds.parquet``: every metrics row of every run (the curves);
* ``train-<dataset>-k<k>-time.png`` / ``-bytes.png``: validation metric against training
  time and against bytes sent (log axis), and the same as ``-partitioners-*.png`` for the
  partitioner comparison (when matplotlib is installed);
* ``train-<dataset>-diagnostics.png`` (with several k): why the local models differ, against
  k: the partitions' label divergence, receptive-field coverage and training seeds per
  rank (:func:`asepr.pipeline.diagnose.diagnose_output`), the default strategy's drift in its last
  round and its test metric, one line per partitioner
  (:mod:`asepr.workflows.bench.train_diagnostics`; the same figures as a table in ``train.md``).

Times are training seconds, evaluation excluded (``elapsed_s`` of the metrics rows).
The network model (:func:`asepr.training.protocol.modelled_seconds`, labelled *modelled* everywhere) projects
each time onto a cluster: the measured seconds plus the training bytes over the
bandwidth plus the messages times a per-message latency, training's and the
evaluations' (a run learns that it reached a target by evaluating), for the rank that
sent the most (the ranks meet at every collective, so the busiest one sets the pace),
at 1, 10 and 100 Gbit/s with :data:`LATENCY_S`. The measured seconds already include
the transfers over this machine's loopback, so the projection errs on the slow side.

This module only orchestrates: the training is :mod:`training`, the launch
:mod:`asepr.workflows.launch`, the summaries and tables :mod:`asepr.workflows.bench.train_report`.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import shutil
import time
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow.parquet as pq

from asepr.pipeline.config import PartitionConfig
from asepr.pipeline.diagnose import diagnose_output
from asepr.pipeline.partition_run import partition_to_store
from asepr.storage.partitions.manifest import read_manifest
from asepr.training.centralized import centralized_config
from asepr.training.rundir.checkpoint import RunDir
from asepr.training.config import TrainConfig, removed_conflicts
from asepr.training.fds import fds_config
from asepr.training.evaluation.ogb_eval import ogb_columns
from asepr.workflows.bench.protocol import protocol_columns, protocol_section
from asepr.workflows.bench.tables import machine_info, markdown_table, parquet_table, pyplot, save_figure
from asepr.workflows.bench.train_diagnostics import (
    diagnostics_fields,
    diagnostics_section,
    plot_diagnostics,
)
from asepr.workflows.bench.train_report import (
    HEADLINE_COLUMNS,
    LATENCY_S,
    NETWORK_COLUMNS,
    NETWORK_GBITS,
    PARTITIONER_COLUMNS,
    STRATEGY_COLUMNS,
    headline,
    ogb_section,
    seed_table,
    summarise_run,
    table_rows,
)
from asepr.workflows.datasets import resolve_dataset
from asepr.workflows.launch import launch_trainers

__all__ = ["PARTITIONERS", "TRAIN_STRATEGIES", "bench_train", "plot_curves"]

log = logging.getLogger(__name__)

#: What `asepr bench train` compares by default ("fds" joins when requested).
TRAIN_STRATEGIES = ["centralized", "avg", "avg+kd", "avg+con", "avg+kd+con", "avg+corr", "avg+scaffold"]
#: The partitioners `--partitioners` may name (the paper's comparison).
PARTITIONERS = ["asep", "2ps-hdrf", "hdrf", "hash", "metis"]
TARGET_FRACTION = 0.95
PLACEMENT_KEYS = ("placement_rows_mean", "placement_rows_max", "placement_bytes_mean", "placement_bytes_max")


def _versions() -> dict[str, str]:
    import torch
    import torch_geometric

    return {"torch": torch.__version__, "torch_geometric": torch_geometric.__version__}


def _finished(run_dir: Path, config: TrainConfig) -> list[dict[str, Any]] | None:
    """The metrics of an earlier complete run of the same config in ``run_dir`` (reused), else None."""
    runs = RunDir(run_dir)
    info = runs.read_run_info()
    rows = runs.read_metrics()
    if not info or not rows or int(rows[-1]["round"]) != config.rounds:
        return None
    saved = dict(info.get("config", {}))
    mine = config.to_dict()
    # Settings that cannot change this run's result: how it ran, and scaffold's bound
    # without scaffold. A run that set a removed field to another behaviour is rerun.
    ignored = {"timeout_s", "threads", "device"} | (set() if config.uses_scaffold else {"scaffold_clip"})
    if removed_conflicts(saved):
        return None
    return rows if all(saved.get(k) == v for k, v in mine.items() if k not in ignored) else None


def _wall(run_dir: Path) -> float:
    try:
        return float(json.loads((run_dir / "bench.json").read_text())["wall_s"])
    except (FileNotFoundError, ValueError, KeyError):
        return float("nan")


def _partition(input_dir: Path, cache: Path, name: str, k: int, seed: int, algo: str = "asep") -> Path:
    out = cache / f"{name}-{algo}-k{k}"
    if not (out / "manifest.json").exists():
        partition_to_store(input_dir, out, PartitionConfig(num_parts=k, algo=algo, seed=seed), overwrite=True)
    return out


def _launch(data: Path, run_dir: Path, config: TrainConfig, k: int, strategy: str, reuse: bool,
            echo) -> list[dict[str, Any]]:
    """Train one strategy as k ranks into ``run_dir`` (or reuse a finished run there)."""
    # fds saves the configuration it ran (fds_config: its batch, no reconciliation).
    rows = _finished(run_dir, fds_config(config) if strategy == "fds" else config) if reuse else None
    if rows is not None:
        echo("  (reusing the finished run in " + str(run_dir) + ")")
        return rows
    t0 = time.perf_counter()
    launch_trainers(data, run_dir, config, k, strategy="fds" if strategy == "fds" else "asepr", overwrite=True,
                    quiet=True)
    (run_dir / "bench.json").write_text(json.dumps({"wall_s": time.perf_counter() - t0}))
    return RunDir(run_dir).read_metrics()


def _result(base: dict[str, Any], k: int, strategy: str, partitioner: str | None, run_dir: Path,
            rows: list[dict[str, Any]], target: float | None, manifest: dict[str, Any] | None) -> dict[str, Any]:
    """One row of ``train.parquet``: the run's summary, data placement and partition quality."""
    info = RunDir(run_dir).read_run_info() or {}
    metrics = (manifest or {}).get("metrics", {})
    rf = metrics.get("replication_factor")
    return {**base, "k": k, "strategy": strategy, "partitioner": partitioner or info.get("partition"),
            "wall_s": _wall(run_dir), "replication_factor": rf,
            "label_entropy_mean": metrics.get("label_entropy_mean"),
            # each rank's resolved batch (--batch-size auto), in rank order; fds: its one batch
            "batch_sizes": info.get("batch_sizes") or [info.get("config", {}).get("batch_size")],
            **{key: info.get(key) for key in PLACEMENT_KEYS}, **summarise_run(rows, target),
            **protocol_columns(rows, None if target is None else target / TARGET_FRACTION), **ogb_columns(run_dir)}


def _runs(rows: list[dict[str, Any]]) -> list[list[dict[str, Any]]]:
    """A label's metrics rows cut into runs (seeds): a new run starts where the round goes back."""
    runs: list[list[dict[str, Any]]] = []
    for r in rows:
        if not runs or int(r["round"]) <= int(runs[-1][-1]["round"]):
            runs.append([])
        runs[-1].append(r)
    return runs


def plot_curves(curves: list[dict[str, Any]], out: Path, stem: str, title: str, metric: str) -> list[str]:
    """Validation metric against training time and against cumulative bytes: one colour
    per ``label``, one line per run of it (seeds); writes ``STEM-time.png`` and
    ``STEM-bytes.png`` into ``out`` and returns their names (none without matplotlib)."""
    plt = pyplot()
    if plt is None:
        return []
    names = []
    for kind, xlabel in (("time", "training seconds (evaluation excluded, cumulative)"),
                         ("bytes", "training bytes sent per rank (mean over ranks, MiB, cumulative; log scale)")):
        fig, ax = plt.subplots(figsize=(6.4, 4.2))
        for label in dict.fromkeys(c["label"] for c in curves):
            rows = [c for c in curves if c["label"] == label]
            if kind == "bytes" and not any(float(r["bytes_sent_cum"]) for r in rows):
                continue  # nothing sent (centralized): no place on a log axis
            color = None
            for index, run in enumerate(_runs(rows)):
                xs = [float(r["elapsed_s"]) if kind == "time" else float(r["bytes_sent_cum"]) / 2**20 for r in run]
                (line,) = ax.plot(xs, [float(r["val"]) for r in run], marker="o", markersize=3, color=color,
                                  alpha=0.8, label=label if index == 0 else None)
                color = line.get_color()
        if kind == "bytes":
            # fds sends 10-200x more than the ASEPR strategies: a linear axis squashes them at 0.
            ax.set_xscale("log")
        ax.set_xlabel(xlabel)
        ax.set_ylabel(f"validation {metric} ({curves[-1].get('eval_mode', 'exact')} evaluation)")
        ax.set_title(title)
        ax.grid(alpha=0.3)
        ax.legend()
        name = f"{stem}-{kind}.png"
        save_figure(fig, out / name, dpi=110)
        names.append(name)
    return names


@dataclasses.dataclass
class _Bench:
    """What every run of one `bench train` shares, and what it has produced so far."""

    out: Path
    cache: Path
    config: TrainConfig
    strategies: list[str]
    partitioners: list[str]
    keep_runs: bool
    echo: Any
    started: str
    machine: dict[str, Any]
    seeds: list[int]
    results: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    curves: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    plots: list[str] = dataclasses.field(default_factory=list)
    diagnostics: dict[str, dict[str, Any]] = dataclasses.field(default_factory=dict)
    diagnostic_plots: list[str] = dataclasses.field(default_factory=list)

    def diagnose(self, data: Path) -> dict[str, Any]:
        """The partitions' diagnostics of one output, at the model's depth (once per output)."""
        if str(data) not in self.diagnostics:
            self.diagnostics[str(data)] = diagnose_output(data, hops=self.config.num_layers).summary()
        return self.diagnostics[str(data)]

    def record(self, result: dict[str, Any], rows: list[dict[str, Any]]) -> None:
        """Keep a run's summary and curve, and rewrite the report: a long benchmark stopped
        midway keeps what it measured."""
        self.results.append(result)
        self.curves += [{**r, "dataset": result["dataset"], "k": result["k"], "strategy": result["strategy"],
                         "partitioner": result["partitioner"], "seed": result.get("seed")} for r in rows]
        _write(self)

    def plot(self, name: str, k: int) -> None:
        """The strategies' plots of one dataset and k, and the partitioners' when they ran."""
        curves = [c for c in self.curves if c["dataset"] == name]
        central = [{**c, "label": "centralized"} for c in curves if c["strategy"] == "centralized"]
        mine = [c for c in curves if c["k"] == k and c["strategy"] != "centralized"]
        by_strategy = [{**c, "label": c["strategy"]} for c in mine
                       if c["strategy"] == "fds" or c["partitioner"] == "asep"]
        by_partitioner = [{**c, "label": c["partitioner"]} for c in mine
                          if c["strategy"] == self.config.reconcile and c["partitioner"] in self.partitioners]
        metric = next((c["metric"] for c in curves), "metric")
        if by_strategy:
            self.plots += plot_curves(central + by_strategy, self.out, f"train-{name}-k{k}", f"{name}, k={k}", metric)
        if by_partitioner:
            self.plots += plot_curves(central + by_partitioner, self.out, f"train-{name}-k{k}-partitioners",
                                 f"{name}, k={k}: {self.config.reconcile} by partitioner", metric)


def _centralized(bench: _Bench, name: str, input_dir: Path, base: dict[str, Any]) -> float | None:
    """The centralized runs of one dataset, one per seed; returns the target: 95 % of
    their best validation metric, averaged over the seeds."""
    from asepr.training.centralized import run_centralized

    runs = []
    for seed in bench.seeds:
        bench.echo(f"bench train: {name}: centralized" + (f", seed {seed}" if len(bench.seeds) > 1 else ""))
        run_dir = bench.out / "runs" / name / f"centralized{_seed_suffix(bench, seed)}"
        config = dataclasses.replace(bench.config, seed=seed)
        rows = _finished(run_dir, centralized_config(config))
        if rows is None:
            t0 = time.perf_counter()
            rows = run_centralized(input_dir, run_dir, config)
            (run_dir / "bench.json").write_text(json.dumps({"wall_s": time.perf_counter() - t0}))
        runs.append((seed, run_dir, rows))
    target = TARGET_FRACTION * float(np.mean([max(float(r["val"]) for r in rows) for _, _, rows in runs]))
    for seed, run_dir, rows in runs:
        bench.record(_result({**base, "seed": seed}, 1, "centralized", "-", run_dir, rows, target, None), rows)
    return target


def _seed_suffix(bench: _Bench, seed: int) -> str:
    """Run directories carry the seed when the benchmark repeats seeds."""
    return f"-s{seed}" if len(bench.seeds) > 1 else ""


def _train_one(bench: _Bench, name: str, input_dir: Path, base: dict[str, Any], k: int, strategy: str,
               partitioner: str, target: float | None, seed: int) -> None:
    """One strategy at one k and seed on one partitioner's partitions (fds: on the input).
    The partitions are those of the benchmark's base seed whatever the training seed."""
    bench.echo(f"bench train: {name}: k={k}: {strategy}" + ("" if strategy == "fds" else f" on {partitioner}")
               + (f", seed {seed}" if len(bench.seeds) > 1 else ""))
    suffix = "" if partitioner == "asep" or strategy == "fds" else f"-{partitioner}"
    run_dir = bench.out / "runs" / name / f"k{k}-{strategy.replace('+', '-')}{suffix}{_seed_suffix(bench, seed)}"
    config = dataclasses.replace(bench.config, reconcile="avg" if strategy == "fds" else strategy, seed=seed)
    if strategy == "fds":
        data, manifest = input_dir, None
    else:
        data = _partition(input_dir, bench.cache, name, k, bench.config.seed, partitioner)
        manifest = read_manifest(data)
    rows = _launch(data, run_dir, config, k, strategy, bench.keep_runs, bench.echo)
    result = _result({**base, "seed": seed}, k, strategy, None if strategy == "fds" else partitioner, run_dir,
                     rows, target, manifest)
    if strategy != "fds":
        result.update(diagnostics_fields(bench.diagnose(data), rows))
    bench.record(result, rows)
    bench.echo(f"  final test {result.get('final_test', float('nan')):.4f} (at best val "
               f"{result.get('test_at_best_val', float('nan')):.4f}), epochs to target "
               f"{result.get('epochs_to_target')}, {result.get('bytes_per_epoch', 0) / 2**20:.2f} MiB/rank/epoch "
               f"(largest rank {result.get('bytes_per_epoch_max', 0) / 2**20:.2f})")


def bench_train(
    datasets: list[str],
    ks: list[int],
    strategies: list[str],
    out: Path,
    *,
    config: TrainConfig,
    partitioners: list[str] | None = None,
    cache: Path | None = None,
    keep_runs: bool = False,
    seeds: list[int] | None = None,
    echo=print,
) -> list[dict[str, Any]]:
    """Run every dataset × k × strategy × seed, and the default strategy on every
    partitioner (every seed); write the report files into ``out``; return one summary
    row per run. ``seeds`` (default: ``config.seed`` alone) are the training seeds; with
    more than one, ``train.md`` also gives the mean and the range over them
    (:func:`asepr.workflows.bench.train_report.over_seeds`) and the target is 95 % of the centralized runs' mean best
    validation metric."""
    out.mkdir(parents=True, exist_ok=True)
    partitioners = list(partitioners or [])
    unknown = [p for p in partitioners if p not in PARTITIONERS]
    if unknown:
        raise ValueError(f"Unsupported partitioners {unknown}. Valid choices are {', '.join(PARTITIONERS)}.")
    bench = _Bench(out=out, cache=cache or out / "inputs", config=config, strategies=list(strategies),
                   partitioners=partitioners, keep_runs=keep_runs, echo=echo,
                   started=time.strftime("%Y-%m-%d %H:%M"), machine=machine_info(),
                   seeds=list(dict.fromkeys(seeds or [config.seed])))
    versions = _versions()
    for dataset in datasets:
        name = Path(dataset).name
        input_dir = resolve_dataset(dataset, bench.cache)
        base = {"dataset": name, "model": config.model, "task": config.task, "rounds_config": config.rounds,
                "local_epochs": config.local_epochs, "eval_every_epochs": config.eval_interval,
                "hidden": config.hidden, "seed": config.seed, "feature_projection": config.feature_projection,
                **versions, "cores": bench.machine["cores"], "memory_gib": bench.machine["memory_gib"]}
        target = _centralized(bench, name, input_dir, base) if "centralized" in strategies else None
        for k in ks:
            for strategy in strategies:
                for seed in bench.seeds if strategy != "centralized" else ():
                    _train_one(bench, name, input_dir, base, k, strategy, "asep", target, seed)
            for partitioner in partitioners:
                for seed in bench.seeds if partitioner != "asep" or config.reconcile not in strategies else ():
                    _train_one(bench, name, input_dir, base, k, config.reconcile, partitioner, target, seed)
            bench.plot(name, k)
        diagnostic_plot = plot_diagnostics(bench.results, config.reconcile, out, name)
        bench.diagnostic_plots += [diagnostic_plot] if diagnostic_plot else []
        if not keep_runs:
            shutil.rmtree(out / "runs" / name, ignore_errors=True)
    _write(bench)
    return bench.results


def _headline_section(bench: _Bench) -> list[str]:
    """``train.md``'s headline: the default strategy against fds and centralized."""
    rows = headline(bench.results, bench.config.reconcile)
    if not rows:
        return []
    return [
        f"## Headline: ASEPR ({bench.config.reconcile}) against centralized and fds",
        "",
        ("Means over the seeds (lowest–highest in brackets). Gaps in points of the test metric at the best "
         "validation point. Times: training seconds to 95 % of the centralized best validation metric, "
         "averaged over the seeds that reached it; modelled @10G as below. Bytes: training traffic per epoch "
         "of the mean rank, and evaluation traffic per evaluation of the mean rank."),
        "",
        markdown_table(rows, HEADLINE_COLUMNS),
        "",
    ]


def _seed_section(bench: _Bench) -> list[str]:
    """``train.md``'s mean and range over the seeds (nothing with one seed)."""
    if len(bench.seeds) < 2 or not bench.results:
        return []
    rows = seed_table(bench.results)
    return [
        f"## Over seeds {', '.join(map(str, bench.seeds))}",
        "",
        ("Each cell: the mean over the seeds, and the lowest–highest seed in brackets. The target is 95 % of the "
         "centralized runs' best validation metric averaged over the seeds; `reached 95%`: the seeds that reached "
         "it, over which `s to 95%` is averaged. The partitions are the same for every seed (the base seed's); "
         "the seed sets the model's initialisation, dropout, sampling and the data order."),
        "",
        markdown_table(rows, list(rows[0])),
        "",
    ]


def _write(bench: _Bench) -> None:
    out, config = bench.out, bench.config
    if bench.results:
        pq.write_table(parquet_table(bench.results), out / "train.parquet")
    if bench.curves:
        pq.write_table(parquet_table(bench.curves), out / "train_rounds.parquet")
    table = table_rows(bench.results)
    strategies = [t for t in table if t["partitioner"] in ("asep", "-") or t["strategy"] == "fds"]
    lines = [
        "# asepr bench train",
        "",
        (f"Run {bench.started}; {bench.machine['cores']} cores, {bench.machine['memory_gib']} GiB; strategies "
         f"{', '.join(bench.strategies)}; model {config.model}, hidden {config.hidden}, {config.num_layers} layers, "
         f"{config.rounds} rounds × {config.local_epochs} local epochs ({config.rounds * config.local_epochs} "
         f"epochs for every strategy); evaluation {config.eval_mode} every {config.eval_interval} epochs; seeds "
         f"{', '.join(map(str, bench.seeds))}; feature projection {config.feature_projection or 'off'}; feature norm "
         f"{config.feature_norm}; defaults of TrainConfig otherwise."),
        "",
        ("Every strategy is evaluated on the same schedule, every "
         f"{config.eval_interval} epochs: centralized and fds exactly then, the ASEPR strategies at the first "
         "synchronisation (round end) at or after each multiple. `eval` is the evaluation: `exact` is the global "
         "model on the whole graph (the same for every strategy), `local` each rank's partition only (not exact). "
         "`test_at_best_val`: the test metric of the evaluation with the best validation metric; `test 95% "
         "interval` and `test scored`: its 95 % interval (Wilson's for accuracy, Hanley and McNeil's for ROC-AUC) "
         "and the test masters scored, of all (`--eval-sample`; the same vertices for every strategy). "
         "`epochs to 95%`: "
         "the first evaluation whose validation metric reaches 95 % of the centralized run's best; `s to 95%`: "
         "the training seconds until then (evaluation and process start-up excluded); `train_seconds` / "
         "`eval_seconds`: the whole run's training and evaluation seconds; `wall_s`: the whole launch."),
        "",
        *_headline_section(bench),
        markdown_table(strategies, STRATEGY_COLUMNS),
        "",
        *_seed_section(bench),
        *protocol_section(bench.results),
        *ogb_section(bench.results),
        "## Bytes and modelled network time",
        "",
        ("Bytes: training traffic sent per rank, as counted by `asepr.training.group.comm` (ring cost model for all_reduce / "
         "all_gather, exact for all_to_all), over the whole run divided by its epochs: `MiB/rank/epoch` is the "
         "mean over ranks, `max ...` the rank that sent the most; evaluation traffic apart (`eval MiB/rank/eval`, "
         "mean rank, per evaluation). **Modelled** (not measured): the time to 95 % on a cluster, the measured "
         "training seconds plus the busiest rank's bytes (training and evaluation) / bandwidth plus its messages × "
         f"{LATENCY_S * 1e6:g} µs, at {', '.join(f'{g}' for g in NETWORK_GBITS)} Gbit/s; the measured seconds "
         "already include this machine's loopback transfers, so the model errs on the slow side."),
        "",
        markdown_table(strategies, NETWORK_COLUMNS),
        "",
    ]
    by_partitioner = [t for t in table if t["strategy"] == config.reconcile and t["partitioner"] in bench.partitioners]
    if by_partitioner:
        lines += [
            f"## Partitioners ({config.reconcile})",
            "",
            (f"The default strategy ({config.reconcile}) on partitions from each partitioner at the same k. "
             "`label_entropy_mean`: the partitions' mean label entropy (bits; lower is more skewed, which is "
             "what makes the local models heterogeneous). "
             "Data placement: the feature rows each rank loads once before training (its partitions' masters, "
             "replicas and halo copies) × the stored row bytes, mean and largest rank. `modelled s to 95% @10G`: "
             "modelled, as above."),
            "",
            markdown_table(by_partitioner, PARTITIONER_COLUMNS),
            "",
        ]
    lines += diagnostics_section(bench.results, config.reconcile, config.num_layers, bench.diagnostic_plots)
    lines += [f"![{p}]({p})" for p in dict.fromkeys(bench.plots)]
    (out / "train.md").write_text("\n".join(lines) + "\n")
