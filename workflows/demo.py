"""`asepr demo`: the whole flow on the bundled Cora graph.

Import and validate; hold the last 10 % of the edge stream back; partition the rest
into 4 with ASEP (one Zarr store per partition plus ``manifest.json``), verify every
invariant and print the metrics and partitions; train 4 GraphSAGE ranks with
reconciliation rounds (``avg+kd+con``, through torchrun's API); ingest the held-back
edges as generation 2 (``asepr.pipeline.increment.ingest``), verify again, and resume training on
generation 2; finally compare the final accuracy with the centralized baseline on the
whole graph.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import tempfile
import time
from importlib import resources
from pathlib import Path

from asepr.pipeline.config import PartitionConfig
from asepr.pipeline.partition_run import partition_to_store
from asepr.pipeline.verify import verify_output
from asepr.storage.errors import StoreError
from asepr.storage.importers import import_dataset
from asepr.storage.integrity.validate import validate_input
from asepr.storage.resources import peak_rss_bytes
from asepr.training.config import TrainConfig
from asepr.workflows.bench.ingest import split_stream
from asepr.workflows.commands_partition import metrics_table, partition_table
from asepr.workflows.commands_train import summary_table

__all__ = ["DEMO_PARTS", "bundled_cora", "run_demo"]

#: Partitions (and trainer ranks) of the demo run.
DEMO_PARTS = 4
#: The demo's training: small and quick (about a minute for all runs on 2 cores).
DEMO_TRAIN = TrainConfig(hidden=64, rounds=6, local_epochs=3)
#: Rounds trained on generation 1, before the held-back edges are ingested.
DEMO_ROUNDS_GEN1 = 4
#: The share of the edge stream (its end) held back for the ingest step.
DEMO_HELD_BACK = 0.10

log = logging.getLogger(__name__)


def bundled_cora() -> Path:
    """Path of the Cora npz shipped inside the package (MIT, gnn-benchmark)."""
    return Path(str(resources.files("asepr.workflows") / "data" / "cora.npz"))


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
        first_dir, new_dir = base / "cora-first", base / "cora-new"
        num_edges = int(meta["num_edges"])
        kept, held = split_stream(input_dir, first_dir, new_dir, num_edges - round(DEMO_HELD_BACK * num_edges))
        echo(f"asepr demo: holding back the last {held:,} of {num_edges:,} edges for the ingest step")
        out_dir = base / "cora-parts"
        echo(f"asepr demo: partitioning the first {kept:,} edges into {DEMO_PARTS} with ASEP into {out_dir}")
        manifest = partition_to_store(
            first_dir, out_dir, PartitionConfig(num_parts=DEMO_PARTS, algo="asep"), overwrite=True
        )
        echo("asepr demo: verifying every invariant of the output")
        verified = verify_output(out_dir)
        echo(verified.summary())
        if not verified.ok:
            raise StoreError(f"asepr demo: the partition output {out_dir} failed verification")
        echo(metrics_table(manifest))
        echo(partition_table(manifest))
        training = _train(input_dir, out_dir, new_dir, base, echo)
        echo(
            f"asepr demo: done in {time.perf_counter() - start:.1f} s, "
            f"peak RSS {peak_rss_bytes() / 2**20:.0f} MiB"
        )
        return {"input": str(input_dir), "meta": meta, "report": report, "out": str(out_dir),
                "manifest": manifest, "verify": verified, **training}


def _train(input_dir: Path, out_dir: Path, new_dir: Path, base: Path, echo) -> dict:
    """Train on generation 1, ingest the held-back edges, resume on generation 2, compare."""
    # torch is imported here, not with the module: bundled_cora() serves installs without it.
    from asepr.pipeline.increment.ingest import ingest
    from asepr.training.centralized import run_centralized
    from asepr.training.rundir.checkpoint import RunDir
    from asepr.workflows.launch import launch_trainers

    config = DEMO_TRAIN
    run_dir = base / "runs" / "asepr"
    first = dataclasses.replace(config, rounds=DEMO_ROUNDS_GEN1)
    echo(f"asepr demo: training {DEMO_PARTS} GraphSAGE ranks, {first.rounds} rounds of "
         f"{config.local_epochs} local epochs, reconciliation {config.reconcile} (torchrun, gloo)")
    launch_trainers(out_dir, run_dir, first, DEMO_PARTS, overwrite=True, quiet=True)
    echo(f"asepr demo: ingesting the held-back edges ({new_dir / 'edges'}) as the next generation")
    manifest = ingest(out_dir, new_dir / "edges")
    verified = verify_output(out_dir)
    echo(verified.summary())
    if not verified.ok:
        raise StoreError(f"asepr demo: the output {out_dir} failed verification after the ingest")
    echo(f"asepr demo: generation {manifest['generation']} holds {manifest['num_edges']:,} edges; "
         f"resuming training on it for {config.rounds - first.rounds} more rounds (--resume)")
    launch_trainers(out_dir, run_dir, config, DEMO_PARTS, resume=True, quiet=True)
    rows = RunDir(run_dir).read_metrics()
    echo(summary_table(rows, f"asepr: {DEMO_PARTS} ranks, each on its own partition"))
    echo(f"asepr demo: the centralized baseline (same model, whole graph, {config.rounds * config.local_epochs} epochs)")
    central = run_centralized(input_dir, base / "runs" / "centralized", config)
    echo(summary_table(central, "centralized: one process, the whole graph", centralized=True))
    a, c = float(rows[-1]["test"]), float(central[-1]["test"])
    echo(f"asepr demo: final test accuracy {a:.4f} with {DEMO_PARTS} partitioned ranks vs {c:.4f} centralized "
         f"({100 * (a - c):+.1f} points)")
    return {"train_rows": rows, "centralized_rows": central}
