"""``asepr plot`` and ``asepr inspect --plot``: pictures of runs and of partitions.

``asepr plot RUN_DIR [RUN_DIR ...]`` reads each run directory's ``metrics.csv`` (one row
per evaluation, columns in :mod:`asepr.training.loop.rounds`) and draws the runs overlaid, so that
a partitioned run and its baselines compare at a glance:

* ``plot-epochs.png``: validation and test metric against the epochs trained;
* ``plot-time.png``: the same against modelled cluster seconds
  (:func:`asepr.training.protocol.cluster_seconds`: the slowest rank's compute plus the
  busiest rank's bytes and messages over a network of ``--gbit``), the time axis of
  the project's time-to-accuracy comparisons;
* ``plot-bytes.png``: the bytes each rank sent per epoch of training (mean over ranks).

The figures are written beside the runs: into the directory that holds the first run
directory (``--out`` elsewhere). ``asepr inspect OUT --plot`` draws one figure of an
output's partitions: their edges, masters, replicas (node rows that are not masters)
and the labels of their masters, one bar per partition.

Drawing uses matplotlib's Agg backend (no display needed). The functions return the
figures they wrote (closed, but their axes intact), for callers that look at them.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import numpy as np

from asepr.storage.errors import AseprError, InputError, format_problem
from asepr.storage.locations.location import is_local_url
from asepr.storage.locations.remote import add_storage_options_flag, remote_errors_as_problems
from asepr.workflows.bench.tables import pyplot, save_figure

__all__ = ["RUN_FIGURES", "plot_partitions", "plot_runs", "register"]

#: The figures of :func:`plot_runs`, by name: file name and title.
RUN_FIGURES = {
    "epochs": ("plot-epochs.png", "against epochs"),
    "time": ("plot-time.png", "against modelled cluster time"),
    "bytes": ("plot-bytes.png", "bytes sent per epoch"),
}
_DPI = 120


def _labels(run_dirs: list[str]) -> list[str]:
    """Each run's name in the legend: its directory's name, with its parent's when two agree."""
    names = [Path(str(r).rstrip("/")).name for r in run_dirs]
    return [f"{Path(str(r).rstrip('/')).parent.name}/{n}" if names.count(n) > 1 else n
            for r, n in zip(run_dirs, names)]


def _read_runs(run_dirs: list[str], storage_options: dict | None) -> list[list[dict[str, Any]]]:
    from asepr.training.rundir.checkpoint import RunDir

    runs = []
    for run_dir in run_dirs:
        with remote_errors_as_problems(str(run_dir)):
            rows = RunDir(run_dir, storage_options).read_metrics()
        if not rows:
            raise InputError(format_problem(
                f"run directory {run_dir}", "a metrics.csv with one row per evaluated round",
                "no metrics.csv (or an empty one)",
                "pass the run directory `asepr train` printed, after at least one round has finished."))
        runs.append(rows)
    return runs


def _modelled_seconds(rows: list[dict[str, Any]], gbit: float) -> list[float]:
    """Each row's modelled cluster seconds, the evaluation traffic so far folded in (as
    :func:`asepr.training.protocol.time_to_fraction` counts it)."""
    from asepr.training.protocol import cluster_seconds

    seconds, eval_bytes = [], 0.0
    for row in rows:
        eval_bytes += float(row.get("eval_bytes_sent_round_max", 0.0) or 0.0)
        seconds.append(cluster_seconds(row, gbit, eval_bytes=eval_bytes))
    return seconds


def _bytes_per_epoch(rows: list[dict[str, Any]]) -> tuple[list[float], list[float]]:
    """``(epochs, MiB per epoch)``: each row's training bytes (mean over ranks) over the
    epochs trained since the row before."""
    epochs, per_epoch, before = [], [], 0.0
    for row in rows:
        epoch = float(row.get("epoch", row["round"]))
        trained = max(epoch - before, 1e-9)
        epochs.append(epoch)
        per_epoch.append(float(row.get("bytes_sent_round", 0.0) or 0.0) / trained / 2**20)
        before = epoch
    return epochs, per_epoch


