"""``asepr bench train``'s "why local models differ" table and plot: per dataset, k and
partitioner, the partitions' label divergence, receptive-field coverage and training
seeds (:func:`asepr.pipeline.diagnose.diagnose_output`) beside the default strategy's drift in
its last round and its test metric (docs/design.md#diagnostics). Pure functions of the
run summaries, but for the figure.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from asepr.workflows.bench.tables import markdown_table, pyplot, save_figure

__all__ = ["DIAGNOSTIC_COLUMNS", "DIAGNOSTIC_FIELDS", "diagnostics_fields", "diagnostics_rows",
           "diagnostics_section", "plot_diagnostics"]

#: The partition figures a run's summary carries (from the diagnostics' summary).
DIAGNOSTIC_FIELDS = ("jsd_mean", "jsd_max", "coverage_mean", "coverage_min", "coverage_max", "seeds_min",
                     "seeds_mean", "seeds_max")
DIAGNOSTIC_COLUMNS = ["dataset", "k", "partitioner", "label JSD mean", "label JSD max", "coverage mean",
                      "coverage min–max", "seeds/rank min", "seeds/rank mean", "seeds/rank max", "drift mean",
                      "drift max", "test at best val"]


def diagnostics_fields(summary: dict[str, Any] | None, rows: list[dict[str, Any]]) -> dict[str, Any]:
    """A run's diagnostic fields: the partitions' figures (``summary``, None for a run on
    the input) and the drift of the run's last metrics row (None where the trainer has
    no drift columns)."""
    out: dict[str, Any] = {name: (summary or {}).get(name) for name in DIAGNOSTIC_FIELDS}
    last = rows[-1] if rows else {}
    for name in ("drift_mean", "drift_max"):
        value = last.get(name)
        out[name] = float(value) if isinstance(value, (int, float)) else None
    return out


def _mean(values: list[Any]) -> float | None:
    numbers = [float(v) for v in values if isinstance(v, (int, float))]
    return float(np.mean(numbers)) if numbers else None


def diagnostics_rows(results: list[dict[str, Any]], strategy: str) -> list[dict[str, Any]]:
    """One row per (dataset, k, partitioner) with partition diagnostics: its figures, and
    the drift and test metric at the best validation point of ``strategy``'s runs there
    (the mean over seeds; None where it did not run)."""
    groups: dict[tuple, list[dict[str, Any]]] = {}
    for r in results:
        if r.get("jsd_mean") is not None or r.get("seeds_mean") is not None:
            groups.setdefault((r["dataset"], r["k"], r["partitioner"]), []).append(r)
    out = []
    for (dataset, k, partitioner), runs in groups.items():
        mine = [r for r in runs if r["strategy"] == strategy]
        row = {"dataset": dataset, "k": k, "partitioner": partitioner,
               **{name: runs[0].get(name) for name in DIAGNOSTIC_FIELDS},
               "drift_mean": _mean([r.get("drift_mean") for r in mine]),
               "drift_max": _mean([r.get("drift_max") for r in mine]),
               "test_at_best_val": _mean([r.get("test_at_best_val") for r in mine])}
        out.append(row)
    return sorted(out, key=lambda r: (r["dataset"], r["partitioner"], r["k"]))


def _cell(value: Any, fmt: str) -> str:
    return "-" if value is None else format(value, fmt)


def diagnostics_section(results: list[dict[str, Any]], strategy: str, hops: int,
                        plots: list[str]) -> list[str]:
    """``train.md``'s "why local models differ" section (nothing without partition runs)."""
    rows = diagnostics_rows(results, strategy)
    if not rows:
        return []
    table = [{"dataset": r["dataset"], "k": r["k"], "partitioner": r["partitioner"],
              "label JSD mean": _cell(r["jsd_mean"], ".3f"), "label JSD max": _cell(r["jsd_max"], ".3f"),
              "coverage mean": _cell(r["coverage_mean"], ".3f"),
              "coverage min–max": f"{_cell(r['coverage_min'], '.3f')}–{_cell(r['coverage_max'], '.3f')}",
              "seeds/rank min": _cell(r["seeds_min"], ",.0f"), "seeds/rank mean": _cell(r["seeds_mean"], ",.1f"),
              "seeds/rank max": _cell(r["seeds_max"], ",.0f"), "drift mean": _cell(r["drift_mean"], ".4g"),
              "drift max": _cell(r["drift_max"], ".4g"), "test at best val": _cell(r["test_at_best_val"], ".4f")}
             for r in rows]
    return [
        "## Why the local models differ",
        "",
        ("Per partition (one per rank), its seeds being its training masters: `label JSD`, the Jensen–Shannon "
         "divergence (bits, 0 to 1) of its seeds' labels from all seeds' labels; `coverage`, the mean over its "
         f"seeds of the share of their {hops}-hop in-walks (the model's receptive field, messages passing as in "
         "training) whose every edge the partition stores; `seeds/rank`, its training masters. Mean and largest "
         "(coverage: lowest–highest) over the partitions. `drift`: the default strategy "
         f"({strategy}) in its last round, each rank's ‖θ_r − θ_g‖ at a synchronisation (its local model against "
         "the global model it started from) averaged over the round's synchronisations, mean and largest over "
         "ranks, with its test metric at the best validation point; means over seeds. A model loses where the "
         "divergence and the drift rise and the coverage and the seeds fall."),
        "",
        markdown_table(table, DIAGNOSTIC_COLUMNS),
        "",
        *[f"![{p}]({p})" for p in plots],
        "",
    ]


