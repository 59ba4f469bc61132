"""``asepr bench train``'s time-to-accuracy view (:mod:`asepr.training.protocol`).

Each run trains until its validation metric has not improved for ``--patience``
evaluations, or for ``--max-epochs`` epochs, on the same evaluation schedule for every
strategy. For each run: the test metric at its best validation point, the epoch it
stopped at, and the **modelled cluster time** (:func:`asepr.training.protocol.time_to_fraction`:
the slowest rank's CPU seconds summed over the rounds, plus the busiest rank's training
and evaluation bytes over the bandwidth and its messages times the latency) to 95 % and
to 99 % of the centralized run's best validation metric, at 1, 10 and 100 Gbit/s. The
fixed-epoch tables of :mod:`asepr.workflows.bench.train_report` stay beside it.
"""

from __future__ import annotations

from typing import Any

from asepr.training.protocol import NETWORK_GBITS, best_row, time_to_fraction
from asepr.workflows.bench.tables import markdown_table

__all__ = ["FRACTIONS", "PROTOCOL_COLUMNS", "protocol_columns", "protocol_section"]

#: Fractions of centralized's best validation metric whose modelled time is reported.
FRACTIONS = (0.95, 0.99)


def _key(fraction: float, gbit: float) -> str:
    return f"cluster_s_to_{round(fraction * 100)}_{gbit}gbit"


def protocol_columns(rows: list[dict[str, Any]], central_best: float | None) -> dict[str, Any]:
    """A run's time-to-accuracy summary: ``stop_epoch``, ``compute_s`` (the slowest
    ranks' CPU seconds summed), and ``cluster_s_to_<95|99>_<g>gbit`` (None when the run
    never reached that fraction of ``central_best``)."""
    if not rows:
        return {}
    best = best_row(rows)
    out: dict[str, Any] = {"stop_epoch": rows[-1]["epoch"], "best_val_epoch": best["epoch"],
                           "compute_s": rows[-1].get("compute_s_cum_max")}
    for fraction in FRACTIONS:
        target = None if central_best is None else fraction * central_best
        for g in NETWORK_GBITS:
            out[_key(fraction, g)] = time_to_fraction(rows, target, g)
    return out


PROTOCOL_COLUMNS = ["dataset", "k", "strategy", "seed", "test at best val", "best val epoch", "stopped at epoch",
                    "compute s", *(f"cluster s to {round(f * 100)}% @{g}G" for f in FRACTIONS for g in NETWORK_GBITS)]


def _cell(value: Any, digits: int = 1) -> str:
    return "not reached" if value is None else f"{float(value):.{digits}f}"


def protocol_section(results: list[dict[str, Any]]) -> list[str]:
    """``train.md``'s time-to-accuracy table (nothing when no run has the columns)."""
    runs = [r for r in results if "stop_epoch" in r and (r["partitioner"] in ("asep", "-") or r["strategy"] == "fds")]
    if not runs:
        return []
    table = [{"dataset": r["dataset"], "k": r["k"], "strategy": r["strategy"], "seed": r.get("seed"),
              "test at best val": f"{r['test_at_best_val']:.4f}", "best val epoch": r["best_val_epoch"],
              "stopped at epoch": r["stop_epoch"], "compute s": _cell(r.get("compute_s")),
              **{f"cluster s to {round(f * 100)}% @{g}G": _cell(r.get(_key(f, g))) for f in FRACTIONS
                 for g in NETWORK_GBITS}} for r in runs]
    return [
        "## Time to accuracy (modelled cluster time)",
        "",
        ("Each run stops once its validation metric has not improved for the patience's evaluations (or at its "
         "epoch cap). `compute s`: the cluster's compute, each round's slowest rank's CPU seconds of training "
         "(its own process's, evaluation excluded) summed over the rounds, as one machine per rank would spend "
         "it. **Modelled** (not measured): `cluster s to X%` adds the busiest rank's training and evaluation "
         "bytes over the bandwidth and its messages × 50 µs, up to the first evaluation at X % of the centralized "
         "run's best validation metric."),
        "",
        markdown_table(table, PROTOCOL_COLUMNS),
        "",
    ]
