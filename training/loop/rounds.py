"""The round bookkeeping both trainers share (:mod:`asepr.training.loop.distributed`, :mod:`asepr.training.fds`).

* :func:`all_ranks_ready`: a setup step that can fail on bad data (loading a partition,
  a checkpoint) ends with every rank knowing which ranks failed, so the failing rank
  reports its own error (naming the file) and the others name that rank, instead of
  blocking in the next collective until the timeout;
* :func:`evaluates` / :func:`evaluates_epoch`: the evaluation schedule (every
  ``config.eval_interval`` epochs, see :class:`~asepr.training.config.TrainConfig`);
* :func:`metrics_row`: one evaluation's metrics row, the same columns for every
  trainer; :func:`bytes_columns`: its bytes columns, over all ranks;
* :func:`placement_columns`: the one-time data placement (the rows each rank loads);
  :func:`batch_columns`: each rank's training seeds and resolved batch size;
* :func:`start_run` and :func:`commit_round`: the run directory at the start and at the
  end of every round (:class:`asepr.training.rundir.checkpoint.RunDir`).

Time and evaluation columns of a metrics row (rank 0's clock; the ranks meet at every
synchronisation, so the times agree up to one step):

=========================  ==========================================================
``round``, ``epoch``       the round, and the epochs trained when it was evaluated
``elapsed_s``              training seconds since the run started, evaluation excluded
``train_seconds``          training seconds since the previous row
``eval_seconds``           this evaluation (the exact inference's one-time routing is
                           in the first); ``eval_elapsed_s`` all evaluations so far
``seconds``                ``train_seconds + eval_seconds``
``eval_mode``              ``exact`` (the global model on the whole graph) or ``local``
                           (each rank's partition only; not exact)
``val``, ``test``          the task's metric (``metric``) on the validation and test sets
``best_val``               the best ``val`` so far, ``test_at_best_val`` the ``test`` of
                           that evaluation and ``best_epoch`` its epoch
=========================  ==========================================================

Bytes columns (sent, by :class:`asepr.training.group.comm.Comm`'s cost model):

==============================  =====================================================
``bytes_sent_round``            the training traffic (every category but ``eval``) of
                                the row's round up to the row, mean over ranks
``bytes_sent_round_max``        the same, the largest rank
``eval_bytes_sent_round``       the evaluation traffic (``eval``) in the same span,
                                mean over ranks
``eval_bytes_sent_round_max``   the same, the largest rank
``bytes_sent_cum``              training traffic since the run started, mean over ranks
``bytes_sent_cum_max``          the same, the largest rank
``messages_sent_round``         training messages of the same span as
                                ``bytes_sent_round``, mean over ranks
``messages_sent_cum_max``       training messages since the run started, largest rank
``bytes_sent_total_max``        the most any rank has sent since the run started
                                (evaluation included); ``messages_sent_total_max``
                                its messages
``cluster_bytes_round_<c>``     (for the ``categories`` asked for) category c, summed over
                                ranks, and ``cluster_bytes_round`` their sum
==============================  =====================================================

Memory columns (each rank's own RSS high-water mark, ``VmHWM``, see :func:`rank_peak_rss_bytes`):

=============================  ======================================================
``peak_rss_mib``               the largest rank's peak since it started (evaluation
                               included); ``peak_rss_mib_mean`` the mean over ranks;
                               ``peak_rss_mib_ranks`` every rank's, in rank order
``train_peak_rss_mib``         the same before this evaluation started (training and
                               loading only), with ``_mean`` and ``_ranks``
``eval_peak_ratio_max``        the largest ratio over ranks of the peak after the
                               evaluation to the peak before it (1 when the evaluation
                               stayed below what training had used)
=============================  ======================================================

Drift columns (the round loop of :mod:`asepr.training.loop.distributed` only; docs/design.md#diagnostics):

=============================  ======================================================
``drift_mean``, ``drift_max``  the row's round's drift of each rank, mean and largest
                               over ranks: the L2 norm ‖θ_r − θ_g‖ of the rank's local
                               parameters at a synchronisation minus the global
                               parameters its local training started from, averaged
                               over the round's synchronisations
=============================  ======================================================
"""

