"""``asepr bench all``: every comparison in one run, one report.

Runs ``bench partition``, ``bench train`` (with the fully-decentralized baseline
``fds``, and the default strategy on every partitioner of :data:`FULL`) and ``bench
ingest`` into one ``OUT`` directory and writes ``report.md``: the headline comparison
of ASEPR (the default ``--reconcile``) against ``fds`` (bytes per epoch, seconds to 95 %
of the centralized validation metric, measured and modelled at 10 Gbit/s, test accuracy
at the best validation point and final, against the centralized ceiling), then links
to each part's tables and plots.

Sizes: ``quick`` (the bundled Cora, a 200 k-edge synthetic ingest; what the tests run)
or the full size (amazon-computers and coauthor-physics, k = 4 and 8; a 10 M + 1 M edge
ingest). Each part records its own settings, versions and machine.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from asepr.storage.importers import import_dataset
from asepr.training.config import TrainConfig
from asepr.workflows.bench.ingest import QUICK, bench_ingest
from asepr.workflows.bench.partition import bench_partition
from asepr.workflows.bench.tables import machine_info, markdown_table
from asepr.workflows.bench.train import bench_train
from asepr.workflows.bench.train_report import HEADLINE_COLUMNS, LATENCY_S, headline
from asepr.workflows.commands_train import EVAL_LABELS
from asepr.workflows.demo import bundled_cora

__all__ = ["DEFAULT_STRATEGY", "FULL", "QUICK_SIZES", "bench_all"]

#: The ASEPR strategy of the headline: ``asepr train``'s default ``--reconcile``.
DEFAULT_STRATEGY = TrainConfig().reconcile
_HEADLINE_STRATEGIES = list(dict.fromkeys(["centralized", "avg", DEFAULT_STRATEGY, "fds"]))

QUICK_SIZES: dict[str, Any] = {
    "partition": {"ks": [2, 4], "algos": ["asep", "2ps-l", "hdrf", "hash"], "orders": ("shuffled",)},
    "train": {"ks": [2], "config": TrainConfig(hidden=32, rounds=2, local_epochs=2),
              "strategies": _HEADLINE_STRATEGIES, "partitioners": ["asep", "hash"]},
    "ingest": dict(QUICK),
}
FULL: dict[str, Any] = {
    "datasets": ["amazon-computers", "coauthor-physics"],
    "partition": {"ks": [4, 8], "algos": ["asep", "2ps-l", "2ps-hdrf", "hdrf", "dbh", "greedy", "hash"],
                  "orders": ("shuffled",)},
    # 30 epochs evaluated every 2, three seeds: the protocol of the README's headline
    # (docs/results/train-headline). Mini-batch training has plateaued by then on both
    # graphs at k = 4; at k = 8 the partitioned runs are still climbing slowly.
    "train": {"ks": [4, 8], "config": TrainConfig(rounds=15, local_epochs=2, feature_projection=256),
              "seeds": [0, 1, 2], "strategies": _HEADLINE_STRATEGIES,
              "partitioners": ["asep", "2ps-hdrf", "hdrf", "hash", "metis"]},
    "ingest": {"nodes": 1_000_000, "base_edges": 10_000_000, "new_edges": 1_000_000, "dim": 16, "classes": 16,
               "k": 16},
}


def bench_all(out: Path, *, quick: bool = False, cache: Path | None = None, echo=print) -> dict[str, Any]:
    """Run every part; write ``OUT/report.md`` and each part's files; return all rows."""
    out = Path(out).absolute()  # children (trainers, bench phases) run elsewhere
    out.mkdir(parents=True, exist_ok=True)
    cache = Path(cache).absolute() if cache else out / "inputs"
    started = time.strftime("%Y-%m-%d %H:%M")
    t0 = time.perf_counter()
    if quick:
        cora = cache / "cora-bundled"
        if not (cora / "meta.json").exists():
            import_dataset("gnn-npz", bundled_cora(), cora, shard_rows=2_000, overwrite=True)
        datasets, sizes = [str(cora)], QUICK_SIZES
    else:
        datasets, sizes = FULL["datasets"], FULL
    p = sizes["partition"]
    echo("bench all: partition")
    part_rows = bench_partition(datasets, p["ks"], p["algos"], out, orders=p["orders"], cache=cache, echo=echo)
    t = sizes["train"]
    echo("bench all: train")
    train_rows = bench_train(datasets, t["ks"], t["strategies"], out, config=t["config"],
                             partitioners=t["partitioners"], cache=cache, seeds=t.get("seeds"), echo=echo)
    echo("bench all: ingest")
    ingest_rows = bench_ingest(out / "ingest", **sizes["ingest"], echo=echo)
    machine = machine_info()
    lines = [
        "# asepr bench all" + (" --quick" if quick else ""),
        "",
        f"Run {started}, {time.perf_counter() - t0:.0f} s in all; {machine['cores']} cores, "
        f"{machine['memory_gib']} GiB, Python {machine['python']}. Rerun: `asepr bench all"
        + (" --quick" if quick else "") + f" --out {out}`.",
        "",
        f"## ASEPR ({DEFAULT_STRATEGY}) against the fully-decentralized baseline (fds)",
        "",
        markdown_table(headline(train_rows, DEFAULT_STRATEGY), HEADLINE_COLUMNS),
        "",
        ("Bytes per epoch: training traffic sent per rank (mean over ranks), as counted by `asepr.training.group.comm`, "
         "evaluation apart. Seconds to 95 %: training seconds (evaluation excluded) until the first "
         "evaluation whose validation metric reaches 95 % of the centralized run's best. **Modelled @10G** "
         "(not measured): those seconds plus the busiest rank's training bytes over a 10 Gbit/s link plus "
         f"its messages × {LATENCY_S * 1e6:g} µs (1 and 100 Gbit/s in [train.md](train.md)). Every strategy "
         f"is evaluated the same way ({EVAL_LABELS[t['config'].eval_mode]}), every "
         f"{t['config'].eval_interval} epochs: centralized and fds exactly then, ASEPR at the first round "
         "end at or after, so a crossing is seen only there. `test@best val`: the test metric at the best "
         "validation point."),
        "",
        "## Parts",
        "",
        "- [training strategies and partitioners](train.md) (`train.parquet`, `train_rounds.parquet`, "
        "plots `train-*.png`)",
        "- [partitioning](partition.md) (`partition.parquet`)",
        "- [incremental ingest](ingest/ingest.md) (`ingest/ingest.parquet`)",
        "",
    ]
    (out / "report.md").write_text("\n".join(lines))
    return {"partition": part_rows, "train": train_rows, "ingest": ingest_rows}
