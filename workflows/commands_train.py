"""``asepr train``: launch the trainers (or the centralized baseline) and summarise.

``asepr train OUT --nproc K ...`` resolves the config from the flags, checks the output
(a committed generation, at least one partition per rank) and the run directory, and only
then launches
``torchrun --standalone --nproc-per-node K -m asepr.training.main OUT --config RUN/config.json``
(:mod:`asepr.workflows.launch`, which locks the run directory); rank 0 prints one line per
round, and a summary table of the run's ``metrics.csv`` follows. ``asepr train --centralized
INPUT ...`` trains the same model on the whole input in this process. ``asepr train
INPUT --strategy fds --nproc K ...`` launches K ranks of the fully-decentralized
baseline (:mod:`asepr.training.fds`) on the input, through the same launcher.
"""

from __future__ import annotations

import argparse
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from asepr.storage.errors import AseprError, format_problem
from asepr.storage.locations.remote import remote_errors_as_problems

__all__ = ["EVAL_LABELS", "ResumeNote", "centralized_line", "check_partition_output", "fds_bytes_line", "register",
           "resume_note", "summary_table"]


#: How each ``eval_mode`` is labelled in summaries and reports.
EVAL_LABELS = {"exact": "exact: the global model on the whole graph",
               "local": "partition-local: each rank's own graph only, not exact"}


def _plural(count: Any, word: str) -> str:
    return f"{count} {word}" + ("" if str(count) == "1" else "s")


def summary_table(rows: list[dict[str, Any]], title: str, *, centralized: bool = False) -> str:
    """The metrics rows as a fixed-width table, the evaluation used, and the final and
    best-validation lines (training seconds exclude evaluation). A ``centralized`` run
    has no generations, sends nothing and has no rounds besides its evaluations: its
    table leaves those columns out."""
    if not rows:
        return f"{title}: no evaluated round"
    metric = rows[-1].get("metric", "metric")
    mode = rows[-1].get("eval_mode", "local")
    gen, sent = ("", "") if centralized else (f" {'gen':>3}", f" {'KiB/rank':>10}")
    lines = [f"{title}; evaluation {EVAL_LABELS.get(mode, mode)}",
             f"{'round':>5} {'epoch':>5}{gen} {'loss':>8} {'val ' + metric:>14} {'test':>8} {'train s':>8} "
             f"{'eval s':>7}{sent}"]
    for r in rows:
        gen = "" if centralized else f" {r['generation']:>3}"
        sent = "" if centralized else f" {float(r['bytes_sent_round']) / 1024:>10,.1f}"
        lines.append(f"{r['round']:>5} {r.get('epoch', '-'):>5}{gen} {float(r['loss']):>8.4f} "
                     f"{float(r['val']):>14.4f} {float(r['test']):>8.4f} {float(r['train_seconds']):>8.2f} "
                     f"{float(r.get('eval_seconds', 0.0)):>7.2f}{sent}")
    best = max(rows, key=lambda r: float(r["val"]))
    last = rows[-1]
    rounds = "" if centralized else ", " + _plural(last["round"], "round")
    lines.append(f"final: test {metric} {float(last['test']):.4f} after {_plural(last.get('epoch', '-'), 'epoch')}"
                 f"{rounds} ({float(last['elapsed_s']):.1f} s training, "
                 f"{float(last.get('eval_elapsed_s', 0.0)):.1f} s evaluation)")
    lines.append(f"best val {metric} {float(best['val']):.4f} at epoch {best.get('epoch', '-')}, round "
                 f"{best['round']}: test {metric} at best val {float(best['test']):.4f}")
    return "\n".join(lines)


def _cmd_train(args: argparse.Namespace) -> int:
    from asepr.training.rundir.checkpoint import RunDir
    from asepr.training.main import config_from_args, default_run_dir, format_row

    try:
        config = config_from_args(args)
    except ValueError as exc:
        print(f"asepr train: error: {exc}", file=sys.stderr)
        return 2
    if args.strategy == "fds" or args.centralized:
        _refuse_remote(args)
    if args.strategy == "fds":
        return _train_fds(args, config)
    if args.centralized:
        from asepr.storage.inputs.directory import open_input
        from asepr.training.centralized import run_centralized

        open_input(args.centralized)  # a missing input is named before the run directory is made
        run_dir = Path(args.run_dir) if args.run_dir else (
            Path(f"{args.centralized.rstrip('/')}.runs") / f"{config.task}-{config.model}-centralized")
        with RunDir(run_dir).lock():
            if not args.overwrite:
                RunDir(run_dir).refuse_previous_run()
            rows = run_centralized(args.centralized, run_dir, config, on_round=None if args.quiet else (
                lambda row: print(centralized_line(format_row(row)), flush=True)))
        if not args.quiet:
            print(summary_table(rows, f"centralized {config.model} on {args.centralized} (run directory {run_dir})",
                                centralized=True))
        return 0
    if not args.out:
        raise AseprError(format_problem("asepr train", "OUT (a partition output) or --centralized INPUT",
                                        "neither", "pass the directory `asepr partition` wrote."))
    options = args.storage_options
    from asepr.workflows.launch import elastic_settings, launch_trainers

    elastic = elastic_settings(args.nnodes, args.rdzv_endpoint, args.rdzv_id, args.rdzv_conf)
    with remote_errors_as_problems(args.out):
        if elastic is None:
            args.nproc = check_partition_output(args.out, args.nproc, options)
        else:  # every machine's ranks together, at most one per partition
            check_partition_output(args.out, _ranks_per_machine(args.nproc) * elastic.max_nodes, options)
    if _capacity_problem(config, args.nproc, elastic):
        return 2

    run_dir = args.run_dir or default_run_dir(args.out, config)
    if args.resume:
        left = resume_note(args.out, RunDir(run_dir, options), config.rounds, options)
        if not args.quiet:
            print(f"asepr train: {left.text}", flush=True)
        if left.done:
            return 0
    launch_trainers(args.out, run_dir, config, args.nproc, resume=args.resume, overwrite=args.overwrite,
                    quiet=args.quiet, verbose=args.verbose, storage_options=options, elastic=elastic,
                    max_restarts=args.max_restarts)
    rows = RunDir(run_dir, options).read_metrics()
    if args.quiet:
        return 0
    print(summary_table(rows, f"{args.nproc} trainers, {config.model}, {config.reconcile} "
                              f"on {args.out} (run directory {run_dir})"))
    return 0


