"""Local training: E epochs, or N optimiser steps, on the rank's own graph, task loss + μ·L_con.

Full-batch with ``batch_size`` 0; otherwise the task yields sampled mini-batches of the
rank's batch (``task.batch_size``, :func:`asepr.training.config.resolve_batch_size`;
:mod:`asepr.training.graph.sampler`). With ``con``, the global model of this round and the rank's
previous local model run on the same batch (frozen, without dropout) and the
cross-layer contrastive loss pulls the local layers towards the global ones.

Both frozen models are fixed for the whole call and run without dropout, so on the
full local graph their layer outputs are the same at every step: they are computed once
per call and reused (identical results; on amazon-computers, k = 4, 20 local epochs, it
removes two of the three forward passes of every contrastive step). Sampled mini-batches
differ from step to step and run the frozen models on each batch.
"""

from __future__ import annotations

import math
from collections.abc import Iterator

import torch

from asepr.training.reconcile.contrastive import CON_TAU, con_weight, contrastive_loss

__all__ = ["batch_stream", "share_training_seeds", "steps_per_round", "sync_segments", "train_local"]


def _forward(model, x, batch):
    rows = x if batch.n_id is None else x[batch.n_id]
    graph = batch.graph
    if graph.device != rows.device:  # the sampler's graph is in host memory (asepr.training.group.device)
        graph = graph.to(rows.device)
    return model(rows, graph, return_embeddings=True)


@torch.no_grad()
def _frozen_layers(global_model, previous_model, x, batch):
    """The layer outputs of the global and the previous model on ``batch`` (no gradients)."""
    return _forward(global_model, x, batch)[1], _forward(previous_model, x, batch)[1]


def share_training_seeds(task, comm) -> None:
    """Tell a node task how many training seeds all ranks hold together (a collective), so
    that its automatic batch is its share of the centralized run's
    (:func:`asepr.training.config.resolve_batch_size`). Tasks without ``total_train`` (link
    prediction) resolve their batch on their own training set."""
    if hasattr(task, "total_train"):
        total = torch.tensor([float(task.num_train)], dtype=torch.float64)
        task.total_train = int(comm.all_reduce(total, "control")[0])


def steps_per_round(task, config, comm) -> int:
    """Optimiser steps of every rank in one round of ``config.local_epochs`` epochs when
    the ranks synchronise within it (``sync_every``), a collective.

    The ranks' partitions differ in size, so their epochs differ in steps; synchronising
    needs the same steps on every rank. A round is ``local_epochs`` epochs of the whole
    training set: ``ceil(local_epochs · Σ_r n_r / Σ_r b_r)`` steps per rank, ``b_r`` being
    rank r's batch (``task.batch_size``; ``W · batch_size`` when every rank has the same),
    each rank cycling through its own data; and ``local_epochs`` full-batch steps.
    """
    if not config.batch_size:
        return int(config.local_epochs)
    total = torch.tensor([float(task.num_train), float(task.batch_size)], dtype=torch.float64)
    comm.all_reduce(total, "control")
    return max(1, math.ceil(config.local_epochs * float(total[0]) / float(total[1])))


def sync_segments(total: int, sync_every: int) -> list[int]:
    """The steps between the reconciliations of a round of ``total`` steps:
    ``sync_every`` each, the last segment ending with the round."""
    segments, done = [], 0
    while done < total:
        segments.append(min(sync_every, total - done))
        done += segments[-1]
    return segments


def batch_stream(task, generator: torch.Generator) -> Iterator[object]:
    """``task``'s batches, epoch after epoch without end (none when it has nothing to train on)."""
    while True:
        produced = False
        for batch in task.batches(generator):
            produced = True
            yield batch
        if not produced:
            return


def _round_batches(task, config, generator: torch.Generator, steps: int | None,
                   stream: Iterator[object] | None) -> Iterator[tuple[int, object]]:
    """``(epoch, batch)``: ``local_epochs`` epochs, or the next ``steps`` batches of ``stream``."""
    if steps is None:
        for epoch in range(config.local_epochs):
            for batch in task.batches(generator):
                yield epoch, batch
        return
    for _, batch in zip(range(steps), stream):
        yield 0, batch


def train_local(model, optimizer, task, config, generator: torch.Generator, *, steps: int | None = None,
                stream: Iterator[object] | None = None, global_model=None, previous_model=None,
                drift=None) -> float:
    """Train ``config.local_epochs`` epochs, or ``steps`` optimiser steps on the batches of
    ``stream`` (:func:`batch_stream`); return the mean task loss of the last epoch, or of
    the steps.

    ``global_model`` and ``previous_model`` (both or neither) switch on the contrastive
    term; ``drift`` (:class:`asepr.training.reconcile.scaffold.ControlVariates`) corrects every
    gradient before the optimiser step.
    """
    x = task.features
    contrast = global_model is not None and previous_model is not None and config.uses_con
    if contrast:
        global_model.eval()
        previous_model.eval()
    full_graph_frozen = None  # (global layers, previous layers) on the full local graph
    losses: dict[int, list[float]] = {}
    model.train()
    for epoch, batch in _round_batches(task, config, generator, steps, stream):
        optimizer.zero_grad()
        out, layers = _forward(model, x, batch)
        loss = batch.loss(out)
        losses.setdefault(epoch, []).append(float(loss.detach()))
        if contrast and len(batch.anchors):
            if batch.n_id is not None:
                g_layers, p_layers = _frozen_layers(global_model, previous_model, x, batch)
            else:
                if full_graph_frozen is None:
                    full_graph_frozen = _frozen_layers(global_model, previous_model, x, batch)
                g_layers, p_layers = full_graph_frozen
            loss = loss + con_weight(config.task) * contrastive_loss(layers, g_layers, p_layers, batch.anchors,
                                                                      CON_TAU)
        loss.backward()
        if drift is not None:
            drift.correct()
        optimizer.step()
    if not losses:
        return float("nan")
    last = losses[max(losses)]
    return sum(last) / len(last)