_PANELS = (("test_at_best_val", (), "test metric at best val"),
           ("jsd_mean", ("jsd_max",), "label JSD (bits): mean, max dashed"),
           ("coverage_mean", ("coverage_min",), "coverage: mean, min dashed"),
           ("seeds_mean", ("seeds_min",), "seeds per rank: mean, min dashed"),
           ("drift_mean", ("drift_max",), "drift ‖θ_r − θ_g‖: mean, max dashed"))


def plot_diagnostics(results: list[dict[str, Any]], strategy: str, out: Path, dataset: str) -> str | None:
    """``train-DATASET-diagnostics.png``: every figure of :func:`diagnostics_rows` against k,
    one colour per partitioner; its name, or None with fewer than two k or no matplotlib."""
    rows = [r for r in diagnostics_rows(results, strategy) if r["dataset"] == dataset]
    if len({r["k"] for r in rows}) < 2:
        return None
    plt = pyplot()
    if plt is None:
        return None
    central = _mean([r.get("test_at_best_val") for r in results
                     if r["dataset"] == dataset and r["strategy"] == "centralized"])
    ks = sorted({r["k"] for r in rows})
    fig, axes = plt.subplots(2, 3, figsize=(12, 6.4))
    if central is not None:
        axes.flat[0].axhline(central, color="grey", linestyle=":", label="centralized")
    for ax, (name, dashed, title) in zip(axes.flat, _PANELS):
        for partitioner in dict.fromkeys(r["partitioner"] for r in rows):
            mine = [r for r in rows if r["partitioner"] == partitioner and r.get(name) is not None]
            if not mine:
                continue
            (line,) = ax.plot([r["k"] for r in mine], [r[name] for r in mine], marker="o", markersize=3,
                              label=partitioner)
            for other in dashed:
                pairs = [(r["k"], r[other]) for r in mine if r.get(other) is not None]
                if pairs:
                    ax.plot(*zip(*pairs), linestyle="--", color=line.get_color(), alpha=0.7)
        ax.set_xscale("log", base=2)
        ax.set_xticks(ks, [str(k) for k in ks])
        ax.minorticks_off()
        ax.set_xlabel("k (partitions = ranks)")
        ax.set_title(title, fontsize=9)
        ax.grid(alpha=0.3)
    axes.flat[0].legend(fontsize=8)
    axes.flat[-1].axis("off")
    fig.suptitle(f"{dataset}: why the local models differ ({strategy})")
    name = f"train-{dataset}-diagnostics.png"
    save_figure(fig, out / name, dpi=110)
    return name