def centralized_line(line: str) -> str:
    """A trainer's round line without what a centralized run has none of: a generation
    and bytes sent."""
    return re.sub(r"  sent [\d,.]+ KiB/rank$", "", re.sub(r"  gen \d+", "", line))


@dataclass(frozen=True)
class ResumeNote:
    """What ``--resume`` will do: ``done`` when every round asked for is trained already."""

    done: bool
    text: str


def resume_note(out: str | Path, runs, rounds: int, storage_options: dict | None = None) -> ResumeNote:
    """What a resumed run of ``rounds`` rounds (resumed ones included) does on the run
    directory ``runs`` (a :class:`asepr.training.rundir.checkpoint.RunDir`): nothing, when it holds
    that many rounds already; else where it resumes, and whether on a newer generation
    of ``out`` than its last round was trained on (after an ingest)."""
    from asepr.storage import read_manifest

    latest = runs.latest_round()
    if latest is None:  # the launcher refuses it, naming the run directory
        return ResumeNote(False, f"resuming {runs.path}")
    trained = latest + 1
    if trained >= rounds:
        return ResumeNote(True, f"nothing left to do: {runs.path} holds {_plural(trained, 'round')} already and "
                                f"--rounds is {rounds} (it counts every round, resumed ones included); pass "
                                f"--rounds {trained + 1} or more to train further")
    rows = runs.read_metrics()
    before = int(rows[-1]["generation"]) if rows and "generation" in rows[-1] else None
    generation = int(read_manifest(out, storage_options=storage_options)["generation"])
    text = f"resuming at round {trained + 1} of {rounds}"
    if before is not None and before != generation:
        text += (f" on generation {generation} of {out} (round {trained} was trained on generation {before}): "
                 "the edges added since take part from this round on")
    return ResumeNote(False, text)


def _refuse_remote(args: argparse.Namespace) -> None:
    """The baselines (--centralized, --strategy fds) read a local input into a local run directory."""
    given = [f"{flag} {value}" for flag, value in (("--run-dir", args.run_dir), ("INPUT", args.centralized or args.out))
             if value and "://" in str(value)]
    if given or args.storage_options:
        found = ", ".join(given) if given else "--storage-options"
        raise AseprError(format_problem(
            "asepr train --centralized / --strategy fds", "a local input and run directory (the baselines train "
            "on one machine's copy)", found, "copy the input to a local directory, and pass a local --run-dir."))


def fds_bytes_line(row: dict[str, Any]) -> str:
    """The last FDS round's bytes, all ranks together, per category."""
    from asepr.training.fds import CATEGORIES

    parts = [f"{c} {float(row.get(f'cluster_bytes_round_{c}', 0)) / 2**20:,.2f}" for c in CATEGORIES]
    return f"MiB sent in round {row['round']} by all ranks: " + ", ".join(parts)


def _train_fds(args: argparse.Namespace, config) -> int:
    from asepr.storage.inputs.directory import open_input
    from asepr.training.rundir.checkpoint import RunDir
    from asepr.training.fds import fds_config
    from asepr.training.main import default_run_dir
    from asepr.workflows.launch import launch_trainers

    if args.centralized or not args.out or args.nproc is None:
        raise AseprError(format_problem("asepr train --strategy fds", "INPUT (the input directory) and --nproc K",
                                        f"INPUT {args.out!r}, --nproc {args.nproc}, --centralized {args.centralized!r}",
                                        "run `asepr train INPUT --strategy fds --nproc K` (without --centralized)."))
    try:
        config = fds_config(config)
    except AseprError as exc:
        print(f"asepr train: error: {exc}", file=sys.stderr)
        return 2
    _check_nproc(args.nproc)
    open_input(args.out)  # a missing input is named before any rank starts
    run_dir = Path(args.run_dir) if args.run_dir else default_run_dir(args.out, config, "fds")
    launch_trainers(args.out, run_dir, config, args.nproc, strategy="fds", fds_partition=args.fds_partition,
                    resume=args.resume, overwrite=args.overwrite, quiet=args.quiet, verbose=args.verbose)
    rows = RunDir(run_dir).read_metrics()
    if args.quiet:
        return 0
    partition = (RunDir(run_dir).read_run_info() or {}).get("partition", args.fds_partition)
    print(summary_table(rows, f"{args.nproc} trainers, {config.model}, fds ({partition} partition, "
                              f"{config.batch_size} seeds per rank and step) on {args.out} (run directory {run_dir})"))
    if rows:
        print(fds_bytes_line(rows[-1]))
    return 0


