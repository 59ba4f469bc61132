"""The summaries and tables of ``asepr bench train`` (:mod:`asepr.workflows.bench.train`): one
run's figures from its metrics rows, the network model, the means over seeds and the
headline against centralized and fds. Pure functions of the metrics rows.
"""

from __future__ import annotations

from typing import Any

import polars as pl

from asepr.training.protocol import LATENCY_S, NETWORK_GBITS, modelled_seconds
from asepr.workflows.bench.tables import markdown_table

__all__ = ["HEADLINE_COLUMNS", "LATENCY_S", "NETWORK_COLUMNS", "NETWORK_GBITS", "OGB_TABLE_COLUMNS",
           "PARTITIONER_COLUMNS", "SEED_FIELDS", "STRATEGY_COLUMNS", "headline", "modelled_seconds", "ogb_rows",
           "ogb_section", "over_seeds", "seed_table", "spread", "summarise_run", "table_rows"]


def _modelled(row: dict[str, Any] | None, prefix: str) -> dict[str, float | None]:
    """The modelled seconds at each bandwidth up to a metrics row (None without one).

    The bytes and messages are those of training and of every evaluation so far (the
    busiest rank's ``bytes_sent_total_max`` and ``messages_sent_total_max``): a run
    learns that it reached its target by evaluating. Rows written before those columns
    existed fall back to the training traffic alone.
    """
    if row is None:
        return {f"{prefix}_{g}gbit": None for g in NETWORK_GBITS}
    sent = row.get("bytes_sent_total_max", row.get("bytes_sent_cum_max", 0.0))
    messages = row.get("messages_sent_total_max", row.get("messages_sent_cum_max", 0.0))
    return {f"{prefix}_{g}gbit": modelled_seconds(row["elapsed_s"], sent, messages, g) for g in NETWORK_GBITS}


def summarise_run(rows: list[dict[str, Any]], target: float | None) -> dict[str, Any]:
    """Final and best-validation metrics, epochs and seconds to ``target``, bytes per epoch.

    Seconds are training seconds (evaluation excluded), measured and modelled
    (``modelled_s_to_target_<g>gbit``, ``modelled_train_s_<g>gbit``, see
    :func:`modelled_seconds`). Bytes: ``bytes_per_epoch`` is the training traffic of the
    mean rank over the whole run divided by its epochs, ``bytes_per_epoch_max`` that of
    the largest rank, and ``eval_bytes_per_eval`` the mean rank's traffic per evaluation,
    which the others leave out.
    """
    if not rows:
        return {"rounds": 0}
    last = rows[-1]
    reached = next((r for r in rows if target is not None and float(r["val"]) >= target), None)
    best = max(rows, key=lambda r: float(r["val"]))
    epochs = float(last["epoch"]) or 1.0  # fractional when rounds end mid-epoch (sync in steps)
    return {
        "rounds": int(last["round"]),
        "epochs": last["epoch"],
        "eval_mode": last["eval_mode"],
        "final_val": float(last["val"]),
        "final_test": float(last["test"]),
        "best_val": float(best["val"]),
        "test_at_best_val": float(best["test"]),
        "best_epoch": best["epoch"],
        **_interval(best),
        "epochs_to_target": reached["epoch"] if reached else None,
        "seconds_to_target": float(reached["elapsed_s"]) if reached else None,
        "bytes_to_target_max": float(reached["bytes_sent_cum_max"]) if reached else None,
        **_modelled(reached, "modelled_s_to_target"),
        "train_seconds": float(last["elapsed_s"]),
        **_modelled(last, "modelled_train_s"),
        "eval_seconds": float(last["eval_elapsed_s"]),
        "bytes_per_epoch": float(last["bytes_sent_cum"]) / epochs,
        "bytes_per_epoch_max": float(last["bytes_sent_cum_max"]) / epochs,
        "messages_per_epoch_max": float(last["messages_sent_cum_max"]) / epochs,
        "eval_bytes_per_eval": sum(float(r["eval_bytes_sent_round"]) for r in rows) / len(rows),
        **_peak_rss(rows),
    }


def _interval(best: dict[str, Any]) -> dict[str, Any]:
    """The test metric's 95 % interval at the best validation point and the targets it was
    measured on (``test_scored`` of ``test_split``; NaN for rows without them)."""
    def number(key: str) -> float:
        value = best.get(key)
        return float(value) if value not in (None, "") else float("nan")

    return {key: number(key) for key in ("test_ci_low", "test_ci_high", "test_scored", "test_split")}


