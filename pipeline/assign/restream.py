"""Restreaming *(our choice)*: ASEP's stream, then the edges again, steered by where the
first stream put each vertex.

A single stream decides the first edges of a vertex before it has seen the rest, so
the early edges of a shuffled stream land wherever the balance term points. The
restream (as 2PS-L, HEP and restreaming HDRF reuse what one pass learned) runs ASEP's
stream once into a directory of its own, takes every vertex's master there (the
partition holding most of its edges, :mod:`asepr.pipeline.stages.masters`) and streams
the edges again from an empty state whose partition column (``PART``) holds those
masters instead of the community partitions:

1. **pre-partitioning**: an edge whose endpoints have the same master goes there (the
   two-phase baselines' first phase, :mod:`asepr.pipeline.assign.twophase`);
2. **scoring**: every other edge is scored by ASEP's all-k score
   (:mod:`asepr.pipeline.assign.hdrf`: replicas, balance, the attribute homes), whose
   community term becomes a prior of one half at each endpoint's first-stream master.

Each further pass (``passes > 1``) takes the masters of the pass before it. A pass
can replicate more than the one before it (a graph whose first stream's masters steer
badly); the assignment kept is the pass with the fewest replicas, so the restream is
never worse than the single stream: the best earlier pass's replica bitsets, loads and
edge-partition files are held until the last pass is counted. Nothing but O(|V|) state
is kept between passes: the masters, the attribute homes, and the
first stream's ``int16`` edge-partition files on disk, which the masters are counted
from and which are removed once they are. The attribute clusters shape the result
through the first stream (its communities and mapping keep clusters together) and
through the home term of every pass.
"""

from __future__ import annotations

import logging
import shutil
import os
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np

from asepr.pipeline.assign.kernel import ALL, ALL_PHASE
from asepr.pipeline.assign.loop import EdgePartSink, stream_assign
from asepr.pipeline.assign.settings import KernelSettings
from asepr.pipeline.assign.state import PART, PDEG, VOL, AssignState
from asepr.pipeline.config import PartitionConfig
from asepr.pipeline.planning.needs import Need, RunShape
from asepr.pipeline.stages.masters import masters_needs, popcounts
from asepr.pipeline.stream import EdgeBatch

__all__ = ["Restream", "restream_assign", "restream_needs"]

log = logging.getLogger(__name__)

#: Where a pass before the last writes its edge partitions, under the sink's directory.
PASS_DIR = "restream-pass"


@dataclass
class Restream:
    """What the passes did: the replicas of every pass (the first stream's first) and the
    pass whose assignment was kept (the fewest replicas; the later pass on a tie)."""

    replicas: list[int] = field(default_factory=list)
    kept: int = 0

    def as_metrics(self) -> dict:
        return {"passes": len(self.replicas) - 1, "replicas": self.replicas, "kept_pass": self.kept}


@dataclass
class _Held:
    """The best pass so far: its index, replica words, loads and the folder of its partitions."""

    index: int
    replicas: int
    words: np.ndarray
    loads: np.ndarray
    directory: Path


def _replica_count(state: AssignState) -> int:
    return int(popcounts(state.replicas).sum())


def _hold(state: AssignState, index: int, count: int, directory: Path, held: _Held | None) -> _Held:
    """Keep pass ``index`` (``count`` replicas, its files in ``directory``) when it
    replicates no more than ``held``."""
    if held is not None and held.replicas < count:
        return held
    if held is not None:
        shutil.rmtree(held.directory, ignore_errors=True)
    return _Held(index, count, state.vstate[:, : state.words].copy(), state.loads.copy(), directory)


def _restore(state: AssignState, held: _Held, sink: EdgePartSink) -> None:
    """Put the held pass back: its replica words and loads into ``state``, its files into the sink's folder."""
    state.vstate[:, : state.words] = held.words
    state.loads[:] = held.loads
    for path in sorted(held.directory.glob("*.npy")):
        os.replace(path, sink.workdir / path.name)