from __future__ import annotations

import errno
import logging
import math
import os
import time
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import torch

from asepr.storage.errors import AseprError, FileSystemError, format_problem
from asepr.storage.resources import own_peak_rss_bytes, peak_rss_bytes
from asepr.training.rundir.checkpoint import RunDir, TrainerError
from asepr.training.group.comm import Comm
from asepr.training.config import TrainConfig

__all__ = ["EVAL", "all_ranks_ready", "batch_columns", "bytes_columns", "commit_round", "drift_columns", "evaluates",
           "evaluates_epoch", "metrics_row", "available_cores", "idle_cores", "local_ranks", "peak_columns", "placement_columns",
           "rank_peak_rss_bytes", "start_run", "threads"]

log = logging.getLogger(__name__)

T = TypeVar("T")

#: The byte category of evaluation traffic, kept out of ``bytes_sent_round``.
EVAL = "eval"


def available_cores() -> list[int]:
    """The CPUs this process may run on (its affinity mask: a cgroup or ``taskset`` limits it)."""
    try:
        return sorted(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return list(range(os.cpu_count() or 1))


def idle_cores(cpus: Sequence[int], window_s: float = 0.25) -> float | None:
    """How many of ``cpus`` were idle over the next ``window_s`` seconds, from the per-CPU
    counters of ``/proc/stat`` (None where there are none)."""

    def sample() -> dict[int, tuple[int, int]]:
        times = {}
        with open("/proc/stat") as fh:
            for line in fh:
                if line.startswith("cpu") and line[3:4].isdigit():
                    fields = line.split()
                    ticks = [int(v) for v in fields[1:9]]  # user .. steal; guest time is inside user
                    times[int(fields[0][3:])] = (ticks[3] + ticks[4], sum(ticks))  # idle + iowait, all
        return times

    try:
        before = sample()
        time.sleep(window_s)
        after = sample()
    except (OSError, ValueError, IndexError):
        return None
    idle = 0.0
    for cpu in cpus:
        if cpu in before and cpu in after and after[cpu][1] > before[cpu][1]:
            idle += (after[cpu][0] - before[cpu][0]) / (after[cpu][1] - before[cpu][1])
    return idle


def threads(config: TrainConfig, local_ranks: int, idle: float | None = None) -> int:
    """torch CPU threads per process: ``config.threads``, or its share of the cores.

    The share is the process's CPUs (:func:`available_cores`) divided among the trainer
    processes of this machine (``local_ranks``), at least 1, and no more than the CPUs
    that were idle when it started (``idle``; measured by :func:`idle_cores` when None,
    rounded). torch's threads wait for one another at every operation: one that shares
    its core with another busy process holds the others back, and the whole process runs
    at the pace of that thread (docs/results/threads). Alone on the machine, a process
    uses every core.
    """
    if config.threads:
        return int(config.threads)
    cpus = available_cores()
    share = max(1, len(cpus) // max(local_ranks, 1))
    free = idle_cores(cpus) if idle is None else idle
    return share if free is None else max(1, min(share, int(free + 0.5)))


def local_ranks(world: int) -> int:
    """The trainer processes on this machine: torchrun's ``LOCAL_WORLD_SIZE``, SLURM's
    tasks per node, or else ``world`` (every rank here)."""
    for name in ("LOCAL_WORLD_SIZE", "SLURM_NTASKS_PER_NODE"):
        value = os.environ.get(name, "").split("(")[0]
        if value.isdigit() and int(value) > 0:
            return int(value)
    return max(1, int(world))


def configure_cpu(config: TrainConfig, world: int) -> int:
    """Set this process's torch CPU threads (:func:`threads`, for the :func:`local_ranks`
    of ``world`` ranks) and flush denormal floats to zero; returns the threads.

    Weights that only weight decay moves (a unit whose ReLU input stays negative) and Adam's
    moments of such weights decay geometrically into the denormal range, where x86 float
    arithmetic is many times slower; a long link-prediction run slowed about twentyfold
    (``docs/results/train-link-scaffold/README.md``). Values below 1.2e-38 are zero for any
    model.
    """
    count = threads(config, local_ranks(world))
    torch.set_num_threads(count)
    torch.set_flush_denormal(True)
    log.info("torch threads per process: %d", count)
    return count


def evaluates(config: TrainConfig, round_index: int) -> bool:
    """Whether the global model after round ``round_index`` (0-based) of ``local_epochs``
    epochs is evaluated: when the round reaches a multiple of ``eval_every`` epochs, and
    after the last round."""
    e, n = config.local_epochs, config.eval_interval
    return (round_index + 1) * e // n > round_index * e // n or round_index + 1 == config.rounds


def evaluates_epoch(config: TrainConfig, epoch: int) -> bool:
    """Whether a trainer with a global model after every step (fds) evaluates after
    ``epoch`` epochs (1-based, counted from the run's start): every ``eval_every`` epochs
    and after the last."""
    return epoch % config.eval_interval == 0 or epoch == config.rounds * config.local_epochs


def all_ranks_ready(comm: Comm, what: str, step: Callable[[], T]) -> T:
    """Run this rank's ``step``; if any rank's step failed, raise on every rank.

    Parameters
    ----------
    comm
        The ranks that take the step together (a collective: every rank calls it).
    what
        The step, for the other ranks' message (e.g. ``"load its partitions"``).
    step
        This rank's part. An :class:`~asepr.storage.errors.AseprError` it raises (a bad
        partition store or checkpoint, named) fails the step.

    Raises
    ------
    AseprError
        On a failing rank: its own error, unless a lower rank failed with the same OS
        error (:class:`~asepr.storage.errors.FileSystemError`: every rank's file on one full
        disk), which is then said once, by the lowest. On the others: a
        :class:`TrainerError` naming the failed ranks.
    """
    try:
        result, error = step(), None
    except AseprError as exc:
        result, error = None, exc
    code = float(error.errno or -1) if isinstance(error, FileSystemError) else -1.0
    flags = comm.gather_uncounted(torch.tensor([float(error is not None), code]))
    failed = [r for r, flag in enumerate(flags[:, 0].tolist()) if flag]
    if error is not None:
        if failed[0] == comm.rank or code < 0 or float(flags[failed[0], 1]) != code:
            raise error
        raise TrainerError(format_problem(
            f"trainer rank {comm.rank}", f"every rank to {what}",
            f"the same error as rank {failed[0]} ({errno.errorcode.get(error.errno, error.errno)})",
            f"see the error of rank {failed[0]} (it names the file); fix that and rerun.")) from error
    if failed:
        raise TrainerError(format_problem(
            f"trainer rank {comm.rank}", f"every rank to {what}",
            f"rank{'s' if len(failed) > 1 else ''} {', '.join(map(str, failed))} could not",
            f"see the error of rank {failed[0]} (it names the file); fix that and rerun."))
    return result


def bytes_columns(comm: Comm, before: dict[str, dict[str, float]], categories: Sequence[str] = ()) -> dict[str, float]:
    """The bytes columns of a metrics row (see the module docstring), one uncounted all_gather.

    Parameters
    ----------
    before
        ``comm.bytes.state_dict()`` when the round started.
    categories
        Categories to sum over all ranks as ``cluster_bytes_round_<c>`` (none by default).
    """
    counter = comm.bytes
    sent, sent_before = counter.sent, before.get("sent", {})
    delta = {c: sent.get(c, 0.0) - sent_before.get(c, 0.0) for c in set(sent) | set(sent_before)}
    evaluation = delta.get(EVAL, 0.0)
    train_messages = _training_messages(counter.messages)
    mine = [sum(delta.values()) - evaluation, evaluation, counter.total_sent, counter.total_sent - sent.get(EVAL, 0.0),
            train_messages - _training_messages(before.get("messages", {})), train_messages,
            sum(counter.messages.values())]
    mine += [delta.get(c, 0.0) for c in categories]
    every = comm.gather_uncounted(torch.tensor(mine, dtype=torch.float64))
    row = {"bytes_sent_round": float(every[:, 0].mean()), "bytes_sent_round_max": float(every[:, 0].max()),
           "eval_bytes_sent_round": float(every[:, 1].mean()), "eval_bytes_sent_round_max": float(every[:, 1].max()),
           "bytes_sent_cum": float(every[:, 3].mean()), "bytes_sent_cum_max": float(every[:, 3].max()),
           "messages_sent_round": float(every[:, 4].mean()), "messages_sent_cum_max": float(every[:, 5].max()),
           "bytes_sent_total_max": float(every[:, 2].max()), "messages_sent_total_max": float(every[:, 6].max())}
    if categories:
        cluster = every[:, 7:].sum(dim=0)
        row["cluster_bytes_round"] = float(cluster.sum())
        row.update({f"cluster_bytes_round_{c}": float(v) for c, v in zip(categories, cluster.tolist())})
    return row


def _training_messages(messages: dict[str, float]) -> float:
    return sum(v for c, v in messages.items() if c != EVAL)


def metrics_row(comm: Comm, rows: list[dict[str, Any]], before: dict[str, dict[str, float]], *, round_index: int,
                epoch: int, generation: int, elapsed: float, eval_seconds: float, loss: float, kd_loss: float,
                metric: str, metrics: dict[str, float], eval_mode: str,
                categories: Sequence[str] = (), train_peak: int | None = None,
                drift: float | None = None) -> dict[str, Any]:
    """One evaluation's metrics row, the columns of the module docstring (a collective).

    Parameters
    ----------
    rows
        The run's rows so far (the previous one gives the intervals and the best so far).
    before
        ``comm.bytes.state_dict()`` when the round started.
    round_index, epoch
        The round (0-based) and the epochs trained so far.
    elapsed
        Training seconds since the run started, evaluation excluded.
    eval_seconds
        The seconds this evaluation took.
    metrics
        The evaluation's ``{"val", "test", ...}``.
    categories
        Passed to :func:`bytes_columns`.
    train_peak
        This rank's :func:`rank_peak_rss_bytes` when the evaluation started (adds the
        ``train_peak_*`` and ``eval_peak_ratio_max`` columns).
    drift
        This rank's drift in the row's round (adds :func:`drift_columns`).
    """
    previous = rows[-1] if rows else {}
    train_seconds = elapsed - float(previous.get("elapsed_s", 0.0))
    val, test = float(metrics["val"]), float(metrics["test"])
    best = float(previous.get("best_val", float("nan")))
    if math.isnan(best) or val > best:
        best_columns = {"best_val": val, "test_at_best_val": test, "best_epoch": epoch}
    else:
        best_columns = {k: previous[k] for k in ("best_val", "test_at_best_val", "best_epoch")}
    return {"round": round_index + 1, "epoch": epoch, "generation": generation,
            "seconds": round(train_seconds + eval_seconds, 4), "elapsed_s": round(elapsed, 4),
            "train_seconds": round(train_seconds, 4), "eval_seconds": round(eval_seconds, 4),
            "eval_elapsed_s": round(float(previous.get("eval_elapsed_s", 0.0)) + eval_seconds, 4),
            "loss": loss, "kd_loss": kd_loss, "eval_mode": eval_mode, "metric": metric, "val": val, "test": test,
            **{k: v for k, v in metrics.items() if k not in ("val", "test")}, **best_columns,
            **bytes_columns(comm, before, categories), "world_size": comm.world_size,
            **peak_columns(comm, train_peak), **({} if drift is None else drift_columns(comm, drift))}


def drift_columns(comm: Comm, drift: float) -> dict[str, float]:
    """``drift_mean`` and ``drift_max``: this rank's ``drift`` (see the module docstring)
    over the ranks, one uncounted all_gather."""
    every = comm.gather_uncounted(torch.tensor([float(drift)], dtype=torch.float64))
    return {"drift_mean": float(every[:, 0].mean()), "drift_max": float(every[:, 0].max())}


def rank_peak_rss_bytes() -> int:
    """This process's own RSS high-water mark (``VmHWM`` of ``/proc/self/status``), in bytes.

    Not ``getrusage``'s ``ru_maxrss``: Linux carries the parent's high-water mark across
    fork and exec into it, so every rank a launcher starts would report at least the
    launcher's peak. Off Linux (no ``/proc``): ``ru_maxrss``.
    """
    own = own_peak_rss_bytes()
    return peak_rss_bytes() if own is None else own


def peak_columns(comm: Comm, train_peak: int | None = None) -> dict[str, Any]:
    """The memory columns of a metrics row (see the module docstring), one uncounted all_gather.

    Parameters
    ----------
    train_peak
        This rank's :func:`rank_peak_rss_bytes` before the evaluation (None: no
        ``train_peak_*`` columns).
    """
    now = rank_peak_rss_bytes()
    before = now if train_peak is None else train_peak
    every = comm.gather_uncounted(torch.tensor([float(now), float(before)], dtype=torch.float64)) / 2**20

    def summary(column: torch.Tensor, name: str) -> dict[str, Any]:
        return {name: round(float(column.max()), 1), f"{name}_mean": round(float(column.mean()), 1),
                f"{name}_ranks": " ".join(f"{v:.0f}" for v in column.tolist())}

    row = summary(every[:, 0], "peak_rss_mib")
    if train_peak is not None:
        row.update(summary(every[:, 1], "train_peak_rss_mib"))
        row["eval_peak_ratio_max"] = round(float((every[:, 0] / every[:, 1].clamp(min=1e-9)).max()), 3)
    return row


def placement_columns(rows: int, row_bytes: int, comm: Comm) -> dict[str, float]:
    """The one-time data placement, mean and max over ranks (an uncounted all_gather).

    Parameters
    ----------
    rows
        The node rows this rank loads (an ASEPR rank: masters, replicas and halo copies
        of its partitions; an fds rank: its own vertices; the centralized run: all).
    row_bytes
        The bytes of one stored feature row (``4 · d`` for float32 features).

    Returns
    -------
    dict
        ``placement_rows_mean``, ``placement_rows_max``, ``placement_bytes_mean``,
        ``placement_bytes_max``.
    """
    every = comm.gather_uncounted(torch.tensor([float(rows), float(rows) * row_bytes], dtype=torch.float64))
    return {"placement_rows_mean": float(every[:, 0].mean()), "placement_rows_max": float(every[:, 0].max()),
            "placement_bytes_mean": float(every[:, 1].mean()), "placement_bytes_max": float(every[:, 1].max())}


def batch_columns(num_train: int, batch_size: int, comm: Comm) -> dict[str, list[int]]:
    """Every rank's training seeds and the batch size it resolved them to
    (:func:`asepr.training.config.resolve_batch_size`), in rank order (an uncounted all_gather):
    ``train_seeds`` and ``batch_sizes``, for the run's record (``run.json``)."""
    every = comm.gather_uncounted(torch.tensor([float(num_train), float(batch_size)], dtype=torch.float64))
    return {"train_seeds": [int(v) for v in every[:, 0]], "batch_sizes": [int(v) for v in every[:, 1]]}


def start_run(runs: RunDir, comm: Comm, info: dict[str, Any]) -> None:
    """A fresh run: rank 0 clears the run directory's previous run and writes ``run.json``."""
    if comm.rank == 0:
        runs.clear()
        runs.write_run_info(info)


def commit_round(runs: RunDir, round_index: int, comm: Comm, rank_state: dict[str, Any],
                 global_state: dict[str, Any], rows: list[dict[str, Any]],
                 row: dict[str, Any] | list[dict[str, Any]] | None,
                 on_round: Callable[[dict[str, Any]], None] | None) -> None:
    """Every rank saves its state; once every rank has (a failed save, e.g. on a full disk,
    stops every rank with one message: :func:`all_ranks_ready`) rank 0 commits the round and
    reports the round's new metrics ``row`` (a row, a list of rows when it was evaluated
    several times, or None)."""
    all_ranks_ready(comm, "save its checkpoint", lambda: runs.save_rank(round_index, comm.rank, rank_state))
    if comm.rank != 0:
        return
    runs.commit(round_index, comm.world_size, global_state, rows)
    for new in [row] if isinstance(row, dict) else row or []:
        log.info("round %d: %s", round_index + 1, new)
        if on_round is not None:
            on_round(new)
