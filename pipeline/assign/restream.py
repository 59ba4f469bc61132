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

Each further pass (``passes > 1``) takes the masters of the pass before it. Nothing
but O(|V|) state is kept between passes: the masters, the attribute homes, and the
first stream's ``int16`` edge-partition files on disk, which the masters are counted
from and which are removed once they are. The attribute clusters shape the result
through the first stream (its communities and mapping keep clusters together) and
through the home term of every pass.
"""

from __future__ import annotations

import logging
import shutil
from collections.abc import Callable, Iterable
from dataclasses import replace
from pathlib import Path

import numpy as np

from asepr.pipeline.assign.kernel import ALL, ALL_PHASE
from asepr.pipeline.assign.loop import EdgePartSink, stream_assign
from asepr.pipeline.assign.settings import KernelSettings
from asepr.pipeline.assign.state import PART, PDEG, VOL, AssignState
from asepr.pipeline.config import PartitionConfig
from asepr.pipeline.planning.needs import Need, RunShape
from asepr.pipeline.stages.masters import masters_needs
from asepr.pipeline.stream import EdgeBatch

__all__ = ["restream_assign", "restream_needs"]

log = logging.getLogger(__name__)

#: Where a pass before the last writes its edge partitions, under the sink's directory.
PASS_DIR = "restream-pass"


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
) -> tuple[AssignState, float]:
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
        held at a time) and the seconds spent in the kernel over all passes.
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
    for done in range(passes):
        directory = sink.workdir / PASS_DIR
        shutil.rmtree(directory, ignore_errors=True)
        directory.mkdir()
        try:
            seconds += stream_assign(state, batches, current, EdgePartSink(directory, sink.shard_rows))
            prior = masters(directory, state.replicas)
        finally:
            shutil.rmtree(directory, ignore_errors=True)
        log.info("restream %d of %d: steered by the previous pass's masters", done + 1, passes)
        _restart(state, prior, volume)
        current = phase
    seconds += stream_assign(state, batches, current, sink)
    return state, seconds


def restream_needs(run: PartitionConfig, s: RunShape, state_bytes: float) -> Need:
    """What the restreams add to the assignment stage: the masters of each pass before the
    last counted beside the kernel state (``state_bytes``) plus the masters array and the
    volumes (int32 and int64 per node), and on disk each pass's ``int16`` partitions and
    each restream's pre-partitioning file (all removed)."""
    if not run.uses_restream:
        return Need()
    driver = state_bytes + masters_needs(run, s).driver + 12 * s.n
    passes = run.restream_passes
    return Need(driver=driver, written=4 * s.e * passes, removed=4 * s.e * passes)
