"""The round bookkeeping both trainers share (:mod:`training.distributed`, :mod:`training.fds`).

* :func:`all_ranks_ready`: a setup step that can fail on bad data (loading a partition,
  a checkpoint) ends with every rank knowing which ranks failed, so the failing rank
  reports its own error (naming the file) and the others name that rank, instead of
  blocking in the next collective until the timeout;
* :func:`bytes_columns`: the bytes columns of a metrics row, over all ranks;
* :func:`start_run` and :func:`commit_round`: the run directory at the start and at the
  end of every round (:class:`training.checkpoint.RunDir`).

Bytes columns (sent, by :class:`training.comm.Comm`'s cost model):

==============================  =====================================================
``bytes_sent_round``            the round's training traffic (every category but
                                ``eval``), mean over ranks
``bytes_sent_round_max``        the same, the largest rank
``eval_bytes_sent_round``       the round's evaluation traffic (``eval``), mean over ranks
``eval_bytes_sent_round_max``   the same, the largest rank
``bytes_sent_total_max``        the most any rank has sent since the run started
``cluster_bytes_round_<c>``     (for the ``categories`` asked for) category c, summed over
                                ranks, and ``cluster_bytes_round`` their sum
==============================  =====================================================
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import torch

from storage.errors import AseprError, format_problem
from training.checkpoint import RunDir, TrainerError
from training.comm import Comm
from training.config import TrainConfig

__all__ = ["EVAL", "all_ranks_ready", "bytes_columns", "commit_round", "evaluates", "start_run", "threads"]

log = logging.getLogger(__name__)

T = TypeVar("T")

#: The byte category of evaluation traffic, kept out of ``bytes_sent_round``.
EVAL = "eval"


def threads(config: TrainConfig, world: int) -> int:
    """torch CPU threads per rank: ``config.threads``, or the cores shared by the ranks (at least 1)."""
    return config.threads or max(1, (os.cpu_count() or 1) // max(world, 1))


def evaluates(config: TrainConfig, round_index: int) -> bool:
    """Whether round ``round_index`` (0-based) is evaluated: every ``eval_every``-th and the last."""
    return (round_index + 1) % config.eval_every == 0 or round_index + 1 == config.rounds


def all_ranks_ready(comm: Comm, what: str, step: Callable[[], T]) -> T:
    """Run this rank's ``step``; if any rank's step failed, raise on every rank.

    Parameters
    ----------
    comm
        The ranks that take the step together (a collective: every rank calls it).
    what
        The step, for the other ranks' message (e.g. ``"load its partitions"``).
    step
        This rank's part. An :class:`~storage.errors.AseprError` it raises (a bad
        partition store or checkpoint, named) fails the step.

    Raises
    ------
    AseprError
        On a failing rank: its own error. On the others: a :class:`TrainerError`
        naming the failed ranks.
    """
    try:
        result, error = step(), None
    except AseprError as exc:
        result, error = None, exc
    flags = comm.gather_uncounted(torch.tensor([float(error is not None)]))
    failed = [r for r, flag in enumerate(flags[:, 0].tolist()) if flag]
    if error is not None:
        raise error
    if failed:
        raise TrainerError(format_problem(
            f"trainer rank {comm.rank}", f"every rank to {what}",
            f"rank{'s' if len(failed) > 1 else ''} {', '.join(map(str, failed))} could not",
            f"see the error of rank {failed[0]} (it names the file); fix that and rerun."))
    return result


def bytes_columns(comm: Comm, before: dict[str, float], categories: Sequence[str] = ()) -> dict[str, float]:
    """The bytes columns of a metrics row (see the module docstring), one uncounted all_gather.

    Parameters
    ----------
    before
        ``comm.bytes.sent`` (a copy) when the round started.
    categories
        Categories to sum over all ranks as ``cluster_bytes_round_<c>`` (none by default).
    """
    sent = comm.bytes.sent
    delta = {c: sent.get(c, 0.0) - before.get(c, 0.0) for c in set(sent) | set(before)}
    evaluation = delta.get(EVAL, 0.0)
    mine = [sum(delta.values()) - evaluation, evaluation, comm.bytes.total_sent]
    mine += [delta.get(c, 0.0) for c in categories]
    every = comm.gather_uncounted(torch.tensor(mine, dtype=torch.float64))
    row = {"bytes_sent_round": float(every[:, 0].mean()), "bytes_sent_round_max": float(every[:, 0].max()),
           "eval_bytes_sent_round": float(every[:, 1].mean()), "eval_bytes_sent_round_max": float(every[:, 1].max()),
           "bytes_sent_total_max": float(every[:, 2].max())}
    if categories:
        cluster = every[:, 3:].sum(dim=0)
        row["cluster_bytes_round"] = float(cluster.sum())
        row.update({f"cluster_bytes_round_{c}": float(v) for c, v in zip(categories, cluster.tolist())})
    return row


def start_run(runs: RunDir, comm: Comm, info: dict[str, Any]) -> None:
    """A fresh run: rank 0 clears the run directory's previous run and writes ``run.json``."""
    if comm.rank == 0:
        runs.clear()
        runs.write_run_info(info)


def commit_round(runs: RunDir, round_index: int, comm: Comm, rank_state: dict[str, Any],
                 global_state: dict[str, Any], rows: list[dict[str, Any]], row: dict[str, Any] | None,
                 on_round: Callable[[dict[str, Any]], None] | None) -> None:
    """Every rank saves its state; after a barrier rank 0 commits the round and reports ``row``."""
    runs.save_rank(round_index, comm.rank, rank_state)
    comm.barrier()
    if comm.rank != 0:
        return
    runs.commit(round_index, comm.world_size, global_state, rows)
    if row is not None:
        log.info("round %d: %s", round_index + 1, row)
        if on_round is not None:
            on_round(row)
