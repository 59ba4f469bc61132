"""What every benchmark writes: the machine's description, Parquet and Markdown tables, figures.

Benchmarks are not tests: they time things. Every row records the input, k, seed, edge
order, versions and machine so that a reader can rerun it.
"""

from __future__ import annotations

import logging
import os
import platform
from pathlib import Path

import numpy as np
import pyarrow as pa

__all__ = ["machine_info", "markdown_table", "parquet_table", "pyplot", "save_figure"]

log = logging.getLogger(__name__)


def machine_info() -> dict:
    import numba
    import psutil

    return {
        "cores": os.cpu_count(),
        "memory_gib": round(psutil.virtual_memory().total / 2**30, 1),
        "python": platform.python_version(),
        "numpy": np.__version__,
        "numba": numba.__version__,
        "pyarrow": pa.__version__,
        "platform": platform.platform(),
    }


def parquet_table(rows: list[dict]):
    """``rows`` as one Arrow table with every row's columns (missing cells null). A column
    whose cells mix text and numbers (a per-rank list read back from ``metrics.csv`` as
    text in one run and as a number in a one-rank run) is written as text throughout."""
    import pyarrow as pa

    keys = sorted({k for r in rows for k in r})
    columns = {}
    for k in keys:
        cells = [r.get(k) for r in rows]
        if any(isinstance(c, str) for c in cells) and any(isinstance(c, (int, float)) for c in cells):
            cells = [None if c is None else str(c) for c in cells]
        columns[k] = cells
    return pa.table(columns) if rows else pa.table({})


def markdown_table(rows: list[dict], columns: list[str]) -> str:
    def fmt(v):
        if isinstance(v, float):
            return f"{v:.3f}" if abs(v) < 1000 else f"{v:,.0f}"
        if isinstance(v, int):
            return f"{v:,}"
        return str(v)

    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    lines += ["| " + " | ".join(fmt(r.get(c, "")) for c in columns) + " |" for r in rows]
    return "\n".join(lines)


def pyplot():
    """``matplotlib.pyplot`` on the non-interactive Agg backend, or None (with a warning)
    when matplotlib is missing: the benchmarks then write their tables without plots."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        log.warning("matplotlib is not installed: no plots")
        return None
    return plt


def save_figure(fig, path: Path, dpi: int) -> None:
    """Lay out, write and close one benchmark figure."""
    import matplotlib.pyplot as plt

    fig.tight_layout()
    fig.savefig(path, dpi=dpi)
    plt.close(fig)
