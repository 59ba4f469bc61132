"""The time-to-accuracy protocol: early stopping, and time in a modelled cluster.

Every strategy (centralized, ASEPR's, fds) trains until its validation metric has not
improved for ``patience`` evaluations, or for at most its rounds
(:func:`patience_spent`, checked by each trainer's round loop before every round). The
metric of a metrics row is the global one (all_reduced over the ranks), so every rank
decides the same and all stop after the same round; the check reads only the rows, so a
resumed run stops where the uninterrupted one did.

Time is counted as a cluster of one machine per rank would spend it. This machine's
wall clock says little when k ranks share a few cores, so each rank measures its own
compute: the CPU seconds of its process while it trains (:class:`ComputeClock`,
``time.process_time``, all its threads; evaluation excluded). Training is synchronous,
so a round takes as long as its slowest rank: the cluster's compute up to an evaluation
is the sum over the rounds of the largest rank's seconds (``compute_s_cum_max`` in the
metrics rows). A rank declared slower (``--slowdown``, :mod:`asepr.training.group.capacity`) counts
its CPU seconds times its factor: a modelled machine of that speed.
:func:`cluster_seconds` adds the network model: the busiest rank's bytes over the
bandwidth plus its messages times a latency, with the evaluation's bytes folded in (an
evaluation is part of the run's cost even when it is not training).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

import torch

__all__ = ["LATENCY_S", "NETWORK_GBITS", "ComputeClock", "best_row", "cluster_seconds", "modelled_seconds",
           "patience_spent", "time_to_fraction"]

#: The network model: link bandwidths (Gbit/s) and the latency of one message (s).
NETWORK_GBITS = (1, 10, 100)
LATENCY_S = 50e-6


def modelled_seconds(seconds: float, bytes_sent: float, messages: float, gbit: float,
                     latency: float = LATENCY_S) -> float:
    """The network model: ``seconds + bytes_sent · 8 / (gbit · 10^9) + messages · latency``.

    Parameters
    ----------
    seconds
        Compute seconds (measured, or the slowest ranks' sum).
    bytes_sent, messages
        Bytes and messages sent by the busiest rank.
    gbit
        Link bandwidth in Gbit/s.
    latency
        Seconds per message.
    """
    return float(seconds) + float(bytes_sent) * 8 / (gbit * 1e9) + float(messages) * latency


def best_row(rows: Sequence[dict[str, Any]]) -> dict[str, Any] | None:
    """The first evaluation with the highest validation metric (ties keep the earlier,
    as the trainers' ``best_val`` columns do)."""
    best = None
    for row in rows:
        if best is None or float(row["val"]) > float(best["val"]):
            best = row
    return best


def patience_spent(rows: Sequence[dict[str, Any]], patience: int) -> bool:
    """Whether the last ``patience`` evaluations of ``rows`` all failed to improve on the
    best validation metric before them (``patience`` 0: never)."""
    if patience <= 0 or not rows:
        return False
    best = best_row(rows)
    since = len(rows) - 1 - next(i for i, r in enumerate(rows) if r is best)
    return since >= patience


class ComputeClock:
    """One rank's CPU seconds of training per round, and the cluster's synchronous sum.

    :meth:`start` / :meth:`stop` bracket a round's training on every rank; :meth:`settle`
    (a collective, uncounted: bookkeeping) takes, for each round since the last call, the
    largest rank's seconds and adds them to :attr:`cum_max`. ``factor`` is this rank's
    declared slowdown: its seconds count ``factor`` times (1: as measured).
    """

    def __init__(self, cum_max: float = 0.0, factor: float = 1.0):
        self.cum_max = float(cum_max)
        self.factor = float(factor)
        self.pending: list[float] = []
        self._t0 = 0.0

    def start(self) -> None:
        self._t0 = time.process_time()

    def stop(self) -> None:
        seconds = time.process_time() - self._t0
        self.pending.append(seconds if self.factor == 1.0 else seconds * self.factor)

    def settle(self, comm) -> float:
        """``cum_max`` after adding every pending round's slowest rank (every rank must call)."""
        if self.pending:
            every = comm.gather_uncounted(torch.tensor(self.pending, dtype=torch.float64))
            self.cum_max += float(every.reshape(comm.world_size, -1).max(dim=0).values.sum())
            self.pending = []
        return self.cum_max


def cluster_seconds(row: dict[str, Any], gbit: float, latency: float = LATENCY_S,
                    eval_bytes: float = 0.0) -> float:
    """Modelled cluster seconds up to a metrics row: the slowest ranks' compute
    (``compute_s_cum_max``; rows without it: ``elapsed_s``, this machine's training wall
    clock) + (the busiest rank's training bytes + ``eval_bytes``) · 8 / (``gbit`` · 10⁹)
    + its messages · ``latency``."""
    compute = row.get("compute_s_cum_max")
    compute = float(row["elapsed_s"]) if compute is None or compute != compute else float(compute)
    sent = float(row.get("bytes_sent_cum_max", 0.0)) + float(eval_bytes)
    return modelled_seconds(compute, sent, row.get("messages_sent_cum_max", 0.0), gbit, latency)


def time_to_fraction(rows: Sequence[dict[str, Any]], target: float | None, gbit: float,
                     latency: float = LATENCY_S) -> float | None:
    """Modelled cluster seconds (:func:`cluster_seconds`) until the first evaluation whose
    validation metric reaches ``target``, the evaluation traffic of it and of every
    evaluation before it folded in; None when none does."""
    if target is None:
        return None
    eval_bytes = 0.0
    for row in rows:
        eval_bytes += float(row.get("eval_bytes_sent_round_max", 0.0))
        if float(row["val"]) >= target:
            return cluster_seconds(row, gbit, latency, eval_bytes)
    return None
