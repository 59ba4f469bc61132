"""The trainer entry point: ``asepr-rank OUT [flags]``, one process per rank.

``asepr train OUT --nproc K`` resolves the :class:`~asepr.training.config.TrainConfig`, writes
it to ``RUN/config.json`` and launches K of these through ``torch.distributed.run``
(:mod:`asepr.workflows.launch`) with ``--config RUN/config.json``; each rank reads the config
back (:func:`asepr.training.config.load_config`). ``torchrun --nproc-per-node K --no-python
asepr-rank OUT [flags]`` and SLURM ``srun asepr-rank`` work too (``python -m
asepr.training.main`` is the same entry; the console script puts no working directory on
``sys.path``, so a user's own folders there cannot shadow the package): the flags then build the config
(:func:`config_from_args`, the one way from flags to a config), and rank 0 takes the run
directory's lock itself. A run directory holding a previous run is refused unless
``--resume`` continues it or ``--overwrite`` starts over. ``--strategy fds`` runs the
fully-decentralized baseline, OUT being the input directory. Rank 0 prints one line per
round. Exit status: 0 on success,
1 when this rank failed (bad input, a dead peer or a timed-out collective), with the
reason on stderr; 2 for a bad config.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import logging
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import fsspec

from asepr.storage.commit.holder import set_command_name
from asepr.storage.errors import AseprError, format_problem, os_errors_as_problems
from asepr.storage.locations.remote import add_storage_options_flag, remote_errors_as_problems
from asepr.training.config import (
    DEVICES,
    EVAL_MODES,
    FDS_PARTITIONERS,
    MODELS,
    SERVER_OPTIMIZERS,
    TASKS,
    TrainConfig,
    load_config,
    parse_batch_size,
)

__all__ = ["STRATEGY_CHOICES", "add_train_arguments", "config_from_args", "default_run_dir", "format_row", "main",
           "read_config"]

log = logging.getLogger("asepr.training.main")

# flag dest → TrainConfig field (when they differ)
_RENAMES = {"layers": "num_layers", "eval_negatives": "link_eval_negatives", "timeout": "timeout_s",
            "eval": "eval_mode"}
#: ``--strategy``: ASEPR's local graphs with reconciliation, or the fully-decentralized baseline.
STRATEGY_CHOICES = ("asepr", "fds")


def _batch_size_arg(text: str) -> int | str:
    """``--batch-size auto|N`` (argparse's type: a bad value is its one-line usage error)."""
    try:
        return parse_batch_size(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _rank_list_arg(flag: str, measure: bool = False):
    """argparse's type of ``--speeds`` / ``--slowdown`` (a bad value: its one-line usage error)."""
    from asepr.training.group.capacity import parse_rank_list

    def parse(text: str):
        try:
            return parse_rank_list(text, flag, measure=measure)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None

    return parse


def _add_capacity_arguments(p: argparse.ArgumentParser, d: TrainConfig) -> None:
    """Ranks of different speeds (:mod:`asepr.training.group.capacity`)."""
    p.add_argument("--speeds", type=_rank_list_arg("--speeds", measure=True), default=d.speeds,
                   metavar="S1,...,SW|measure",
                   help="each rank's relative speed; in every segment of --sync-every steps rank r takes "
                        "round(N * S_r / max S) steps and the update is normalised by steps (FedNova); measure: "
                        "each rank's seconds per step over the first segment (default: every rank the same steps)")
    p.add_argument("--cluster", metavar="FILE",
                   help="the speeds from a cluster file (TOML or JSON: one [[machine]] table per rank with its "
                        "compute, as asepr partition --cluster reads it), instead of --speeds")
    p.add_argument("--deadline", type=float, default=d.deadline, metavar="F",
                   help="close each segment at F times the fastest rank's segment time: every rank takes the "
                        "steps that fit at its speed (--speeds or --cluster, else measured), at least one "
                        "(default 0: wait for every rank)")
    p.add_argument("--slowdown", type=_rank_list_arg("--slowdown"), default=d.slowdown, metavar="F1,...,FW",
                   help="declare rank r F_r times slower: the modelled cluster time counts its CPU seconds F_r "
                        "times (a modelled heterogeneous cluster; training is unchanged)")


def add_train_arguments(p: argparse.ArgumentParser) -> None:
    """The trainer flags, shared by ``asepr train`` and ``asepr-rank``."""
    d = TrainConfig()
    p.add_argument("--run-dir", help="checkpoints and metrics.csv, a path or an fsspec URL "
                                     "(default: OUT.runs/TASK-MODEL-STRATEGY)")
    add_storage_options_flag(p, environment=True)
    start = p.add_mutually_exclusive_group()
    start.add_argument("--resume", action="store_true", help="continue from the run directory's latest checkpoint")
    start.add_argument("--overwrite", action="store_true",
                       help="start over in a run directory that holds a previous run, deleting its checkpoints "
                            "and metrics.csv (refused without it)")
    p.add_argument("--task", choices=TASKS, default=d.task,
                   help=f"node: node classification; link: link prediction over held-out edges (default {d.task})")
    p.add_argument("--model", choices=MODELS, default=d.model, help=f"the GNN convolution (default {d.model})")
    p.add_argument("--reconcile", default=d.reconcile,
                   help='"avg" joined by "+" with any of "kd", "con", "corr", "scaffold", e.g. "avg+corr" '
                        f'(default {d.reconcile})')
    p.add_argument("--strategy", choices=STRATEGY_CHOICES, default="asepr",
                   help="asepr: local graphs and reconciliation (OUT: a partition output); fds: the "
                        "fully-decentralized DistDGL-style baseline (OUT: the INPUT directory)")
    p.add_argument("--fds-partition", choices=FDS_PARTITIONERS, default="auto",
                   help="fds vertex partition: metis, hash, or auto (metis up to 5M edges)")
    p.add_argument("--rounds", type=int, default=d.rounds,
                   help=f"reconciliation rounds in all, resumed ones included: a run resumed after round r "
                        f"trains rounds r+1..ROUNDS (default {d.rounds})")
    p.add_argument("--local-epochs", type=int, default=d.local_epochs,
                   help=f"epochs each rank trains on its partition per round (default {d.local_epochs})")
    p.add_argument("--hidden", type=int, default=d.hidden, help=f"width of the hidden layers (default {d.hidden})")
    p.add_argument("--layers", type=int, default=d.num_layers,
                   help=f"GNN layers, the neighbourhood depth (default {d.num_layers})")
    p.add_argument("--dropout", type=float, default=None, help="default 0.5 (node), 0 (link)")
    p.add_argument("--heads", type=int, default=d.heads, help="GAT attention heads")
    p.add_argument("--lr", type=float, default=None, help="default 0.01 (node), 0.001 (link)")
    p.add_argument("--weight-decay", type=float, default=d.weight_decay,
                   help=f"Adam's weight decay on the local model (default {d.weight_decay:g})")
    p.add_argument("--batch-size", type=_batch_size_arg, default=d.batch_size,
                   help=f"seeds per local step, auto or N (default {d.batch_size}: each rank min(256, max(16, "
                        "ceil(its training seeds / 4))), at least 4 steps per epoch; fds: 256); 0: full-batch")
    p.add_argument("--fanouts", type=lambda s: tuple(int(x) for x in s.split(",")), default=d.fanouts,
                   help="neighbours per layer in mini-batch mode and for corr, e.g. 10,10")
    p.add_argument("--sync-every", type=int, default=None,
                   help="reconcile every N optimiser steps within a round (default 10 node, 0 link); 0: once per "
                        "round")
    p.add_argument("--scaffold-clip", type=float, default=d.scaffold_clip,
                   help=f"scaffold: bound each correction to this multiple of the gradient's norm (default "
                        f"{d.scaffold_clip:g}; 0: unbounded)")
    p.add_argument("--server-opt", choices=SERVER_OPTIMIZERS, default=d.server_opt,
                   help="server optimiser of the averaged update (default fedavg: the average itself)")
    p.add_argument("--server-lr", type=float, default=None, help="default 1 (fedavg, fedavgm), 0.01 (fedadam)")
    p.add_argument("--server-momentum", type=float, default=d.server_momentum, help="fedavgm β, fedadam β1")
    p.add_argument("--link-val-fraction", type=float, default=d.link_val_fraction,
                   help=f"link: share of the edges held out for validation (default {d.link_val_fraction:g})")
    p.add_argument("--link-test-fraction", type=float, default=d.link_test_fraction,
                   help=f"link: share of the edges held out for testing (default {d.link_test_fraction:g})")
    p.add_argument("--eval-negatives", type=int, default=d.link_eval_negatives,
                   help=f"link: negatives ranked against each held-out edge (default {d.link_eval_negatives})")
    p.add_argument("--feature-norm", choices=["l2", "l1", "none"], default=d.feature_norm,
                   help="row normalisation of the features (default l2)")
    p.add_argument("--feature-projection", type=int, default=d.feature_projection,
                   help="project features wider than P to P dimensions (seeded Gaussian); 0: off")
    p.add_argument("--seed", type=int, default=d.seed,
                   help=f"seed of all randomness (init, dropout, sampling, negatives; default {d.seed})")
    p.add_argument("--timeout", type=float, default=d.timeout_s, help="seconds a rank waits on a dead peer")
    p.add_argument("--threads", type=int, default=d.threads,
                   help="torch threads per process (0: its share of this machine's idle cores)")
    p.add_argument("--device", choices=DEVICES, default=d.device,
                   help="cuda: model, batches and evaluation on the rank's GPU, NCCL between ranks; cpu: gloo; "
                        "auto: cuda when present (default)")
    p.add_argument("--eval-every", type=int, default=d.eval_every,
                   help="evaluate every N epochs (ASEPR: at the first round end at or after each multiple); "
                        "0: every round (default)")
    p.add_argument("--patience", type=int, default=d.patience,
                   help="stop once the validation metric has not improved for P evaluations (every rank after "
                        "the same round); 0: train every round (default)")
    p.add_argument("--eval", choices=EVAL_MODES, default=d.eval_mode,
                   help="exact: the global model on the whole graph (default); local: each rank's partition "
                        "only (cheaper, not exact)")
    p.add_argument("--eval-sample", type=int, default=d.eval_sample, metavar="N",
                   help="exact node evaluation: score a seeded sample of about N validation and N test masters "
                        "(the same every round), with the metric's 95%% interval; a split of at most 2N is scored "
                        f"whole; 0: every master (default {d.eval_sample:,})")
    _add_capacity_arguments(p, d)


def config_from_args(args: argparse.Namespace) -> TrainConfig:
    """The config the training flags of ``args`` describe (:func:`add_train_arguments`)."""
    values = {}
    for f in dataclasses.fields(TrainConfig):
        dest = next((k for k, v in _RENAMES.items() if v == f.name), f.name)
        if hasattr(args, dest):
            values[f.name] = getattr(args, dest)
    if values.get("speeds") == "measure":
        values["speeds"], values["measure_speeds"] = (), True
    if getattr(args, "cluster", None):
        if values.get("speeds") or values.get("measure_speeds"):
            raise ValueError(format_problem("--cluster", "the speeds from one place", "--cluster with --speeds",
                                            "drop --speeds or --cluster."))
        from asepr.storage.cluster import read_cluster

        values["speeds"] = read_cluster(args.cluster).rank_speeds()
    return TrainConfig(**values)


def _config_flags_given(argv: Sequence[str]) -> list[str]:
    """The flags among ``argv`` that set a TrainConfig field (given explicitly, default or not)."""
    unset = object()
    dests = [next((k for k, v in _RENAMES.items() if v == f.name), f.name) for f in dataclasses.fields(TrainConfig)]
    probe = _parser()
    probe.set_defaults(**dict.fromkeys(dests, unset))
    args = probe.parse_args(argv)
    return [f"--{d.replace('_', '-')}" for d in dests if getattr(args, d, unset) is not unset]


def _resolve_config(args: argparse.Namespace, argv: Sequence[str]) -> TrainConfig:
    """``--config FILE``'s config, or the flags' (ValueError naming what is wrong)."""
    if not args.config:
        return config_from_args(args)
    given = _config_flags_given(argv) + ["--cluster"] * bool(getattr(args, "cluster", None))
    if given:
        raise ValueError(format_problem("asepr-rank", "--config FILE or the config flags, not both",
                                        f"--config with {' '.join(given)}",
                                        "put those values into the config file, or drop --config."))
    return read_config(args.config, args.storage_options)


def read_config(path: str | Path, storage_options: dict | None = None) -> TrainConfig:
    """``--config FILE``: a local file (:func:`asepr.training.config.load_config`), or
    ``RUN/config.json`` of a run directory on an object store (ValueError naming it)."""
    if "://" not in str(path):
        return load_config(path)
    url, storage_options = str(path), storage_options or {}
    fix = "pass the config.json that `asepr train` wrote."
    try:
        with remote_errors_as_problems(url), fsspec.open(url, "rt", **storage_options) as fh:
            data = json.loads(fh.read())
    except (OSError, AseprError) as exc:
        found = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise ValueError(format_problem(f"config file {url}", "a TrainConfig as JSON", found, fix)) from None
    except ValueError as exc:
        raise ValueError(format_problem(f"config file {url}", "a TrainConfig as JSON", f"invalid JSON ({exc})",
                                        fix)) from None
    return TrainConfig.from_dict(data, source=f"config file {url}")


def default_run_dir(out: str | Path, config: TrainConfig, strategy: str = "asepr") -> Path | str:
    """``OUT.runs/<task>-<model>-<strategy>`` beside the partition output (or the input, for fds):
    a Path for a local OUT, a URL beside a remote one (``s3://b/out.runs/...``)."""
    strategy = "fds" if strategy == "fds" else config.reconcile.replace("+", "-")
    name = f"{str(out).rstrip('/')}.runs/{config.task}-{config.model}-{strategy}"
    return name if "://" in str(out) else Path(name)


def format_row(row: dict[str, Any]) -> str:
    """One metrics row as the line rank 0 prints (bytes: the mean over ranks)."""
    extra = ""
    if row.get("metric") == "mrr":
        extra = f"  hits@50 {row.get('val_hits@50', float('nan')):.4f}  auc {row.get('val_auc', float('nan')):.4f}"
    if row.get("val_scored", 0) and row["val_scored"] < row.get("val_split", 0):
        extra += (f"  (95% [{row['val_ci_low']:.4f}, {row['val_ci_high']:.4f}] on {row['val_scored']:,} of "
                  f"{row['val_split']:,} val masters)")
    return (f"round {row['round']:>3}  gen {row['generation']}  loss {row['loss']:.4f}  "
            f"{row.get('eval_mode', '')} val {row['metric']} {row['val']:.4f}  test {row['test']:.4f}{extra}  "
            f"{row['train_seconds']:.2f} s + {row.get('eval_seconds', 0.0):.2f} s eval  "
            f"sent {row['bytes_sent_round'] / 2**10:,.1f} KiB/rank")


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="asepr-rank", description=__doc__.splitlines()[0],
                                     allow_abbrev=False)
    parser.add_argument("out", help="the partition output directory (the input directory with --strategy fds)")
    parser.add_argument("-v", "--verbose", action="count", default=0)
    parser.add_argument("-q", "--quiet", action="store_true")
    parser.add_argument("--config", metavar="FILE",
                        help="the TrainConfig as JSON (RUN/config.json, as `asepr train` writes it) instead of "
                             "the config flags")
    add_train_arguments(parser)
    return parser


def _train(args: argparse.Namespace, config: TrainConfig) -> None:
    """This rank's run: rank 0 holds the run directory (unless the launcher does), then train.

    A group that torchrun's agent restarted (a lost machine, :mod:`asepr.training.group.elastic`)
    resumes from the latest complete round, at whatever world size it now has; before the
    first complete round it starts over."""
    from asepr.storage.commit.lease import DEFAULT_TTL_S
    from asepr.training.rundir.checkpoint import RunDir
    from asepr.training.group.comm import Comm
    from asepr.training.loop.distributed import run_trainer
    from asepr.training.group.elastic import claim_run_dir, restarted
    from asepr.training.loop.rounds import all_ranks_ready

    comm = Comm()
    run_dir = args.run_dir or default_run_dir(args.out, config, args.strategy)
    options = args.storage_options
    restart = restarted() and args.strategy != "fds"
    complete = [False]  # rank 0, restarted: whether the run directory holds a complete round

    def on_round(row: dict[str, Any]) -> None:
        if not args.quiet:
            print(format_row(row), flush=True)

    def hold() -> None:
        """Rank 0: the run directory's lock, and no previous run deleted without --overwrite."""
        runs = RunDir(run_dir, options)
        if restart:  # the lost machine's lease may still have to expire
            claim_run_dir(runs, held, min(DEFAULT_TTL_S + 10.0, 0.8 * config.timeout_s))
            complete[0] = runs.latest_round() is not None
            return
        held.enter_context(runs.claim())
        if not (args.resume or args.overwrite):
            runs.refuse_previous_run()

    with contextlib.ExitStack() as held:
        all_ranks_ready(comm, "lock the run directory", lambda: hold() if comm.rank == 0 else None)
        if restart:  # rank 0's view of the run directory decides for every rank
            import torch

            args.resume = bool(comm.gather_uncounted(torch.tensor([float(complete[0])]))[0, 0])
        if args.strategy == "fds":
            from asepr.training.fds import run_fds

            run_fds(args.out, run_dir, config, partition=args.fds_partition, resume=args.resume, comm=comm,
                    on_round=on_round)
        else:
            run_trainer(args.out, run_dir, config, resume=args.resume, comm=comm, on_round=on_round,
                        storage_options=options)


def main(argv: Sequence[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    args = _parser().parse_args(argv)
    set_command_name("asepr train")  # what the run directory's lock records: never the arguments
    level = logging.WARNING if args.quiet or not args.verbose else (logging.INFO if args.verbose == 1 else logging.DEBUG)
    logging.basicConfig(level=level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    import torch.distributed as dist

    from asepr.training.loop.distributed import exit_with_parent, init_process_group

    try:
        config = _resolve_config(args, argv)
    except ValueError as exc:
        print(f"asepr train: error: {exc}", file=sys.stderr)
        return 2
    if "TORCHELASTIC_RUN_ID" in os.environ:
        exit_with_parent()  # torchrun's agent started this rank: die with it
    rank = 0
    try:
        with os_errors_as_problems():  # a full disk or an unwritable run directory: one line, no traceback
            rank, _world, _ = init_process_group(config)
            _train(args, config)
        return 0
    except AseprError as exc:
        print(f"asepr train: rank {rank}: error: {exc}", file=sys.stderr)
        return 1
    except (RuntimeError, dist.DistBackendError) as exc:
        print(
            f"asepr train: rank {rank}: error: a collective failed ({type(exc).__name__}: "
            f"{str(exc).splitlines()[0] if str(exc) else ''}). Another rank probably died or "
            f"did not answer within --timeout {config.timeout_s:g} s; the job stops. "
            "Rerun with --resume to continue from the last complete round.",
            file=sys.stderr,
        )
        return 1
    finally:
        if dist.is_available() and dist.is_initialized():
            dist.destroy_process_group()


def run() -> None:
    """The ``asepr-rank`` console script."""
    sys.exit(main())


if __name__ == "__main__":
    run()
