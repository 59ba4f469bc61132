"""The FDS trainer: synchronous data-parallel SGD over a vertex-partitioned graph.

Every rank runs the same loop in lockstep (DistDGL's training loop):

1. setup: the vertex partition (:mod:`asepr.training.fds.partition`; rank 0 computes METIS
   and writes it into the run directory), each rank's share of the input
   (:mod:`asepr.training.fds.graph`), the same initial model everywhere (rank 0's
   parameters, one all_reduce under ``model``);
2. every step: a mini-batch of the rank's own training vertices, its sampled
   computation graph over the **whole** graph (remote hops answered by the owners) and
   the feature rows it touches (remote rows fetched from their owners)
   (:mod:`asepr.training.fds.remote`); forward, backward, then **one** all_reduce of a flat
   buffer ``[Σ gradients, Σ loss, seeds]`` under ``gradients``; the gradient is divided
   by the global number of seeds (the mean over the global batch of W·B vertices) and
   every rank takes the same Adam step, so the replicas stay identical (checked every
   round). Every rank takes ``max_r ceil(train_r / B)`` steps per epoch; a rank out of
   seeds takes empty steps (it still serves the others and joins the all_reduce);
3. R "rounds" of E epochs, to line up with ASEPR's R rounds × E local epochs: every
   ``eval_every`` epochs (:func:`asepr.training.loop.rounds.evaluates_epoch`; by default at each
   round's end) exact full-neighbourhood evaluation (:mod:`asepr.training.fds.inference`,
   bytes under ``eval``, time apart from training's) of the same seeded sample of the
   validation and test vertices as the ASEPR trainers score (``eval_sample``,
   :mod:`asepr.training.evaluation.eval_sample`), scored by :meth:`asepr.training.tasks.NodeTask.score`, and
   a metrics row with the metric's interval; after each round a
   checkpoint through :class:`asepr.training.rundir.checkpoint.RunDir` (rank 0 commits).

The run directory is :class:`asepr.training.rundir.checkpoint.RunDir`'s, plus the partition::

    RUN/
      run.json               also: strategy "fds", partitioner, steps per epoch, per-rank
                             vertices / training vertices / in-edges / remote in-edges / halo
      fds-partition.npy      int32 [|V|]: the owner rank of each global_nid (METIS only;
                             a resumed run reuses it)
      metrics.csv
      checkpoints/round-R/
        rank-0000r.pt        rank r's byte counters and feature rows fetched / served
        global.pt            the model (identical on every rank) and the Adam state

Bytes are counted by :class:`asepr.training.group.comm.Comm` under the categories ``features``,
``feature_requests``, ``sampling``, ``gradients``, ``model``, ``eval`` and ``control``.
A metrics row has every column of :func:`asepr.training.loop.rounds.metrics_row` (as the ASEPR
trainers' rows: training bytes without ``eval``, mean and max over ranks, the
evaluation bytes apart, ``eval_mode`` always ``exact``) plus ``steps`` (since the
previous row), ``rows_fetched_round`` (rank 0's remote feature rows since the round
started), and the bytes since the round started summed over all ranks:
``cluster_bytes_round`` and one ``cluster_bytes_round_<category>`` per category.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import logging
import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

import asepr.training.rundir.checkpoint as ckpt
from asepr.storage.commit import failpoints
from asepr.storage.errors import format_problem
from asepr.storage.inputs.directory import open_input
from asepr.training.group.capacity import check_rank_lists
from asepr.training.rundir.checkpoint import RunDir, TrainerError
from asepr.training.group.comm import Comm
from asepr.training.config import TrainConfig
from asepr.training.graph.data import build_local_graph, prepare_features
from asepr.training.evaluation.eval_sample import EvalSample, draw_sample
from asepr.training.fds.graph import FdsGraph, load_fds_graph
from asepr.training.fds.inference import LayerwiseInference
from asepr.training.fds.partition import PartitionBook, count_input_rows, metis_owner, resolve_partitioner
from asepr.training.fds.remote import DistNeighborSampler, FeatureFetcher
from asepr.training.models import build_model, flatten, graph_operator, num_parameters, unflatten_into
from asepr.training.protocol import ComputeClock, patience_spent
from asepr.training.loop.rounds import (
    all_ranks_ready,
    commit_round,
    configure_cpu,
    evaluates_epoch,
    metrics_row,
    placement_columns,
    start_run,
)
from asepr.training.tasks import NodeTask, round_seed

__all__ = ["CATEGORIES", "FDS_DEFAULT_BATCH", "fds_config", "run_fds", "train_fds"]

log = logging.getLogger(__name__)

#: Seeds per rank and step when the config says full-batch (FDS is always mini-batch).
FDS_DEFAULT_BATCH = 1024
#: Seeds per rank and step for ``batch_size="auto"``: FDS steps every rank together on
#: one all_reduced gradient, so it keeps the batch it always had rather than the ASEPR
#: ranks' rule (:func:`asepr.training.config.resolve_batch_size`).
FDS_AUTO_BATCH = 256
#: The byte categories of an FDS run, in the order of the metrics columns.
CATEGORIES = ("features", "feature_requests", "sampling", "gradients", "model", "eval", "control")


def fds_config(config: TrainConfig) -> TrainConfig:
    """``config`` as FDS runs it: mini-batch (``batch_size`` 0 → 1024, ``"auto"`` → 256), no
    reconciliation, exact evaluation (its only one)."""
    if config.task != "node":
        raise TrainerError(format_problem("--strategy fds", "--task node (FDS trains node classification)",
                                          f"--task {config.task}",
                                          "use --task node, or the asepr strategy for link prediction."))
    if config.capacity_aware:  # every fds step is one averaged gradient of all ranks together
        raise TrainerError(format_problem("--strategy fds", "no --speeds, --cluster or --deadline (every fds step "
                                          "waits for every rank)", "capacity-aware steps",
                                          "drop them; --slowdown still models a slow rank's time."))
    batch = FDS_AUTO_BATCH if config.batch_size == "auto" else config.batch_size or FDS_DEFAULT_BATCH
    return dataclasses.replace(config, reconcile="avg", batch_size=batch, eval_mode="exact")


def run_fds(input_url: str | Path, run_dir: str | Path, config: TrainConfig, *, partition: str = "auto",
            resume: bool = False, comm: Comm | None = None, storage_options: dict | None = None,
            on_round: Callable[[dict[str, Any]], None] | None = None) -> list[dict[str, Any]]:
    """Train the FDS baseline on this rank; return the metrics rows (rank 0's log).

    Parameters
    ----------
    input_url
        The input directory (``edges/`` and ``nodes/`` Parquet shards), as for
        :func:`asepr.training.centralized.run_centralized`.
    run_dir
        Checkpoints, ``metrics.csv`` and (METIS) ``fds-partition.npy`` go here.
    config
        The same settings as the other strategies (see :func:`fds_config`).
    partition
        ``"auto"`` (METIS up to 5 M edges, else hash), ``"metis"`` or ``"hash"``.
    resume
        Continue from the latest complete round of ``run_dir`` (same config, world size
        and partitioner).
    """
    config = fds_config(config)
    comm = comm or Comm()
    configure_cpu(config, comm.world_size)
    runs = RunDir(run_dir)
    source = open_input(input_url, storage_options)
    num_nodes, num_edges = count_input_rows(source)
    meta = source.meta
    if int(meta.get("num_nodes", num_nodes)) != num_nodes:
        raise TrainerError(format_problem(f"input {input_url}", f"{meta['num_nodes']} node rows (meta.json)",
                                          f"{num_nodes} rows", "run `asepr validate` on the input."))
    kind = resolve_partitioner(partition, num_edges)
    if kind == "metis" and importlib.util.find_spec("pymetis") is None:
        raise TrainerError(format_problem(
            f"fds's vertex partition ({partition})", "pymetis for METIS (graphs up to 5M edges under auto)",
            "no pymetis in this environment",
            "pip install 'asepr[metis]', or pass --fds-partition hash (a hashed vertex partition)."))
    t0 = time.perf_counter()
    cut = all_ranks_ready(comm, "partition the vertices", lambda: _partition_vertices(
        input_url, runs, config, comm, kind, num_nodes, resume=resume, storage_options=storage_options))
    partition_seconds = time.perf_counter() - t0
    t_load = time.perf_counter()

    def load() -> FdsGraph:
        if kind == "metis":
            book = PartitionBook.load(run_dir, comm.world_size, num_nodes)
        else:
            book = PartitionBook("hash", comm.world_size, num_nodes, seed=config.seed)
        return load_fds_graph(input_url, book, comm.rank, storage_options=storage_options)

    graph = all_ranks_ready(comm, "load its share of the input", load)
    load_seconds = time.perf_counter() - t_load
    info = {"input": str(input_url), "strategy": "fds", "partition": kind,
            "partition_seconds": round(partition_seconds, 3), "metis_symmetric_cut": cut}
    return train_fds(graph, run_dir, config, comm=comm, resume=resume, on_round=on_round, info=info,
                     load_seconds=load_seconds)


def _partition_vertices(input_url: str | Path, runs: RunDir, config: TrainConfig, comm: Comm, kind: str,
                        num_nodes: int, *, resume: bool, storage_options: dict | None) -> int | None:
    """A fresh METIS run: rank 0 partitions and saves the book; returns METIS's symmetric cut
    (rank 0), else None. A resumed run checks that it resumes an fds run of the same partitioner."""
    if resume:
        saved = runs.read_run_info() or {}
        if saved and (saved.get("strategy") != "fds" or saved.get("partition") != kind):
            raise TrainerError(format_problem(
                f"run directory {runs.path}", f"an fds run partitioned by {kind}",
                f"strategy {saved.get('strategy', 'asepr')}, partition {saved.get('partition')}",
                "resume with the original --strategy and --fds-partition, or start a new run."))
        return None
    if kind != "metis" or comm.rank != 0:
        return None
    owner, cut = metis_owner(input_url, comm.world_size, num_nodes=num_nodes, seed=config.seed,
                             storage_options=storage_options)
    PartitionBook("metis", comm.world_size, num_nodes, owner_array=owner).save(runs.path)
    return cut


def _rank_stats(graph: FdsGraph, comm: Comm) -> list[dict[str, int]]:
    remote = graph.book.owner(graph.in_src) != comm.rank
    mine = torch.tensor([graph.num_owned, len(graph.train_idx), graph.num_in_edges, int(remote.sum()),
                         len(torch.unique(graph.in_src[remote]))], dtype=torch.int64)
    names = ("vertices", "train", "in_edges", "remote_in_edges", "halo")
    return [dict(zip(names, t.tolist())) for t in comm.all_gather(mine, "control")]


def _epoch(model, optimizer, graph: FdsGraph, config: TrainConfig, comm: Comm, sampler: DistNeighborSampler,
           fetcher: FeatureFetcher, steps: int, generator: torch.Generator) -> tuple[float, float]:
    """One epoch of ``steps`` synchronous steps; returns (Σ loss, Σ seeds) over all ranks."""
    train_idx = graph.train_idx
    batches = list(torch.split(train_idx[torch.randperm(len(train_idx), generator=generator)], config.batch_size))
    batches += [train_idx[:0]] * (steps - len(batches))
    params = list(model.parameters())
    loss_total, seeds_total = 0.0, 0.0
    for local_nid in batches:
        seeds = graph.global_nid[local_nid]
        n_id, edge_index = sampler.sample(seeds, config.fanouts, generator)
        x = fetcher.fetch(n_id)
        model.train()
        optimizer.zero_grad()
        k = len(seeds)
        loss_value = 0.0
        if k:
            out = model(x, graph_operator(config.model, edge_index, len(n_id)))
            loss = F.cross_entropy(out[:k], graph.y[local_nid], reduction="sum")
            loss.backward()
            loss_value = float(loss.detach())
        wire = torch.cat([p.grad.reshape(-1) if p.grad is not None else torch.zeros(p.numel()) for p in params]
                         + [torch.tensor([loss_value, float(k)])])
        comm.all_reduce(wire, "gradients")
        total = float(wire[-1])
        loss_total += float(wire[-2])
        seeds_total += total
        if total > 0:
            offset = 0
            for p in params:
                p.grad = (wire[offset: offset + p.numel()] / total).view_as(p).clone()
                offset += p.numel()
            optimizer.step()
    return loss_total, seeds_total


def _check_replicas(model, comm: Comm) -> None:
    flat = flatten(model).to(torch.float64)
    mine = torch.stack([flat.sum(), (flat * torch.arange(1, flat.numel() + 1, dtype=torch.float64)).sum()])
    sums = comm.all_gather(mine, "control")
    if any(not torch.equal(s, sums[0]) for s in sums):
        raise TrainerError(format_problem("fds model replicas", "identical parameters on every rank",
                                          "different parameters", "report this: the synchronous step diverged."))


@dataclass
class _FdsLoop:
    """What the FDS round loop carries from one round to the next."""

    model: torch.nn.Module
    optimizer: torch.optim.Optimizer
    num_classes: int
    steps_per_epoch: int
    sampler: DistNeighborSampler
    fetcher: FeatureFetcher
    rows: list[dict[str, Any]]
    elapsed: float = 0.0
    start_round: int = 0
    infer: LayerwiseInference | None = None
    scorer: NodeTask | None = None
    sample: EvalSample | None = None


def _prepare(graph: FdsGraph, config: TrainConfig, comm: Comm, source: str) -> _FdsLoop:
    """Features (the same width on every rank), the checks, the model and its optimiser."""
    num_classes = comm.max_int(int(graph.y.max()) + 1 if graph.num_owned else 0)
    graph.x = prepare_features(graph.x, config)
    in_dim = comm.max_int(int(graph.x.shape[1]) if graph.num_owned else 0)
    if not graph.num_owned:
        graph.x = torch.zeros((0, in_dim))

    def check() -> None:
        if graph.x.shape[1] != in_dim:
            raise TrainerError(format_problem(f"node shards of {source}", f"feature width {in_dim} on every rank",
                                              f"width {graph.x.shape[1]}", "run `asepr validate` on the input."))
        if num_classes < 2:
            raise TrainerError(format_problem(f"labels of {source}", "at least 2 classes for --task node",
                                              f"{num_classes} classes", "use an input with labels."))

    all_ranks_ready(comm, "agree on the features and labels", check)
    torch.manual_seed(config.seed)
    model = build_model(config, in_dim, num_classes)
    optimizer = torch.optim.Adam(model.parameters(), lr=config.lr, weight_decay=config.weight_decay)
    steps_per_epoch = comm.max_int(math.ceil(len(graph.train_idx) / config.batch_size))
    return _FdsLoop(model=model, optimizer=optimizer, num_classes=num_classes, steps_per_epoch=steps_per_epoch,
                    sampler=DistNeighborSampler(graph, comm), fetcher=FeatureFetcher(graph, comm), rows=[])


def _restore(loop: _FdsLoop, runs: RunDir, config: TrainConfig, comm: Comm) -> None:
    """Resume: the model and Adam state of the latest complete round, this rank's counters."""
    latest = runs.check_resume(config, comm.world_size)
    g_path, r_path = runs.global_path(latest), runs.rank_path(latest, comm.rank)
    g, r = runs.load_global(latest), runs.load_rank(latest, comm.rank)
    ckpt.expect_keys(g_path, g, ("optimizer", "metrics_rows", "elapsed"))
    ckpt.expect_keys(r_path, r, ("bytes", "rows_fetched", "rows_served"))
    unflatten_into(loop.model, ckpt.expect_tensor(g_path, g, "global", (num_parameters(loop.model),)).to(torch.float32))
    ckpt.load_optimizer_state(g_path, loop.optimizer, g["optimizer"])
    comm.bytes.load_state_dict(r["bytes"])
    loop.fetcher.rows_fetched, loop.fetcher.rows_served = int(r["rows_fetched"]), int(r["rows_served"])
    loop.rows, loop.elapsed, loop.start_round = list(g["metrics_rows"]), float(g["elapsed"]), latest + 1


def _round(loop: _FdsLoop, graph: FdsGraph, config: TrainConfig, comm: Comm, rnd: int,
           sent_before: dict[str, dict[str, float]]) -> list[dict[str, Any]]:
    """One round of E epochs; returns the metrics rows of the evaluations in it."""
    fetched_before = loop.fetcher.rows_fetched
    torch.manual_seed(round_seed(config.seed, rnd, comm.rank))
    gen = torch.Generator().manual_seed(round_seed(config.seed, rnd, comm.rank, 1))
    rows = []
    for i in range(config.local_epochs):
        t0 = time.perf_counter()
        loop.clock.start()
        loss_sum, seeds = _epoch(loop.model, loop.optimizer, graph, config, comm, loop.sampler, loop.fetcher,
                                 loop.steps_per_epoch, gen)
        loop.clock.stop()
        loop.elapsed += time.perf_counter() - t0
        if i + 1 == config.local_epochs:
            _check_replicas(loop.model, comm)
        epoch = rnd * config.local_epochs + i + 1
        if not evaluates_epoch(config, epoch):
            continue
        t_eval = time.perf_counter()
        metrics = loop.scorer.score(loop.infer.logits(loop.model), comm)
        metrics.update(loop.sample.columns(loop.scorer.metric, metrics))
        eval_seconds = time.perf_counter() - t_eval
        previous_epoch = int(loop.rows[-1].get("epoch", 0)) if loop.rows else 0
        row = metrics_row(comm, loop.rows, sent_before, round_index=rnd, epoch=epoch, generation=0,
                          elapsed=loop.elapsed, eval_seconds=eval_seconds,
                          loss=loss_sum / seeds if seeds else float("nan"), kd_loss=float("nan"),
                          metric=loop.scorer.metric, metrics=metrics, eval_mode="exact", categories=CATEGORIES)
        row.update(steps=loop.steps_per_epoch * (epoch - previous_epoch),
                   rows_fetched_round=loop.fetcher.rows_fetched - fetched_before,
                   compute_s_cum_max=loop.clock.settle(comm))
        loop.rows.append(row)
        rows.append(row)
    return rows


def train_fds(graph: FdsGraph, run_dir: str | Path, config: TrainConfig, *, comm: Comm, resume: bool = False,
              on_round: Callable[[dict[str, Any]], None] | None = None, info: dict[str, Any] | None = None,
              load_seconds: float = 0.0) -> list[dict[str, Any]]:
    """The FDS round loop on an already loaded rank graph (see :func:`run_fds`)."""
    config = fds_config(config)
    runs = RunDir(run_dir)
    placement = placement_columns(graph.num_owned, graph.x.shape[1] * graph.x.element_size(), comm)
    loop = _prepare(graph, config, comm, (info or {}).get("input", "the input"))
    ranks = _rank_stats(graph, comm)
    info = {**(info or {}), **placement, "strategy": "fds", "world_size": comm.world_size, "config": config.to_dict(),
            "task": config.task, "num_parameters": num_parameters(loop.model),
            "steps_per_epoch": loop.steps_per_epoch, "ranks": ranks,
            "remote_in_edges": sum(r["remote_in_edges"] for r in ranks),
            "in_edges": sum(r["in_edges"] for r in ranks)}
    if resume:
        all_ranks_ready(comm, "load its checkpoint", lambda: _restore(loop, runs, config, comm))
    else:
        start_run(runs, comm, info)
    comm.barrier()
    # Every rank starts from rank 0's parameters (as DDP broadcasts them); the first round's
    # bytes include this sync.
    sent_before = comm.bytes.state_dict()
    wire = flatten(loop.model) if comm.rank == 0 else torch.zeros(num_parameters(loop.model))
    unflatten_into(loop.model, comm.all_reduce(wire, "model"))
    owned = build_local_graph(graph.global_nid.numpy(), np.zeros((graph.num_owned, 0), np.float32),
                              graph.y.numpy(), graph.split.numpy(), np.ones(graph.num_owned, bool),
                              np.zeros(0, np.int64), np.zeros(0, np.int64), None, undirected=False)
    loop.sample = draw_sample(owned, comm, config.eval_sample, config.seed)
    loop.scorer = loop.sample.task_view(NodeTask(owned, loop.num_classes, config))
    loop.infer = LayerwiseInference(graph, comm, config.model, targets=loop.sample.targets)
    if comm.rank == 0:
        log.info("fds: %d ranks, %s partition, %s model with %d parameters, %d steps per epoch of %d seeds per rank",
                 comm.world_size, info.get("partition"), config.model, num_parameters(loop.model),
                 loop.steps_per_epoch, config.batch_size)
    problem = check_rank_lists(config, comm.world_size)  # the same on every rank: all stop
    if problem:
        raise TrainerError(problem)
    loop.clock = ComputeClock(loop.rows[-1].get("compute_s_cum_max", 0.0) if loop.rows else 0.0,
                              factor=config.slowdown[comm.rank] if config.slowdown else 1.0)
    for rnd in range(loop.start_round, config.rounds):
        if patience_spent(loop.rows, config.patience):  # the same global rows on every rank
            break
        failpoints.failpoint(f"round:{comm.rank}:{rnd}")
        if rnd > loop.start_round:
            sent_before = comm.bytes.state_dict()
        row = _round(loop, graph, config, comm, rnd, sent_before)
        commit_round(runs, rnd, comm, {"bytes": comm.bytes.state_dict(), "rows_fetched": loop.fetcher.rows_fetched,
                                       "rows_served": loop.fetcher.rows_served},
                     {"global": flatten(loop.model), "optimizer": loop.optimizer.state_dict(), "generation": 0,
                      "elapsed": loop.elapsed, "load_seconds": load_seconds}, loop.rows, row, on_round)
    return loop.rows
