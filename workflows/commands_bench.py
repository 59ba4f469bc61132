"""`asepr bench ...` subcommands."""

from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path

from asepr.storage.locations.remote import add_storage_options_flag

__all__ = ["register"]

DEFAULT_DATASETS = ["amazon-computers", "coauthor-physics", "tolokers", "facebook-pagepage"]
DEFAULT_ALGOS = ["asep", "2ps-l", "2ps-hdrf", "hdrf", "dbh", "greedy", "hash"]


def _bench_partition(args: argparse.Namespace) -> int:
    from asepr.pipeline.config import PartitionConfig
    from asepr.workflows.bench.partition import bench_partition

    base = PartitionConfig(
        num_parts=2,
        **{k: v for k, v in (("alpha", args.alpha), ("beta", args.beta), ("scoring", args.scoring),
                             ("num_attr_clusters", args.attr_clusters),
                             ("lift_reference", args.lift_reference),
                             ("two_phase_fallback", args.two_phase_fallback),
                             ("restream_passes", args.restream_passes)) if v is not None},
    )
    bench_partition(
        args.datasets, args.k, args.algos, Path(args.out), orders=tuple(args.orders),
        cache=Path(args.cache) if args.cache else None, seed=args.seed, base=base, budgets=tuple(args.budgets),
    )
    print(f"wrote {args.out}/partition.md and partition.parquet")
    return 0


def _bench_ingest(args: argparse.Namespace) -> int:
    from asepr.workflows.bench.ingest import QUICK, bench_ingest

    sizes = dict(QUICK) if args.quick else {
        "nodes": 2_000_000, "base_edges": 20_000_000, "new_edges": 2_000_000, "dim": 16, "classes": 16, "k": 16,
    }
    for key in ("nodes", "base_edges", "new_edges", "dim", "classes", "k"):
        if getattr(args, key) is not None:
            sizes[key] = getattr(args, key)
    bench_ingest(
        Path(args.out), **sizes, seed=args.seed, workdir=Path(args.workdir) if args.workdir else None,
        keep=args.keep, verify=args.verify, repeat=args.repeat,
    )
    print(f"wrote {args.out}/ingest.md and ingest.parquet")
    return 0