def _restart(state: AssignState, prior: np.ndarray, volume: np.ndarray) -> None:
    """Empty ``state`` in place for the next pass (no replicas, no partial degrees, no
    loads), its partition column ``prior`` and its volumes ``volume``; degrees and homes stay."""
    w = state.words
    state.vstate[:, :w] = 0
    state.vstate[:, w + PDEG] = 0
    state.vstate[:, w + PART] = prior
    state.vstate[:, w + VOL] = volume
    state.loads[:] = 0


def restream_assign(
    state: AssignState,
    batches: Callable[[], Iterable[EdgeBatch]],
    settings: KernelSettings,
    sink: EdgePartSink,
    masters: Callable[[Path, np.ndarray], np.ndarray],
    *,
    passes: int = 1,
    prior_volume: str = "equal",
) -> tuple[AssignState, float, Restream]:
    """ASEP's stream, then ``passes`` restreams, the last into ``sink``.

    Parameters
    ----------
    state
        The first stream's state (communities, homes), as for
        :func:`~asepr.pipeline.assign.loop.stream_assign`.
    batches, settings, sink
        As for :func:`~asepr.pipeline.assign.loop.stream_assign`; ``settings`` must be
        ASEP's all-k scoring (mode ``all``).
    masters
        ``masters(directory, replicas)``: the master of every vertex of the assignment
        whose edge partitions are in ``directory``
        (:func:`~asepr.pipeline.stages.master_pass.stream_masters`).
    passes
        Restreams after the first stream (0: the first stream alone, into ``sink``).
    prior_volume
        The weights of the prior at the two endpoints' masters: ``"equal"`` (one half
        each) or ``"community"`` (the first stream's community volumes, as its
        community term).

    Returns
    -------
    tuple
        ``state`` (emptied and refilled in place by every restream, so one kernel state is
        held at a time; at the end the kept pass's replicas and loads), the seconds spent
        in the kernel over all passes, and the :class:`Restream` record.
    """
    if settings.mode != ALL:
        raise ValueError(f"restreaming scores all partitions (mode {ALL}), not mode {settings.mode}")
    if passes < 0:
        raise ValueError(f"restream passes: expected >= 0, found {passes}")
    w = state.words
    volume = (state.vstate[:, w + VOL].copy() if prior_volume == "community"
              else np.ones(state.vstate.shape[0], dtype=np.int64))
    seconds = 0.0
    phase = replace(settings, mode=ALL_PHASE)
    current = settings
    record, held = Restream(), None
    try:
        for done in range(passes):
            directory = sink.workdir / f"{PASS_DIR}-{done}"
            shutil.rmtree(directory, ignore_errors=True)
            directory.mkdir()
            seconds += stream_assign(state, batches, current, EdgePartSink(directory, sink.shard_rows))
            record.replicas.append(_replica_count(state))
            prior = masters(directory, state.replicas)
            held = _hold(state, done, record.replicas[-1], directory, held)
            if held.directory != directory:
                shutil.rmtree(directory, ignore_errors=True)
            log.info("restream %d of %d: steered by the previous pass's masters", done + 1, passes)
            _restart(state, prior, volume)
            current = phase
        seconds += stream_assign(state, batches, current, sink)
        record.replicas.append(_replica_count(state))
        record.kept = passes
        if held is not None and held.replicas < record.replicas[-1]:
            record.kept = held.index
            log.info("restream: pass %d replicates least (%d replicas against %d): keeping it", record.kept,
                     held.replicas, record.replicas[-1])
            _restore(state, held, sink)
    finally:
        if held is not None:
            shutil.rmtree(held.directory, ignore_errors=True)
    return state, seconds, record


def restream_needs(run: PartitionConfig, s: RunShape, state_bytes: float) -> Need:
    """What the restreams add to the assignment stage: the masters of each pass before the
    last counted beside the kernel state (``state_bytes``) plus the masters array, the
    volumes and the held best pass's replica words (int32, int64 and 8 W bytes per node),
    and on disk each pass's ``int16`` partitions and each restream's pre-partitioning file
    (all removed)."""
    if not run.uses_restream:
        return Need()
    driver = state_bytes + masters_needs(run, s).driver + 12 * s.n + 8 * s.words * s.n
    passes = run.restream_passes
    return Need(driver=driver, written=4 * s.e * passes, removed=4 * s.e * passes)
