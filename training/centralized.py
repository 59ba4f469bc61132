"""The centralized baseline: the same model, trained full-graph in one process.

It reads the whole input (``edges/`` and ``nodes/`` Parquet shards) into memory, so it
is for graphs that fit on one machine: it is the accuracy ceiling the distributed
strategies are measured against. Training is the round loop of
:func:`asepr.training.loop.distributed.train_rounds` with a single rank and no reconciliation
(:func:`centralized_config`), so the model, the optimiser, the evaluation (exact: the
whole graph is the rank's graph) and the metrics rows are exactly those of the
distributed trainers. One process has a global model after every step, so, as fds, it
is evaluated exactly every ``eval_interval`` epochs: its "rounds" are
``gcd(eval_interval, local_epochs)`` epochs long (the same epochs in all; only the
per-round reseeding of dropout differs from rounds of ``local_epochs``).
"""

from __future__ import annotations

import dataclasses
import logging
import math
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from asepr.storage.errors import InputError, format_problem
from asepr.storage.inputs.directory import open_input, open_parquet
from asepr.storage.inputs.schema import check_node_schema, feature_matrix
from asepr.training.group.comm import Comm
from asepr.training.config import TrainConfig
from asepr.training.graph.data import LocalGraph, build_local_graph
from asepr.training.loop.distributed import train_rounds
from asepr.training.loop.rounds import configure_cpu

__all__ = ["centralized_config", "load_input_graph", "run_centralized"]

log = logging.getLogger(__name__)


def load_input_graph(input_url: str | Path, *, storage_options: dict | None = None) -> LocalGraph:
    """The whole input as one :class:`LocalGraph` (every node a master, no halo)."""
    source = open_input(input_url, storage_options)
    meta, edge_shards, node_shards = source.meta, source.edge_shards, source.node_shards
    ids, feats, labels, splits = [], [], [], []
    for shard in node_shards:
        pf = open_parquet(shard)
        layout, present, _ = check_node_schema(pf.schema_arrow, shard.url)
        for batch in pf.iter_batches(columns=["id", *layout.columns, *present]):
            n = batch.num_rows
            ids.append(batch.column("id").to_numpy())
            feats.append(feature_matrix(batch, layout))
            labels.append(batch.column("label").to_numpy() if "label" in present else np.full(n, -1, np.int64))
            splits.append(batch.column("split").to_numpy() if "split" in present else np.full(n, -1, np.int8))
    node_ids = np.concatenate(ids) if ids else np.zeros(0, np.int64)
    num_nodes = int(meta.get("num_nodes", node_ids.max() + 1 if len(node_ids) else 0))
    if len(node_ids) != num_nodes or (num_nodes and not np.array_equal(np.sort(node_ids), np.arange(num_nodes))):
        raise InputError(format_problem(f"node shards of {input_url}", f"one row per node id 0..{num_nodes - 1}",
                                        f"{len(node_ids)} rows", "run `asepr validate` on the input."))
    order = np.argsort(node_ids, kind="stable")
    x = np.concatenate(feats)[order]
    y = np.concatenate(labels)[order]
    split = np.concatenate(splits)[order]
    src, dst = [], []
    for shard in edge_shards:
        for batch in open_parquet(shard).iter_batches(columns=["src", "dst"]):
            src.append(batch.column("src").to_numpy())
            dst.append(batch.column("dst").to_numpy())
    src_a = np.concatenate(src) if src else np.zeros(0, np.int64)
    dst_a = np.concatenate(dst) if dst else np.zeros(0, np.int64)
    return build_local_graph(
        np.arange(num_nodes, dtype=np.int64), x, y, split, np.ones(num_nodes, dtype=bool), src_a, dst_a, None,
        undirected=bool(meta.get("undirected", False)),
    )


def centralized_config(config: TrainConfig) -> TrainConfig:
    """``config`` as the centralized run trains it: plain ``avg`` (one model: nothing to
    reconcile), exact evaluation, and the same ``rounds × local_epochs`` epochs cut into
    rounds of ``gcd(eval_interval, local_epochs)`` epochs, so that an evaluation falls on
    every multiple of ``eval_interval`` epochs."""
    every = config.eval_interval
    length = math.gcd(every, config.local_epochs)
    return dataclasses.replace(config, reconcile="avg", eval_mode="exact", local_epochs=length,
                               rounds=config.rounds * config.local_epochs // length, eval_every=every)


def run_centralized(input_url: str | Path, run_dir: str | Path, config: TrainConfig, *,
                    on_round: Callable[[dict[str, Any]], None] | None = None,
                    storage_options: dict | None = None) -> list[dict[str, Any]]:
    """Train ``config``'s model on the whole input in this process; return the metrics rows.

    The reconciliation and evaluation settings are replaced (:func:`centralized_config`).
    """
    t0 = time.perf_counter()
    graph = load_input_graph(input_url, storage_options=storage_options)
    load_seconds = time.perf_counter() - t0
    log.info("centralized: %d nodes, %d edges loaded in %.1f s", graph.num_nodes,
             graph.own_edges.shape[1], load_seconds)
    config = centralized_config(config)
    configure_cpu(config, 1)
    return train_rounds(graph, run_dir, config, comm=Comm(), on_round=on_round,
                        info={"input": str(input_url), "strategy": "centralized"}, load_seconds=load_seconds)