def _bench_train(args: argparse.Namespace) -> int:
    from asepr.training.main import config_from_args
    from asepr.workflows.bench.train import TRAIN_STRATEGIES, bench_train

    config = config_from_args(args)
    if args.max_epochs:  # the epoch cap of the time-to-accuracy protocol, in rounds
        config = dataclasses.replace(config, rounds=-(-args.max_epochs // config.local_epochs))
    bench_train(args.datasets, args.k, args.strategies or TRAIN_STRATEGIES, Path(args.out),
                config=config, partitioners=args.partitioners,
                cache=Path(args.cache) if args.cache else None, keep_runs=args.keep_runs, seeds=args.seeds)
    print(f"wrote {args.out}/train.md, train.parquet and train_rounds.parquet")
    return 0


def _bench_read(args: argparse.Namespace) -> int:
    from asepr.workflows.bench.read import bench_read, report

    rows = bench_read(args.output, args.parts, repeat=args.repeat, cold=not args.warm_only,
                      storage_options=args.storage_options)
    text = report(args.output, rows, args.repeat)
    print(text)
    if args.out:
        Path(args.out).mkdir(parents=True, exist_ok=True)
        (Path(args.out) / "read.md").write_text(text)
        print(f"wrote {args.out}/read.md")
    return 0


def _bench_scale(args: argparse.Namespace) -> int:
    from asepr.workflows.bench.scale import bench_scale

    bench_scale(Path(args.out), args.sizes, k=args.k, dim=args.dim, classes=args.classes, seed=args.seed,
                workdir=Path(args.workdir) if args.workdir else None, keep=args.keep, verify=args.verify,
                out_url=args.out_url, storage_options=args.storage_options, baseline=args.baseline, pairs=args.pairs)
    print(f"wrote {args.out}/scale.md, scale.parquet and scale.png")
    return 0


def _bench_all(args: argparse.Namespace) -> int:
    from asepr.workflows.bench.suite import bench_all

    bench_all(Path(args.out), quick=args.quick, cache=Path(args.cache) if args.cache else None)
    print(f"wrote {args.out}/report.md")
    return 0


def _register_scale(bench_sub, add_common) -> None:
    q = bench_sub.add_parser("scale", help="end-to-end `asepr partition` edges/s and peak RSS against |E|")
    add_common(q)
    q.add_argument("--sizes", nargs="+", type=int, default=None,
                   help="edge counts (default 5M 20M 50M 100M); |V| = |E| / 10")
    q.add_argument("-k", type=int, default=16, help="partitions (default 16)")
    q.add_argument("--dim", type=int, default=32, help="feature width of the synthetic graphs (default 32)")
    q.add_argument("--classes", type=int, default=8, help="classes of the synthetic graphs (default 8)")
    q.add_argument("--seed", type=int, default=1, help="seed of the synthetic graphs (default 1)")
    q.add_argument("--out", default="report", help="the report directory (default report)")
    q.add_argument("--workdir", help="where the synthetic inputs (kept, reused) and outputs go (default OUT/work)")
    q.add_argument("--keep", action="store_true", help="keep every partition output")
    q.add_argument("--verify", action="store_true", help="also time `asepr verify` on every output")
    q.add_argument("--out-url", metavar="URL",
                   help="also partition every size into URL (e.g. s3://bucket/prefix), right after the local run")
    q.add_argument("--baseline", metavar="TREE",
                   help="also partition every size with the code of the checkout TREE (e.g. a `git worktree` of an "
                        "earlier revision), alternating with this code, and compare the stores' checksums")
    q.add_argument("--pairs", type=int, default=1, help="with --baseline: alternating base/this runs per size (default 1)")
    add_storage_options_flag(q)
    q.set_defaults(handler=_bench_scale, command="bench")


def register(sub, add_common) -> None:
    p = sub.add_parser("bench", help="side-by-side benchmarks that write tables")
    bench_sub = p.add_subparsers(dest="bench_command", required=True, metavar="BENCH")
    q = bench_sub.add_parser("partition", help="algorithms x datasets x k: RF, balance, homogeneity, speed")
    add_common(q)
    q.add_argument("--datasets", nargs="+", default=DEFAULT_DATASETS,
                   help="shared dataset names or input directories")
    q.add_argument("-k", nargs="+", type=int, default=[4, 8, 16, 32], help="partition counts (default 4 8 16 32)")
    q.add_argument("--algos", nargs="+", default=DEFAULT_ALGOS,
                   help=f"algorithms to compare (default {' '.join(DEFAULT_ALGOS)})")
    q.add_argument("--orders", nargs="+", choices=["shuffled", "natural"], default=["shuffled", "natural"],
                   help="edge orders of the stream: shuffled and/or as stored (default both)")
    q.add_argument("--out", default="report", help="the report directory (default report)")
    q.add_argument("--cache", help="where imported/shuffled inputs are kept (default OUT/inputs)")
    q.add_argument("--seed", type=int, default=0, help="seed of the shuffles and the algorithms (default 0)")
    q.add_argument("--alpha", type=float, help="asep: attribute weight of structural clustering, in [0, 1]")
    q.add_argument("--beta", type=float, help="asep: weight of the attribute-home term of the edge score")
    q.add_argument("--scoring", choices=["candidates", "hdrf"], help="asep: score the 2 community candidates or all K")
    q.add_argument("--no-two-phase-fallback", dest="two_phase_fallback", action="store_const", const=False,
                   default=None, help="asep: report its own stream only")
    q.add_argument("--restream-passes", type=int, metavar="N",
                   help="asep: restreams after its stream, each steered by the previous pass's masters "
                        "(default 1; 0: a single stream)")
    q.add_argument("--budgets", nargs="*", type=float, default=[4.0, 10.0, 16.0], metavar="B",
                   help="ASEP's hybrid at a memory budget of B bytes per edge of each graph (none: streaming only)")
    q.add_argument("--attr-clusters", type=int, help="asep: C, attribute clusters (default K)")
    q.add_argument("--lift-reference", type=float,
                   help="scale alpha and beta by min(1, lift / REF); 0: no scaling (default)")
    q.set_defaults(handler=_bench_partition, command="bench")

    q = bench_sub.add_parser("read", help="load partitions of an output into numpy: MB/s, cold and warm")
    add_common(q)
    q.add_argument("output", nargs="+",
                   help="an output of `asepr partition` (path or fsspec URL); several: read side by side")
    q.add_argument("--parts", nargs="+", type=int, help="partition ids (default: all)")
    q.add_argument("--repeat", type=int, default=3, help="best of N reads per partition and mode")
    q.add_argument("--warm-only", action="store_true", help="skip the cold (page cache dropped) reads")
    q.add_argument("--out", help="also write OUT/read.md")
    add_storage_options_flag(q)
    q.set_defaults(handler=_bench_read, command="bench")

    q = bench_sub.add_parser("ingest", help="ingest of new edges against a full repartition: time, RSS, RF")
    add_common(q)
    q.add_argument("--out", default="report", help="the report directory (default report)")
    q.add_argument("--quick", action="store_true", help="a small graph (200k edges) that runs in seconds")
    q.add_argument("--nodes", type=int, help="nodes of the synthetic graph (default 2,000,000)")
    q.add_argument("--base-edges", type=int, help="edges partitioned first (default 20,000,000)")
    q.add_argument("--new-edges", type=int, help="edges ingested after (default 2,000,000)")
    q.add_argument("--dim", type=int, help="feature width (default 16)")
    q.add_argument("--classes", type=int, help="classes of the synthetic graph (default 16)")
    q.add_argument("-k", type=int, help="partitions (default 16)")
    q.add_argument("--seed", type=int, default=0, help="seed of the synthetic graph (default 0)")
    q.add_argument("--workdir", help="where the inputs and outputs go (default OUT/work, removed after)")
    q.add_argument("--keep", action="store_true", help="keep the work directory")
    q.add_argument("--verify", action="store_true", help="also run `asepr verify` on both outputs (untimed)")
    q.add_argument("--repeat", type=int, default=1,
                   help="alternate the ingest and the full repartition this many times; compare medians")
    q.set_defaults(handler=_bench_ingest, command="bench")

    q = bench_sub.add_parser("train", help="training strategies x datasets x k: accuracy, time to target, bytes")
    add_common(q)
    from asepr.training.main import add_train_arguments

    q.add_argument("--datasets", nargs="+", default=["amazon-computers", "coauthor-physics"],
                   help="shared dataset names or input directories")
    q.add_argument("-k", nargs="+", type=int, default=[4, 8], help="partition counts (default 4 8)")
    q.add_argument("--strategies", nargs="+", default=None,
                   help="centralized, fds, or any --reconcile (default: centralized, avg, avg+kd, avg+con, "
                        "avg+kd+con, avg+corr, avg+scaffold)")
    q.add_argument("--out", default="report", help="the report directory (default report)")
    q.add_argument("--cache", help="where imported inputs and partitions are kept (default OUT/inputs)")
    q.add_argument("--partitioners", nargs="+", default=[],
                   choices=["asep", "2ps-hdrf", "hdrf", "hash", "metis"],
                   help="also train the default strategy (--reconcile) on partitions from each, at every k")
    q.add_argument("--keep-runs", action="store_true", help="keep every run directory under OUT/runs")
    q.add_argument("--max-epochs", type=int, default=0,
                   help="with --patience: the cap on epochs (sets --rounds to it over --local-epochs); 0: --rounds")
    q.add_argument("--seeds", nargs="+", type=int, default=None,
                   help="train every run once per seed and report the mean and range (default: --seed alone)")
    add_train_arguments(q)
    q.set_defaults(handler=_bench_train, command="bench")

    _register_scale(bench_sub, add_common)

    q = bench_sub.add_parser("all", help="partition + train (with fds) + ingest, one report")
    add_common(q)
    q.add_argument("--quick", action="store_true", help="the small sizes the tests run (a few minutes)")
    q.add_argument("--out", default="report", help="the report directory (default report)")
    q.add_argument("--cache", help="where imported inputs and partitions are kept (default OUT/inputs)")
    q.set_defaults(handler=_bench_all, command="bench")
