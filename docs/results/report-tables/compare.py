"""The benchmark reports' tables with dictionary rows against polars, side by side.

    python docs/results/report-tables/compare.py TRAIN_PARQUET [TRAIN_PARQUET ...]

For every given ``train.parquet`` (written by ``asepr bench train``), both versions of the
two steps that a dataframe library would take over are run on the same rows:

* the mean, min and max of every summary field over the seeds: the dictionary version
  that the reports used before (``over_seeds_dicts`` below) against the polars
  ``group_by`` that ``asepr.workflows.bench.train_report.over_seeds`` is now;
* the Markdown table: ``asepr.workflows.bench.tables.markdown_table`` against polars' own table
  formatting (``pl.Config(tbl_formatting="MARKDOWN")``).

It prints whether the results agree, the lines of code of each version (``inspect``), and
the seconds of each, best of 20 runs.
"""

from __future__ import annotations

import ast
import inspect
import textwrap
import sys
import time

import numpy as np
import polars as pl
import pyarrow.parquet as pq

from asepr.workflows.bench.tables import markdown_table
from asepr.workflows.bench.train_report import SEED_FIELDS, over_seeds

def over_seeds_dicts(results: list[dict]) -> list[dict]:
    groups: dict[tuple, list[dict]] = {}
    for r in results:
        groups.setdefault((r["dataset"], r["k"], r["strategy"], r["partitioner"]), []).append(r)
    out = []
    for (dataset, k, strategy, partitioner), rows in groups.items():
        row = {"dataset": dataset, "k": k, "strategy": strategy, "partitioner": partitioner,
               "eval_mode": rows[0].get("eval_mode"), "seeds": len(rows),
               "reached": sum(r.get("seconds_to_target") is not None for r in rows)}
        for name in SEED_FIELDS:
            values = [float(r[name]) for r in rows if isinstance(r.get(name), (int, float))]
            row[name] = float(np.mean(values)) if values else None
            row[f"{name}_seedmin"] = min(values) if values else None
            row[f"{name}_seedmax"] = max(values) if values else None
        out.append(row)
    return out


def markdown_polars(rows: list[dict], columns: list[str]) -> str:
    df = pl.DataFrame(rows, infer_schema_length=None, strict=False).select(columns)
    with pl.Config(tbl_formatting="MARKDOWN", tbl_hide_column_data_types=True, tbl_hide_dataframe_shape=True,
                   tbl_rows=-1, tbl_cols=-1, fmt_str_lengths=200, float_precision=3, thousands_separator=","):
        return str(df)


def best_of(fn, *args, runs: int = 20) -> float:
    best = float("inf")
    for _ in range(runs):
        t0 = time.perf_counter()
        fn(*args)
        best = min(best, time.perf_counter() - t0)
    return best


def lines(fn) -> int:
    """Lines of code of ``fn``'s body: no docstring, comment or blank line."""
    tree = ast.parse(textwrap.dedent(inspect.getsource(fn))).body[0]
    body = tree.body[1:] if isinstance(tree.body[0], ast.Expr) and isinstance(tree.body[0].value, ast.Constant) else tree.body
    source = inspect.getsource(fn).splitlines()
    first = body[0].lineno - 1
    return sum(1 for line in source[first:] if line.strip() and not line.strip().startswith("#"))


def main(paths: list[str]) -> None:
    for path in paths:
        results = pq.read_table(path).to_pylist()
        ours, theirs = over_seeds_dicts(results), over_seeds(results)
        same = len(ours) == len(theirs) and all(
            all((a.get(k) is None and b.get(k) is None) or a.get(k) == b.get(k) or
                (isinstance(a.get(k), float) and isinstance(b.get(k), float) and abs(a[k] - b[k]) <= 1e-9 * max(1, abs(a[k])))
                for k in a) for a, b in zip(ours, theirs))
        columns = ["dataset", "k", "strategy", "partitioner", "seeds", "test_at_best_val", "final_test"]
        print(f"{path}: {len(results)} runs, {len(ours)} groups; over-seeds results equal: {same}")
        print(f"  over seeds: dictionaries {lines(over_seeds_dicts)} lines, {best_of(over_seeds_dicts, results) * 1e3:.2f} ms;"
              f" polars {lines(over_seeds)} lines, {best_of(over_seeds, results) * 1e3:.2f} ms")
        print(f"  markdown: markdown_table {lines(markdown_table)} lines, {best_of(markdown_table, ours, columns) * 1e3:.3f} ms;"
              f" polars {lines(markdown_polars)} lines, {best_of(markdown_polars, ours, columns) * 1e3:.3f} ms")
        print("  ours:\n" + "\n".join("    " + line for line in markdown_table(ours, columns).splitlines()[:4]))
        print("  polars:\n" + "\n".join("    " + line for line in markdown_polars(ours, columns).splitlines()[:4]))


if __name__ == "__main__":
    main(sys.argv[1:])