def _peak_rss(rows: list[dict[str, Any]]) -> dict[str, float]:
    """The run's peak RSS per rank (each rank's own ``VmHWM``, mean and largest over the
    ranks, the largest evaluation-to-training ratio); NaN for rows written before the
    ranks reported their own peak."""
    nan = float("nan")
    last = rows[-1]
    if "peak_rss_mib_mean" not in last:
        return {"peak_rss_mib_mean": nan, "peak_rss_mib_max": nan, "eval_peak_ratio_max": nan}
    ratios = [float(r["eval_peak_ratio_max"]) for r in rows if r.get("eval_peak_ratio_max") not in (None, "")]
    return {"peak_rss_mib_mean": float(last["peak_rss_mib_mean"]), "peak_rss_mib_max": float(last["peak_rss_mib"]),
            "eval_peak_ratio_max": max(ratios) if ratios else nan}


def _mib(value: Any) -> Any:
    return value / 2**20 if isinstance(value, (int, float)) else "-"


def table_rows(results: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The summaries with the report's column names (MiB, "not reached")."""
    rows = []
    for r in results:
        t = dict(r)
        for key, column in (("bytes_per_epoch", "MiB/rank/epoch"), ("bytes_per_epoch_max", "max MiB/rank/epoch"),
                            ("eval_bytes_per_eval", "eval MiB/rank/eval"),
                            ("placement_bytes_mean", "placement MiB/rank"),
                            ("placement_bytes_max", "max placement MiB/rank")):
            t[column] = _mib(r.get(key))
        t["peak RSS MiB/rank"] = r.get("peak_rss_mib_mean", "-")
        t["max peak RSS MiB/rank"] = r.get("peak_rss_mib_max", "-")
        t["eval/train peak"] = r.get("eval_peak_ratio_max", "-")
        reached = r.get("epochs_to_target") is not None
        t["epochs to 95%"] = r["epochs_to_target"] if reached else "not reached"
        t["s to 95%"] = r["seconds_to_target"] if reached else "-"
        for g in NETWORK_GBITS:
            t[f"modelled s to 95% @{g}G"] = r[f"modelled_s_to_target_{g}gbit"] if reached else "-"
        t["eval"] = r.get("eval_mode", "-")
        low, high = r.get("test_ci_low"), r.get("test_ci_high")
        t["test 95% interval"] = f"{low:.4f}–{high:.4f}" if isinstance(low, float) and low == low else "-"
        scored = r.get("test_scored")
        t["test scored"] = (f"{int(scored):,} of {int(r['test_split']):,}"
                            if isinstance(scored, float) and scored == scored else "-")
        rows.append(t)
    return rows


#: What :func:`over_seeds` groups by.
KEYS = ["dataset", "k", "strategy", "partitioner"]
#: The summary fields :func:`over_seeds` averages.
SEED_FIELDS = ("test_at_best_val", "final_test", "best_val", "seconds_to_target", "modelled_s_to_target_1gbit",
               "modelled_s_to_target_10gbit", "modelled_s_to_target_100gbit", "epochs_to_target",
               "train_seconds", "bytes_per_epoch", "bytes_per_epoch_max", "eval_bytes_per_eval", "replication_factor")


def over_seeds(results: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per (dataset, k, strategy, partitioner): the mean of every
    :data:`SEED_FIELDS` field over the seeds that have it, with its range
    (``FIELD_seedmin``, ``FIELD_seedmax``), the number of seeds (``seeds``) and, for the target,
    how many reached it (``reached``). A time to the target is averaged over the seeds
    that reached it; ``reached < seeds`` says that some did not. A polars group-by: a
    field that is not a number in a run (None, "-") is missing for that seed."""
    if not results:
        return []
    df = pl.DataFrame(results, infer_schema_length=None, strict=False)
    aggs = [pl.col("eval_mode").first() if "eval_mode" in df.columns else pl.lit(None).alias("eval_mode"),
            pl.len().alias("seeds"), pl.col("seconds_to_target").cast(pl.Float64, strict=False).is_not_null().sum()
            .alias("reached") if "seconds_to_target" in df.columns else pl.lit(0).alias("reached")]
    for name in SEED_FIELDS:
        col = pl.col(name).cast(pl.Float64, strict=False) if name in df.columns else pl.lit(None, pl.Float64)
        aggs += [col.mean().alias(name), col.min().alias(f"{name}_seedmin"), col.max().alias(f"{name}_seedmax")]
    return df.group_by(KEYS, maintain_order=True).agg(aggs).to_dicts()


def spread(row: dict[str, Any], name: str, digits: int = 4, scale: float = 1.0) -> str:
    """``mean (min–max)`` of an :func:`over_seeds` field; "-" when no seed has it."""
    if row.get(name) is None:
        return "-"
    mean, low, high = (row[key] / scale for key in (name, f"{name}_seedmin", f"{name}_seedmax"))
    if row["seeds"] == 1 or low == high:
        return f"{mean:.{digits}f}"
    return f"{mean:.{digits}f} ({low:.{digits}f}–{high:.{digits}f})"


HEADLINE_COLUMNS = ["dataset", "k", "seeds", "centralized test@best val", "asepr test@best val",
                    "fds test@best val", "asepr − centralized (points)", "asepr − fds (points)", "asepr s to 95%",
                    "fds s to 95%", "fds/asepr time", "asepr modelled s @10G", "fds modelled s @10G",
                    "fds/asepr modelled @10G", "asepr MiB/epoch", "fds MiB/epoch", "fds/asepr bytes",
                    "asepr eval MiB/eval", "fds eval MiB/eval", "asepr final test", "fds final test"]


def _to_target(row: dict[str, Any], key: str) -> str:
    """Mean seconds to the target over the seeds that reached it, and how many did."""
    if row.get(key) is None:
        return "not reached"
    return spread(row, key, 1) + ("" if row["reached"] == row["seeds"] else f" ({row['reached']}/{row['seeds']} seeds)")


def _ratio(numerator: Any, denominator: Any) -> Any:
    ok = all(isinstance(v, (int, float)) for v in (numerator, denominator)) and denominator
    return f"{numerator / denominator:.2f}" if ok else "-"


def _points(a: dict[str, Any], b: dict[str, Any], key: str = "test_at_best_val") -> str:
    """``a − b`` of the seed means, in points (hundredths)."""
    ok = a.get(key) is not None and b.get(key) is not None
    return f"{100 * (a[key] - b[key]):+.2f}" if ok else "-"


def headline(results: list[dict[str, Any]], strategy: str) -> list[dict[str, Any]]:
    """ASEPR (``strategy`` on ASEP partitions) against fds and centralized per dataset
    and k, over the seeds (:func:`over_seeds`): test metric at the best validation
    point and final, their gaps in points, training seconds to 95 % of centralized
    (measured, and modelled at 10 Gbit/s), and bytes per epoch of the mean rank."""
    by_key = {(r["dataset"], r["k"], r["strategy"]): r for r in over_seeds(results)
              if r["partitioner"] in ("asep", "-") or r["strategy"] == "fds"}
    modelled = "modelled_s_to_target_10gbit"
    out = []
    for (dataset, k, name), r in by_key.items():
        if name != strategy or (dataset, k, "fds") not in by_key:
            continue
        f = by_key[dataset, k, "fds"]
        c = by_key.get((dataset, 1, "centralized"), {})
        out.append({
            "dataset": dataset, "k": k, "seeds": r["seeds"],
            "centralized test@best val": spread(c, "test_at_best_val") if c else "-",
            "asepr test@best val": spread(r, "test_at_best_val"), "fds test@best val": spread(f, "test_at_best_val"),
            "asepr − centralized (points)": _points(r, c) if c else "-", "asepr − fds (points)": _points(r, f),
            "asepr s to 95%": _to_target(r, "seconds_to_target"), "fds s to 95%": _to_target(f, "seconds_to_target"),
            "fds/asepr time": _ratio(f.get("seconds_to_target"), r.get("seconds_to_target")),
            "asepr modelled s @10G": _to_target(r, modelled), "fds modelled s @10G": _to_target(f, modelled),
            "fds/asepr modelled @10G": _ratio(f.get(modelled), r.get(modelled)),
            "asepr MiB/epoch": spread(r, "bytes_per_epoch", 3, 2**20),
            "fds MiB/epoch": spread(f, "bytes_per_epoch", 3, 2**20),
            "fds/asepr bytes": _ratio(f.get("bytes_per_epoch"), r.get("bytes_per_epoch")),
            "asepr eval MiB/eval": spread(r, "eval_bytes_per_eval", 3, 2**20),
            "fds eval MiB/eval": spread(f, "eval_bytes_per_eval", 3, 2**20),
            "asepr final test": spread(r, "final_test"), "fds final test": spread(f, "final_test"),
        })
    return out


def seed_table(results: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The rows of ``train.md``'s table over seeds."""
    rows = []
    for r in over_seeds(results):
        reached = f"{r['reached']}/{r['seeds']}"
        rows.append({
            "dataset": r["dataset"], "k": r["k"], "strategy": r["strategy"], "partitioner": r["partitioner"],
            "seeds": r["seeds"], "test at best val": spread(r, "test_at_best_val"),
            "final test": spread(r, "final_test"), "best val": spread(r, "best_val"), "reached 95%": reached,
            "s to 95%": spread(r, "seconds_to_target", 1), "modelled s to 95% @10G":
                spread(r, "modelled_s_to_target_10gbit", 1),
            "MiB/rank/epoch": spread(r, "bytes_per_epoch", 3, 2**20),
            "max MiB/rank/epoch": spread(r, "bytes_per_epoch_max", 3, 2**20),
            "eval MiB/rank/eval": spread(r, "eval_bytes_per_eval", 3, 2**20),
        })
    return rows


STRATEGY_COLUMNS = ["dataset", "k", "strategy", "eval", "final_test", "test_at_best_val", "test 95% interval",
                    "test scored", "best_val",
                    "epochs to 95%", "s to 95%", "train_seconds", "eval_seconds", "wall_s", "peak RSS MiB/rank",
                    "max peak RSS MiB/rank", "eval/train peak"]
NETWORK_COLUMNS = ["dataset", "k", "strategy", "MiB/rank/epoch", "max MiB/rank/epoch", "messages_per_epoch_max",
                   "eval MiB/rank/eval", "s to 95%", *(f"modelled s to 95% @{g}G" for g in NETWORK_GBITS)]
PARTITIONER_COLUMNS = ["dataset", "k", "partitioner", "replication_factor", "label_entropy_mean", "final_test",
                       "test_at_best_val", "epochs to 95%", "s to 95%", "modelled s to 95% @10G",
                       "placement MiB/rank", "max placement MiB/rank", "MiB/rank/epoch"]


OGB_TABLE_COLUMNS = ["dataset", "k", "strategy", "partitioner", "seed", "OGB metric", "OGB valid", "OGB test",
                     "round"]


def ogb_rows(results: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The rows of ``train.md``'s OGB table: each run scored by its dataset's OGB evaluator
    (:func:`asepr.training.evaluation.ogb_eval.ogb_columns`), or why it was not; none for other inputs."""
    rows = []
    for r in results:
        if r.get("ogb_metric") is None and not r.get("ogb_error"):
            continue
        scored = r.get("ogb_metric") is not None
        rows.append({
            "dataset": r.get("ogb_dataset") or r["dataset"], "k": r["k"], "strategy": r["strategy"],
            "partitioner": r["partitioner"], "seed": r.get("seed"),
            "OGB metric": r["ogb_metric"] if scored else "not scored: " + str(r["ogb_error"]).replace("|", "/"),
            "OGB valid": f"{r['ogb_valid']:.4f}" if scored else "-",
            "OGB test": f"{r['ogb_test']:.4f}" if scored else "-",
            "round": r.get("ogb_round", "-"),
        })
    return rows


def ogb_section(results: list[dict[str, Any]]) -> list[str]:
    """``train.md``'s OGB section (nothing when no run trained on an `asepr import ogb` input)."""
    rows = ogb_rows(results)
    if not rows:
        return []
    return [
        "## OGB's evaluator",
        "",
        ("Each run's last global model scored as the `ogb` package's `Evaluator` scores it, with the dataset's own "
         "metric (`acc` for ogbn node datasets, `hits@K` or `mrr` for ogbl link datasets, from OGB's catalogue), "
         "on OGB's published valid and test sets (for a link dataset its held-out edges and negatives, every "
         "training edge passing messages); comparable with OGB's leaderboards, which report the test figure at "
         "the best valid one over 10 seeds. `round`: the round of the model scored (the run's last). A link run "
         "still holds out its own share of OGB's training edges for its metrics rows, so it trained on fewer "
         "edges than OGB's protocol allows."),
        "",
        markdown_table(rows, OGB_TABLE_COLUMNS),
        "",
    ]
