"""`asepr demo`: the whole flow on the bundled Cora graph.

For now the flow is import, then validation, then a summary; partitioning and
training join it as they land.
"""

from __future__ import annotations

import contextlib
import logging
import tempfile
import time
from importlib import resources
from pathlib import Path

from storage.importers import import_dataset
from storage.resources import peak_rss_bytes
from storage.validate import validate_input

__all__ = ["bundled_cora", "run_demo"]

log = logging.getLogger(__name__)


def bundled_cora() -> Path:
    """Path of the Cora npz shipped inside the package (MIT, gnn-benchmark)."""
    return Path(str(resources.files("workflows") / "data" / "cora.npz"))


def run_demo(workdir: str | Path | None = None, echo=print) -> dict:
    """Import the bundled Cora, validate it and print a summary.

    Parameters
    ----------
    workdir
        Where to keep the outputs; a temporary directory (removed afterwards) if None.
    echo
        Where the human-readable lines go.

    Returns
    -------
    dict
        ``{"input": path, "meta": ..., "report": ValidationReport}``.
    """
    start = time.perf_counter()
    with contextlib.ExitStack() as stack:
        if workdir is None:
            base = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="asepr-demo-")))
        else:
            base = Path(workdir)
            base.mkdir(parents=True, exist_ok=True)
        input_dir = base / "cora"
        echo(f"asepr demo: importing the bundled Cora graph ({bundled_cora().name}) into {input_dir}")
        meta = import_dataset("gnn-npz", bundled_cora(), input_dir, shard_rows=2_000, overwrite=True)
        echo("asepr demo: validating the input, streaming")
        report = validate_input(input_dir)
        echo(report.summary())
        echo(
            f"asepr demo: done in {time.perf_counter() - start:.1f} s, "
            f"peak RSS {peak_rss_bytes() / 2**20:.0f} MiB"
        )
        return {"input": str(input_dir), "meta": meta, "report": report}