def register(sub, add_common) -> None:
    from asepr.training.main import add_train_arguments

    p = sub.add_parser("train", help="train K local GNNs with reconciliation rounds (torchrun), or the baseline")
    add_common(p)
    p.add_argument("out", nargs="?", help="the partition output of `asepr partition` (the INPUT for --strategy fds)")
    p.add_argument("--nproc", type=int, default=None, help="trainer processes (default: one per partition)")
    p.add_argument("--centralized", metavar="INPUT", help="train on the whole INPUT in one process instead")
    _add_elastic_arguments(p)
    add_train_arguments(p)
    p.set_defaults(handler=_cmd_train, command="train")


def _add_elastic_arguments(p) -> None:
    """torchrun's elastic settings, for a job across machines (the same command on each)."""
    p.add_argument("--nnodes", metavar="MIN:MAX",
                   help="machines of the job, each running this command with --nproc ranks; the job continues on "
                        "at least MIN after losing a machine (with --max-restarts)")
    p.add_argument("--rdzv-endpoint", metavar="HOST:PORT",
                   help="with --nnodes: the c10d rendezvous, the same on every machine (hosted by the machine "
                        "whose address it is, which must stay up)")
    p.add_argument("--rdzv-id", metavar="ID", help="with --nnodes: the job's id at the rendezvous (default asepr)")
    p.add_argument("--rdzv-conf", metavar="K=V,...",
                   help="with --nnodes: torchrun's rendezvous settings, e.g. last_call_timeout=60 (seconds to wait "
                        "for more machines once MIN have joined; default 30)")
    p.add_argument("--max-restarts", type=int, default=0, metavar="N",
                   help="restart the ranks up to N times after a failure (a lost machine); they resume from the "
                        "last complete round on the ranks left (default 0: a failure stops the job)")


def _ranks_per_machine(nproc: int | None) -> int:
    """``--nproc`` of a job across machines: required (there is no one rank per partition
    to default to when the machines share the partitions)."""
    if nproc is None:
        raise AseprError(format_problem("asepr train --nnodes", "--nproc K (the ranks of each machine)", "no --nproc",
                                        "pass --nproc K, the same on every machine."))
    _check_nproc(nproc)
    return nproc


def _capacity_problem(config, nproc: int, elastic) -> bool:
    """Print the problem of a --speeds or --slowdown list that does not give one value per
    rank (on one machine, where the ranks are known before they start)."""
    from asepr.training.group.capacity import check_rank_lists

    problem = None if elastic else check_rank_lists(config, nproc)
    if problem:
        print(f"asepr train: error: {problem}", file=sys.stderr)
    return bool(problem)


def _check_nproc(nproc: int) -> None:
    if nproc < 1:
        raise AseprError(format_problem("asepr train --nproc", "an integer >= 1", str(nproc), "pass --nproc K."))


def check_partition_output(out: str | Path, nproc: int | None, storage_options: dict | None = None) -> int:
    """The ranks to launch on the partition output ``out``, checked before any rank starts.

    ``out`` must hold a committed generation (its manifest), and ``nproc`` (default: one
    rank per partition) must lie in [1, partitions]: rank r trains partitions r, r+K, ...

    Raises
    ------
    StoreError
        No committed manifest (the output is missing or was never committed).
    AseprError
        ``nproc`` below 1 or above the partition count.
    """
    from asepr.storage import read_manifest
    from asepr.storage.errors import StoreError
    from asepr.storage.inputs.directory import read_meta

    try:
        num_parts = int(read_manifest(out, storage_options=storage_options)["num_parts"])
    except StoreError:
        if read_meta(out, storage_options) is None:
            raise
        raise AseprError(format_problem(
            f"{out}", "a partition output (manifest.json, as `asepr partition` writes it)",
            "an input directory (meta.json)",
            f"partition it first (`asepr partition {out} PARTS -k K`, then `asepr train PARTS`), or train the "
            f"centralized baseline on it (`asepr train --centralized {out}`).")) from None
    if nproc is None:
        return num_parts
    _check_nproc(nproc)
    if nproc > num_parts:
        raise AseprError(format_problem(
            f"asepr train --nproc {nproc} on {out}",
            f"at most {num_parts} ranks (the output has {num_parts} partitions; rank r trains partitions r, "
            "r+K, ...)", f"{nproc} ranks",
            f"pass --nproc {num_parts} or fewer, or repartition with -k {nproc} or more."))
    return nproc