def plot_runs(run_dirs: list[str | Path], *, out_dir: str | Path | None = None, gbit: float = 10.0,
              storage_options: dict | None = None) -> dict[str, tuple[Any, Path]]:
    """Draw the runs of ``run_dirs`` overlaid (:data:`RUN_FIGURES`) and write the PNGs.

    Parameters
    ----------
    run_dirs
        Run directories of ``asepr train`` (partitioned, ``--centralized`` or fds).
    out_dir
        Where to write the figures (default: the directory holding the first run).
    gbit
        The modelled network's bandwidth in Gbit/s for the time axis.

    Returns
    -------
    dict
        Figure name -> ``(figure, path)``.

    Raises
    ------
    InputError
        A run directory without metrics.
    """
    plt = pyplot()
    if plt is None:
        raise AseprError("asepr plot needs matplotlib: pip install matplotlib")
    run_dirs = [str(r) for r in run_dirs]
    runs = _read_runs(run_dirs, storage_options)
    labels = _labels(run_dirs)
    metric = runs[0][-1].get("metric", "metric")
    target = Path(out_dir) if out_dir is not None else (
        Path(run_dirs[0].rstrip("/")).parent if is_local_url(run_dirs[0], storage_options) else Path.cwd())
    target.mkdir(parents=True, exist_ok=True)
    written: dict[str, tuple[Any, Path]] = {}
    for name, x_of, xlabel in (("epochs", lambda rows: [float(r.get("epoch", r["round"])) for r in rows], "epoch"),
                               ("time", lambda rows: _modelled_seconds(rows, gbit),
                                f"modelled cluster seconds ({gbit:g} Gbit/s)")):
        fig, axes = plt.subplots(1, 2, figsize=(11, 4), sharex=True)
        for rows, label in zip(runs, labels):
            x = x_of(rows)
            axes[0].plot(x, [float(r["val"]) for r in rows], marker=".", label=label)
            axes[1].plot(x, [float(r["test"]) for r in rows], marker=".", label=label)
        for ax, which in zip(axes, ("validation", "test")):
            ax.set_xlabel(xlabel)
            ax.set_ylabel(f"{which} {metric}")
            ax.grid(alpha=0.3)
        axes[1].legend(fontsize=8)
        fig.suptitle(f"{metric} {RUN_FIGURES[name][1]}")
        written[name] = (fig, target / RUN_FIGURES[name][0])
    fig, ax = plt.subplots(figsize=(6, 4))
    for rows, label in zip(runs, labels):
        ax.plot(*_bytes_per_epoch(rows), marker=".", label=label)
    ax.set_xlabel("epoch")
    ax.set_ylabel("MiB per epoch and rank (mean)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.suptitle(RUN_FIGURES["bytes"][1])
    written["bytes"] = (fig, target / RUN_FIGURES["bytes"][0])
    for fig, path in written.values():
        save_figure(fig, path, _DPI)
    return written


def _label_counts(out: str, manifest: dict[str, Any], storage_options: dict | None) -> np.ndarray:
    """``[k, C]``: the labels of each partition's masters (unlabelled ones left out)."""
    from asepr.storage import open_partition

    counts = []
    for entry in sorted(manifest["partitions"], key=lambda e: int(e["part_id"])):
        store = open_partition(out, int(entry["part_id"]), storage_options=storage_options)
        arrays = store.to_numpy(["nodes/y", "nodes/is_master"])
        labels = arrays["nodes/y"][arrays["nodes/is_master"].astype(bool)]
        counts.append(np.bincount(labels[labels >= 0], minlength=1))
    width = max(len(c) for c in counts)
    return np.stack([np.pad(c, (0, width - len(c))) for c in counts])


def plot_partitions(out: str | Path, *, path: str | Path | None = None,
                    storage_options: dict | None = None) -> tuple[Any, Path]:
    """Draw an output's partitions (edges, masters, replicas, labels of the masters) into
    ``path`` (default: ``OUT.partitions.png`` beside a local output, in the working
    directory for a remote one). Returns ``(figure, path)``."""
    from asepr.storage.partitions.manifest import read_manifest

    plt = pyplot()
    if plt is None:
        raise AseprError("asepr inspect --plot needs matplotlib: pip install matplotlib")
    out = str(out)
    with remote_errors_as_problems(out):
        manifest = read_manifest(out, storage_options=storage_options)
        labels = _label_counts(out, manifest, storage_options)
    entries = sorted(manifest["partitions"], key=lambda e: int(e["part_id"]))
    parts = np.arange(len(entries))
    counts = {key: np.array([int(e.get("counts", {}).get(key, 0)) for e in entries]) for key in
              ("edges", "masters", "nodes")}
    fig, axes = plt.subplots(2, 2, figsize=(11, 7))
    for ax, values, title in ((axes[0, 0], counts["edges"], "edges"), (axes[0, 1], counts["masters"], "masters"),
                              (axes[1, 0], counts["nodes"] - counts["masters"], "replicas (node rows not mastered)")):
        ax.bar(parts, values)
        ax.set_title(title)
    bottom = np.zeros(len(entries))
    for c in range(labels.shape[1]):
        axes[1, 1].bar(parts, labels[:, c], bottom=bottom, label=f"class {c}")
        bottom += labels[:, c]
    axes[1, 1].set_title("labels of the masters")
    if labels.shape[1] <= 12:
        axes[1, 1].legend(fontsize=7, ncol=2)
    for ax in axes.flat:
        ax.set_xlabel("partition")
        ax.set_xticks(parts)
    fig.suptitle(f"{out}: {manifest.get('algorithm')}, k = {manifest['num_parts']}, generation "
                 f"{manifest['generation']}")
    if path is None:
        name = Path(out.rstrip("/")).name + ".partitions.png"
        path = Path(out.rstrip("/")).parent / name if is_local_url(out, storage_options) else Path.cwd() / name
    save_figure(fig, Path(path), _DPI)
    return fig, Path(path)


def _cmd_plot(args: argparse.Namespace) -> int:
    from asepr.workflows.extras import require_extra

    require_extra("torch", "asepr plot, which reads training runs")
    written = plot_runs(args.run_dirs, out_dir=args.out, gbit=args.gbit, storage_options=args.storage_options or None)
    if not args.quiet:
        for _, path in written.values():
            print(f"wrote {path}")
    return 0


def register(subparsers, add_common) -> None:
    """Add ``asepr plot`` to the ``asepr`` parser."""
    p = subparsers.add_parser("plot", help="draw training runs side by side: accuracy against epochs and modelled "
                                           "time, bytes per epoch")
    add_common(p)
    p.add_argument("run_dirs", nargs="+", metavar="RUN_DIR", help="run directories of `asepr train`")
    p.add_argument("--out", default=None, help="directory for the PNGs (default: the one holding the first RUN_DIR)")
    p.add_argument("--gbit", type=float, default=10.0,
                   help="bandwidth of the modelled network for the time axis, in Gbit/s (default 10)")
    add_storage_options_flag(p)
    p.set_defaults(handler=_cmd_plot)
