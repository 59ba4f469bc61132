"""A run that loses a machine continues on the survivors from its last complete round.

Under torchrun's elastic agents (``--nnodes MIN:MAX --max-restarts N``) a machine that
dies makes the other ranks' collectives fail; each surviving agent then stops its ranks,
meets the other survivors at the rendezvous again and restarts its ranks with a new
``WORLD_SIZE`` and ``TORCHELASTIC_RESTART_COUNT`` > 0. A restarted rank resumes
(:func:`restarted`): the round that was in flight is lost, none before it.

At the new world size rank r trains partitions r, r + W, ... (:func:`asepr.training.graph.data.rank_partitions`),
read from the output, on the local disk or the object store, like any rank's. What is
global continues unchanged: the global model, the server optimiser's state, SCAFFOLD's
global variate, the metrics rows and the modelled time. What is a rank's own (its local
model, Adam's moments, SCAFFOLD's ``c_r``) belongs to the partitions it was trained on:
a rank whose partitions are exactly an old rank's takes that rank's state
(:func:`resume_source`); a rank whose partitions moved starts from the global model, with
fresh Adam moments and ``c_r = c`` (no correction until its first segment's estimate).
Each rank keeps the byte counters of the old rank of its number, so the cumulative
columns of ``metrics.csv`` continue.

Which rank trained which partitions in each round is kept in the global checkpoint and
written to ``RUN/placement.json`` after every round (:class:`PlacementLog`).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import time
from typing import Any

import torch

from asepr.storage.errors import StoreError

__all__ = ["PLACEMENT", "PlacementLog", "claim_run_dir", "rank_placement", "restarted", "resume_source"]

log = logging.getLogger(__name__)

#: The run directory's record of each round's world size and each rank's partitions.
PLACEMENT = "placement.json"


def restarted() -> bool:
    """Whether torchrun's agent restarted this rank's group after a failure (a lost
    machine or a failed rank): ``TORCHELASTIC_RESTART_COUNT`` > 0."""
    try:
        return int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")) > 0
    except ValueError:
        return False


def rank_placement(part_ids, comm) -> list[list[int]]:
    """Every rank's partitions, in rank order (two uncounted all_gathers: bookkeeping)."""
    mine = [int(p) for p in part_ids]
    lengths = comm.gather_uncounted(torch.tensor([float(len(mine))], dtype=torch.float64))
    width = max(1, int(lengths.max()))
    padded = torch.full((width,), -1.0, dtype=torch.float64)
    padded[: len(mine)] = torch.tensor(mine, dtype=torch.float64)
    every = comm.gather_uncounted(padded)
    return [[int(v) for v in row if v >= 0] for row in every.tolist()]


def resume_source(global_state: dict[str, Any], run_info: dict[str, Any] | None,
                  placement: list[list[int]], rank: int) -> tuple[int | None, int]:
    """``(source, old_world)``: the old rank whose local state this rank takes on resume
    (None: its partitions moved, it starts from the global model) and the world size the
    checkpoint was written at.

    At the same world size every rank keeps its own state (checkpoints written before the
    placement was recorded included). At another, a rank takes the state of the old rank
    that trained exactly its partitions, when there is one.
    """
    old_world = global_state.get("world_size")
    if not isinstance(old_world, int):
        old_world = int((run_info or {}).get("world_size", len(placement)))
    if old_world == len(placement):
        return rank, old_world
    log = global_state.get("placement")
    before = log[-1].get("partitions") if isinstance(log, list) and log and isinstance(log[-1], dict) else None
    if not isinstance(before, list):
        return None, old_world
    mine = sorted(placement[rank])
    for old_rank, parts in enumerate(before):
        if isinstance(parts, list) and sorted(parts) == mine:
            return old_rank, old_world
    return None, old_world


class PlacementLog:
    """Each round's world size and every rank's partitions: carried in the global
    checkpoint (``"placement"``), written as ``RUN/placement.json`` by rank 0."""

    def __init__(self, entries: Any = None):
        self.entries: list[dict[str, Any]] = [dict(e) for e in entries or [] if isinstance(e, dict)]

    def record(self, round_index: int, placement: list[list[int]]) -> None:
        """Round ``round_index`` (0-based) trained with ``placement`` (every rank's partitions)."""
        self.entries = [e for e in self.entries if int(e.get("round", 0)) < round_index + 1]
        self.entries.append({"round": round_index + 1, "world_size": len(placement),
                             "partitions": [list(p) for p in placement]})

    def write(self, runs) -> None:
        """Replace ``RUN/placement.json`` (atomically) with the log, one round a line."""
        lines = ",\n".join("    " + json.dumps(e, sort_keys=True) for e in self.entries)
        runs.files.write(PLACEMENT, ('{"rounds": [\n' + lines + "\n]}\n").encode())


def claim_run_dir(runs, stack: contextlib.ExitStack, wait_s: float, poll_s: float = 5.0) -> None:
    """Rank 0 of a restarted group: take the run directory's lock into ``stack``, waiting up
    to ``wait_s`` seconds for it.

    The lost machine may have held it: a local lock dies with its process, but a lease on
    an object store (:class:`asepr.storage.commit.lease.Lease`) held by a process on another
    machine is only taken over once it has expired (``ttl`` after its last renewal).
    """
    deadline = time.monotonic() + wait_s
    while True:
        try:
            stack.enter_context(runs.claim())
            return
        except StoreError as exc:
            if time.monotonic() + poll_s > deadline:
                raise
            log.warning("restarted: the run directory is still held (%s); trying again in %.0f s", exc, poll_s)
            time.sleep(poll_s)
