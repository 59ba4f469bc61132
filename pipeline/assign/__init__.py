"""The streaming edge assignment: ASEP and its baselines, one kernel, one loop.

Where each algorithm's choice lives (each is inlined into the one kernel loop of
:func:`~asepr.pipeline.assign.kernel.assign_batch`):

==========================  ============================================================
module                      mode (``MODES``) and algorithms
==========================  ============================================================
:mod:`.candidates`          ``candidates``: ASEP ``--scoring candidates``
:mod:`.hdrf`                ``all``: HDRF, ASEP ``--scoring hdrf`` (default)
:mod:`.terms`               the score terms both of the above share
:mod:`.twophase`            ``prepartition``, then ``2ps-l`` or ``2ps-hdrf``: the
                            published two-phase baselines (two passes)
:mod:`.hashing`             ``hash``, ``dbh``
:mod:`.greedy`              ``greedy`` (PowerGraph)
:mod:`.hybrid`              ``--memory-budget``: neighbourhood expansion
                            (:mod:`.expansion`) on the held low-degree subgraph, the
                            kernel on the rest
==========================  ============================================================

The other modules: :mod:`.state` (:class:`AssignState`, the packed per-vertex rows),
:mod:`.kernel` (the loop: prefetch, load bookkeeping, the cap fallback), :mod:`.refs`
(reference-count-free array views, which keep the inlined choices as fast as one
function), :mod:`.settings` (:class:`KernelSettings`, the cap) and :mod:`.loop` (the
streaming loop :func:`stream_assign` and the per-shard output files).

Every mode respects the hard cap ``ceil((1 + epsilon) |E| / k)``: a partition at cap
is never chosen, and if the choice is at cap (or there is none) the edge goes to the
least-loaded partition. Ties go to the lowest partition id, so a run is deterministic
for a given stream order.
"""

from __future__ import annotations

from asepr.pipeline.assign.hashing import edge_hash
from asepr.pipeline.assign.hybrid import HybridInfo, hybrid_stream_assign
from asepr.pipeline.assign.kernel import MODES, assign_batch
from asepr.pipeline.assign.loop import EdgePartSink, assign_edges, edge_parts_path, iter_assigned, stream_assign
from asepr.pipeline.assign.settings import KernelSettings, edge_cap, kernel_mode
from asepr.pipeline.assign.state import AssignState, replica_sets

__all__ = [
    "MODES",
    "AssignState",
    "EdgePartSink",
    "HybridInfo",
    "KernelSettings",
    "assign_batch",
    "assign_edges",
    "edge_cap",
    "edge_hash",
    "edge_parts_path",
    "hybrid_stream_assign",
    "iter_assigned",
    "kernel_mode",
    "replica_sets",
    "stream_assign",
]
