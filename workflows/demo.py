"""`asepr demo`: the whole flow on the bundled Cora graph.

Import, validate, partition into 4 with ASEP (one Zarr store per partition plus
``manifest.json``), verify every invariant, and print the metrics and partitions;
training joins the flow as it lands.
"""

from __future__ import annotations

import contextlib
import logging
import tempfile
import time
from importlib import resources
from pathlib import Path

from pipeline.config import PartitionConfig
from pipeline.verify import verify_output
from pipeline.write import partition_to_store
from storage.errors import StoreError
from storage.importers import import_dataset
from storage.resources import peak_rss_bytes
from storage.validate import validate_input
from workflows.commands_partition import metrics_table, partition_table

__all__ = ["DEMO_PARTS", "bundled_cora", "run_demo"]

#: Partitions of the demo run.
DEMO_PARTS = 4

log = logging.getLogger(__name__)


def bundled_cora() -> Path:
    """Path of the Cora npz shipped inside the package (MIT, gnn-benchmark)."""
    return Path(str(resources.files("workflows") / "data" / "cora.npz"))


def run_demo(workdir: str | Path | None = None, echo=print) -> dict:
    """Import the bundled Cora, validate, partition (ASEP, k=4), verify, print the metrics.

    Parameters
    ----------
    workdir
        Where to keep the outputs; a temporary directory (removed afterwards) if None.
    echo
        Where the human-readable lines go.

    Returns
    -------
    dict
        ``{"input": path, "meta": ..., "report": ValidationReport, "out": path,
        "manifest": ..., "verify": VerifyReport}``.
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
        out_dir = base / "cora-parts"
        echo(f"asepr demo: partitioning into {DEMO_PARTS} with ASEP into {out_dir}")
        manifest = partition_to_store(
            input_dir, out_dir, PartitionConfig(num_parts=DEMO_PARTS, algo="asep"), overwrite=True
        )
        echo("asepr demo: verifying every invariant of the output")
        verified = verify_output(out_dir)
        echo(verified.summary())
        if not verified.ok:
            raise StoreError(f"asepr demo: the partition output {out_dir} failed verification")
        echo(metrics_table(manifest))
        echo(partition_table(manifest))
        echo(
            f"asepr demo: done in {time.perf_counter() - start:.1f} s, "
            f"peak RSS {peak_rss_bytes() / 2**20:.0f} MiB"
        )
        return {"input": str(input_dir), "meta": meta, "report": report, "out": str(out_dir),
                "manifest": manifest, "verify": verified}
