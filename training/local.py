"""Local training: E epochs (or N optimiser steps) on the rank's own graph, task loss + μ·L_con.

Full-batch by default; with ``batch_size > 0`` the task yields sampled mini-batches
(:mod:`training.sampler`). With ``con``, the global model of this round and the rank's
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

from training.reconcile.contrastive import contrastive_loss

__all__ = ["steps_per_epoch", "train_local"]


def _forward(model, x, batch):
    rows = x if batch.n_id is None else x[batch.n_id]
    return model(rows, batch.graph, return_embeddings=True)


@torch.no_grad()
def _frozen_layers(global_model, previous_model, x, batch):
    """The layer outputs of the global and the previous model on ``batch`` (no gradients)."""
    return _forward(global_model, x, batch)[1], _forward(previous_model, x, batch)[1]


def steps_per_epoch(task, config) -> int:
    """Optimiser steps in one epoch of ``task``: 1 full-batch, else one per ``batch_size``
    training examples (at least 1)."""
    if not config.batch_size:
        return 1
    return max(1, math.ceil(task.num_train / config.batch_size))


def _batches(task, config, generator: torch.Generator) -> Iterator[tuple[int, object]]:
    """``(epoch, batch)`` of one round: ``local_epochs`` epochs, or with ``sync_every`` that
    many steps, epochs following each other (the last one cut short)."""
    steps = 0
    epoch = 0
    while True:
        if not config.sync_every and epoch == config.local_epochs:
            return
        produced = False
        for batch in task.batches(generator):
            if config.sync_every and steps == config.sync_every:
                return
            produced = True
            steps += 1
            yield epoch, batch
        if not produced:  # nothing to train on
            return
        epoch += 1


def train_local(model, optimizer, task, config, generator: torch.Generator, *,
                global_model=None, previous_model=None) -> float:
    """Train one round; return the mean task loss of its last epoch (with ``sync_every``:
    of all its steps).

    A round is ``config.local_epochs`` epochs, or ``config.sync_every`` optimiser steps
    when that is set. ``global_model`` and ``previous_model`` (both or neither) switch on
    the contrastive term.
    """
    x = task.graph.x
    contrast = global_model is not None and previous_model is not None and config.uses_con
    if contrast:
        global_model.eval()
        previous_model.eval()
    full_graph_frozen = None  # (global layers, previous layers) on the full local graph
    losses: dict[int, list[float]] = {}
    model.train()
    for epoch, batch in _batches(task, config, generator):
        optimizer.zero_grad()
        out, layers = _forward(model, x, batch)
        loss = batch.loss(out)
        losses.setdefault(0 if config.sync_every else epoch, []).append(float(loss.detach()))
        if contrast and len(batch.anchors):
            if batch.n_id is not None:
                g_layers, p_layers = _frozen_layers(global_model, previous_model, x, batch)
            else:
                if full_graph_frozen is None:
                    full_graph_frozen = _frozen_layers(global_model, previous_model, x, batch)
                g_layers, p_layers = full_graph_frozen
            loss = loss + config.mu * contrastive_loss(layers, g_layers, p_layers, batch.anchors, config.tau)
        loss.backward()
        optimizer.step()
    if not losses:
        return float("nan")
    last = losses[max(losses)]
    return sum(last) / len(last)
