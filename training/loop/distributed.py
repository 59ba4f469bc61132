"""The trainer: process-group setup and the reconciliation round loop.

One process per rank. Rank r loads its own partition(s) (:mod:`asepr.training.graph.data`) and
runs, every round (docs/design.md#reconciliation-rounds):

1. local epochs from the global weights θ_g (+ μ·L_con with ``con``);
2. θ_avg: the weighted FedAvg, one flat-buffer all_reduce, applied by the server
   optimiser (θ_avg itself by default);
3. with ``kd``: ensemble distillation into the new θ_g; with ``corr``: global correction
   steps (:class:`asepr.training.reconcile.Reconciler`).

   With ``sync_every`` N, every rank takes the same number of steps in a round
   (:func:`asepr.training.loop.local.steps_per_round`, ``local_epochs`` epochs of the whole
   training set) and the ranks average after every N of them, each segment starting
   from the new θ_g (``kd`` and ``corr`` once per round, after the last);
4. evaluation of θ_g on the schedule of :func:`asepr.training.loop.rounds.evaluates`, by default
   exact: the whole-graph outputs computed over the partitions
   (:class:`asepr.training.evaluation.inference.Evaluator`; ``eval_mode="local"``: each rank's partition
   only), each rank scoring its own master nodes (or own edges), the sums all_reduced.
   Its time and bytes are kept apart from training's (:func:`asepr.training.loop.rounds.metrics_row`);
5. checkpoint: every rank saves its local state, rank 0 commits the round
   (:class:`asepr.training.rundir.checkpoint.RunDir`) and the metrics row.

All randomness of a round derives from ``(seed, round, rank)``, so ``resume`` from a
round's checkpoint reproduces the uninterrupted run's weights exactly (same world size,
CPU, one thread per rank being the reproducible setting).

The process group comes from ``RANK``/``WORLD_SIZE``/``MASTER_ADDR``/``MASTER_PORT``
(torchrun sets them) or from SLURM's ``SLURM_PROCID``/``SLURM_NTASKS`` (with
``MASTER_ADDR`` from the environment or the first host of ``SLURM_JOB_NODELIST``).
Backend: gloo on CPU, NCCL on GPUs (``config.device``, :mod:`asepr.training.group.device`: the model,
the features and labels, each batch and the evaluation on the rank's GPU). A collective blocked on a dead peer
fails after ``timeout_s``; under torchrun the agent stops the surviving ranks at once,
and :func:`exit_with_parent` stops the ranks when the agent itself is killed. A rank
that cannot load its partitions or its checkpoint reports the file, and the others name
that rank (:func:`asepr.training.loop.rounds.all_ranks_ready`).
"""

from __future__ import annotations

import copy
import logging
import os
import re
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from asepr.storage import read_manifest
from asepr.storage.commit import failpoints
from asepr.storage.errors import format_problem
from asepr.training.group.capacity import StepPlan, check_rank_lists
from asepr.training.rundir.checkpoint import (
    RunDir,
    TrainerError,
    expect_keys,
    expect_tensor,
    load_optimizer_state,
)
from asepr.training.group.comm import Comm
from asepr.training.config import TrainConfig
from asepr.training.graph.data import LocalGraph, load_local_graph, prepare_features, rank_partitions
from asepr.training.group.device import backend_for, resolve_device
from asepr.training.group.elastic import PlacementLog, rank_placement, resume_source
from asepr.training.evaluation.inference import Evaluator
from asepr.training.loop.local import batch_stream, share_training_seeds, steps_per_round, sync_segments, train_local
from asepr.training.models import build_model, flatten, num_parameters, unflatten_into
from asepr.training.protocol import ComputeClock, patience_spent
from asepr.training.reconcile import Reconciler
from asepr.training.loop.rounds import (
    all_ranks_ready,
    batch_columns,
    commit_round,
    configure_cpu,
    evaluates,
    metrics_row,
    placement_columns,
    local_ranks,
    rank_peak_rss_bytes,
    start_run,
)
from asepr.training.tasks import make_task, round_seed

__all__ = ["TrainerError", "exit_with_parent", "global_weights", "init_process_group", "run_trainer", "train_rounds"]

log = logging.getLogger(__name__)


def _slurm_master_addr() -> str | None:
    nodelist = os.environ.get("SLURM_JOB_NODELIST") or os.environ.get("SLURM_NODELIST")
    if not nodelist:
        return None
    first = re.split(r",(?![^\[]*\])", nodelist)[0]
    m = re.match(r"([^\[]+)\[([^\],-]+)", first)
    return m.group(1) + m.group(2) if m else first


def init_process_group(config: TrainConfig) -> tuple[int, int, int]:
    """Join the process group from torchrun's or SLURM's variables; return (rank, world, local_rank).

    Without any of those variables, a single-rank job is started (world size 1).
    """
    env = os.environ
    if "RANK" in env and "WORLD_SIZE" in env:
        rank, world, local_rank = int(env["RANK"]), int(env["WORLD_SIZE"]), int(env.get("LOCAL_RANK", 0))
    elif "SLURM_PROCID" in env and "SLURM_NTASKS" in env:
        rank, world, local_rank = int(env["SLURM_PROCID"]), int(env["SLURM_NTASKS"]), int(env.get("SLURM_LOCALID", 0))
        env.setdefault("MASTER_ADDR", _slurm_master_addr() or "127.0.0.1")
        env.setdefault("MASTER_PORT", "29500")
    else:
        rank, world, local_rank = 0, 1, 0
        env.setdefault("MASTER_ADDR", "127.0.0.1")
        env.setdefault("MASTER_PORT", str(29500 + os.getpid() % 1000))
    if "MASTER_ADDR" not in env or "MASTER_PORT" not in env:
        raise TrainerError(
            format_problem("trainer environment", "MASTER_ADDR and MASTER_PORT (set by torchrun)",
                           f"RANK={env.get('RANK')} WORLD_SIZE={env.get('WORLD_SIZE')} without them",
                           "launch with `asepr train` or torchrun, or export MASTER_ADDR/MASTER_PORT.")
        )
    device = resolve_device(config.device, local_rank)
    backend = backend_for(device, local_ranks(world))
    if device.type == "cuda":
        torch.cuda.set_device(device)
    dist.init_process_group(backend, rank=rank, world_size=world, timeout=timedelta(seconds=config.timeout_s))
    return rank, world, local_rank


def exit_with_parent(poll_s: float = 1.0) -> threading.Thread | None:
    """Stop this process when its parent (torchrun's agent, ``asepr train``) is gone.

    A daemon thread compares ``os.getppid()`` with the parent at the call every
    ``poll_s`` seconds. A parent killed by SIGKILL cannot stop its children, which are
    then re-parented: the rank prints one line on stderr and exits at once with status 1
    (``os._exit``: a collective in progress cannot hold it), so no orphaned rank keeps
    training and writing checkpoints. A process whose parent is already init (pid 1)
    has nothing to watch: None is returned.
    """
    parent = os.getppid()
    if parent == 1:
        return None

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(poll_s)
        print(f"asepr train: rank {os.environ.get('RANK', '?')}: error: the launcher (pid {parent}) is gone; "
              "this rank stops. Rerun with --resume to continue from the last complete round.",
              file=sys.stderr, flush=True)
        os._exit(1)

    thread = threading.Thread(target=watch, name="asepr-exit-with-parent", daemon=True)
    thread.start()
    return thread


def _weighted_mean(value: float, weight: float, comm: Comm) -> float:
    t = torch.tensor([value * weight if weight else 0.0, float(weight)], dtype=torch.float64)
    comm.all_reduce(t, "control")
    return float(t[0] / t[1]) if t[1] else float("nan")


def run_trainer(out: str | Path, run_dir: str | Path, config: TrainConfig, *, resume: bool = False,
                comm: Comm | None = None, storage_options: dict | None = None,
                on_round: Callable[[dict[str, Any]], None] | None = None) -> list[dict[str, Any]]:
    """Train this rank for ``config.rounds`` rounds; return the metrics rows (rank 0's log).

    Parameters
    ----------
    out
        The partition output (``asepr partition``); the latest committed generation is used.
    run_dir
        Checkpoints and ``metrics.csv`` go here (a path, or an fsspec URL: see
        :class:`asepr.training.rundir.checkpoint.RunDir`).
    resume
        Continue from the latest complete checkpoint in ``run_dir`` (its config must match
        in every field but ``rounds``, ``timeout_s``, ``threads``, ``eval_every`` and ``eval_mode``).
    comm
        The collectives (default: over the initialised process group, or a single rank).
    storage_options
        fsspec options of ``out`` and ``run_dir`` on an object store; each rank reads
        the manifest and its own partitions' stores only.
    on_round
        Called on rank 0 with each metrics row once its round is committed.
    """
    comm = comm or Comm()
    configure_cpu(config, comm.world_size)
    t_load = time.perf_counter()

    def load() -> tuple[LocalGraph, int]:
        manifest = read_manifest(out, storage_options=storage_options)
        part_ids = rank_partitions(int(manifest["num_parts"]), comm.rank, comm.world_size)
        return load_local_graph(out, part_ids, storage_options=storage_options), int(manifest["generation"])

    graph, generation = all_ranks_ready(comm, "load its partitions", load)
    load_seconds = time.perf_counter() - t_load
    return train_rounds(graph, run_dir, config, comm=comm, resume=resume, on_round=on_round,
                        info={"out": str(out), "generation": generation}, load_seconds=load_seconds,
                        storage_options=storage_options)


@dataclass
class _Loop:
    """What the round loop carries from one round to the next."""

    model: torch.nn.Module
    optimizer: torch.optim.Optimizer
    task: Any
    global_flat: torch.Tensor
    previous_flat: torch.Tensor | None = None
    rows: list[dict[str, Any]] | None = None
    elapsed: float = 0.0
    start_round: int = 0
    scratch: torch.nn.Module | None = None
    global_model: torch.nn.Module | None = None
    previous_model: torch.nn.Module | None = None
    evaluator: Evaluator | None = None
    reconciler: Reconciler | None = None
    steps_per_round: int = 0
    plan: StepPlan | None = None
    placement_log: PlacementLog | None = None
    round_steps: int = 0


def _prepare(graph: LocalGraph, config: TrainConfig, comm: Comm, source: str) -> _Loop:
    """Features, the checks every rank must pass, the task, the model and its optimiser."""
    num_classes = comm.max_int(int(graph.y.max()) + 1 if graph.num_nodes else 0)
    graph.x = prepare_features(graph.x, config)
    device = resolve_device(config.device)
    graph.x, graph.y = graph.x.to(device), graph.y.to(device)
    in_dim = graph.x.shape[1]
    widest = comm.max_int(in_dim)

    def check() -> None:
        if widest != in_dim:
            raise TrainerError(format_problem(f"partition(s) {list(graph.part_ids)} of {source}",
                                              "the feature width of the other ranks", f"width {in_dim}",
                                              "repartition the input: the stores disagree."))
        if config.task == "node" and num_classes < 2:
            raise TrainerError(format_problem(f"labels (nodes/y) of {source}", "at least 2 classes for --task node",
                                              f"{num_classes} classes", "use --task link, or an input with labels."))
        problem = check_rank_lists(config, comm.world_size)
        if problem:
            raise TrainerError(problem)

    all_ranks_ready(comm, "agree on the features and labels", check)
    task = make_task(graph, config, num_classes)
    share_training_seeds(task, comm)
    torch.manual_seed(config.seed)
    model = build_model(config, in_dim, task.out_dim).to(device)
    optimizer = torch.optim.Adam(model.parameters(), lr=config.lr, weight_decay=config.weight_decay)
    return _Loop(model=model, optimizer=optimizer, task=task, global_flat=flatten(model), rows=[],
                 evaluator=Evaluator(task, comm, config.eval_mode), reconciler=Reconciler(config, task, model, comm),
                 steps_per_round=steps_per_round(task, config, comm) if config.sync_every else 0,
                 plan=StepPlan(config, comm.rank, comm.world_size), placement_log=PlacementLog())


def _restore(loop: _Loop, runs: RunDir, config: TrainConfig, comm: Comm, generation: int,
             partitions: list[list[int]]) -> None:
    """Resume: θ_g, this rank's θ_r, Adam state and byte counters of the latest complete round.

    At another world size (a lost machine, :mod:`asepr.training.group.elastic`) a rank whose partitions
    moved starts from θ_g with fresh Adam moments and ``c_r = c``, and keeps the byte
    counters of the old rank of its number."""
    latest = runs.check_resume(config, comm.world_size, any_world=True)
    size = (num_parameters(loop.model),)
    g_path, g = runs.global_path(latest), runs.load_global(latest)
    expect_keys(g_path, g, ("metrics_rows", "elapsed"))
    loop.global_flat = expect_tensor(g_path, g, "global", size).to(torch.float32)
    source, old_world = resume_source(g, runs.read_run_info() if "world_size" not in g else None, partitions,
                                      comm.rank)
    # This rank's own file of before (its state; else its byte counters), or rank 0's (the global variate).
    own = source if source is not None else comm.rank if comm.rank < old_world else 0
    r_path, r = runs.rank_path(latest, own), runs.load_rank(latest, own)
    expect_keys(r_path, r, ("optimizer", "bytes"))
    if source is None:
        loop.previous_flat = loop.global_flat.clone()
    else:
        loop.previous_flat = expect_tensor(r_path, r, "local", size).to(torch.float32)
        load_optimizer_state(r_path, loop.optimizer, r["optimizer"])
    if "reconcile" in g or config.server_opt != "fedavg":
        expect_keys(g_path, g, ("reconcile",))
        loop.reconciler.load_state_dict(g["reconcile"], g_path)
    if comm.rank < old_world:
        comm.bytes.load_state_dict(r["bytes"])
    if loop.reconciler.drift is not None:
        expect_keys(r_path, r, ("drift",))
        state = r["drift"]
        if source is None and isinstance(state, dict):
            state = {"c_local": state.get("c_global"), "c_global": state.get("c_global")}
        loop.reconciler.drift.load_state_dict(state, r_path)
    loop.plan.load_state_dict(g.get("speeds"))
    loop.placement_log = PlacementLog(g.get("placement"))
    if old_world != comm.world_size and comm.rank == 0:
        log.warning("resuming at round %d on %d ranks (the checkpoint was trained on %d); ranks whose partitions "
                    "moved start from the global model", latest + 2, comm.world_size, old_world)
    loop.rows = list(g["metrics_rows"])
    loop.elapsed = float(g["elapsed"])
    loop.start_round = latest + 1
    if int(g.get("generation", generation)) != generation and comm.rank == 0:
        # Information, not a warning: `asepr train --resume` says it in its own words before launching.
        log.info("resuming at round %d on generation %d (the checkpoint was trained on generation %d)",
                 loop.start_round + 1, generation, int(g["generation"]))


def _local_and_reconcile(loop: _Loop, config: TrainConfig, comm: Comm, gen: torch.Generator,
                         rnd: int) -> tuple[float, float, dict[str, float], float]:
    """Steps 1–3 of a round: local training, then reconciliation (after every segment of
    ``sync_every`` steps); returns (loss, weight, the last reconciliation's losses, drift).
    The loss is the last epoch's mean, or with ``sync_every`` the mean over the round's
    steps; the drift is ‖θ_r − θ_g‖ at each synchronisation (the local model against the
    global model its segment started from), averaged over the round's synchronisations.
    With ranks of different speeds (``loop.plan``, :mod:`asepr.training.group.capacity`) each segment's
    steps are this rank's share of the fastest rank's, and the update is normalised by them."""
    weight, plan = float(loop.task.num_train), loop.plan
    if config.sync_every:
        segments = sync_segments(loop.steps_per_round, config.sync_every)
        stream = batch_stream(loop.task, gen)
    else:
        segments, stream = [None], None
    loss_sum, loss_steps, drifts, loop.round_steps = 0.0, 0, [], 0
    for index, segment in enumerate(segments):
        steps = segment if segment is None else plan.steps(segment)
        unflatten_into(loop.model, loop.global_flat)
        con_models = {}
        if config.uses_con and loop.previous_flat is not None:
            unflatten_into(loop.global_model, loop.global_flat)
            unflatten_into(loop.previous_model, loop.previous_flat)
            con_models = {"global_model": loop.global_model, "previous_model": loop.previous_model}
        drift = loop.reconciler.drift
        if drift is not None:
            if plan.active:  # this rank's full segment is its own planned steps
                drift.segment_steps = plan.steps(config.sync_every)
            drift.begin()
        cpu = time.process_time()
        loss = train_local(loop.model, loop.optimizer, loop.task, config, gen, steps=steps, stream=stream,
                           drift=drift, **con_models)
        plan.observe(time.process_time() - cpu, steps or 0)
        if loss == loss:  # a rank without training data returns NaN
            loss_sum, loss_steps = loss_sum + loss * (steps or 1), loss_steps + (steps or 1)
        loop.round_steps += steps or 0
        local_flat = flatten(loop.model)
        drifts.append(float(torch.linalg.vector_norm(local_flat.double() - loop.global_flat.double())))
        loop.global_flat, losses = loop.reconciler(loop.global_flat, local_flat, weight, gen,
                                                   end_of_round=index == len(segments) - 1,
                                                   steps=steps if plan.active else None)
        plan.settle(comm)
        loop.previous_flat = local_flat
    return loss_sum / loss_steps if loss_steps else float("nan"), weight, losses, sum(drifts) / len(drifts)


def _round(loop: _Loop, config: TrainConfig, comm: Comm, rnd: int, generation: int) -> dict[str, Any] | None:
    """One round (steps 1–4); returns its metrics row when it is evaluated."""
    t0 = time.perf_counter()
    sent_before = comm.bytes.state_dict()
    torch.manual_seed(round_seed(config.seed, rnd, comm.rank))
    gen = torch.Generator().manual_seed(round_seed(config.seed, rnd, comm.rank, 1))
    loop.clock.start()
    loss, weight, losses, drift = _local_and_reconcile(loop, config, comm, gen, rnd)
    loop.clock.stop()
    loop.elapsed += time.perf_counter() - t0
    if not evaluates(config, rnd):
        return None
    train_peak = rank_peak_rss_bytes()
    t_eval = time.perf_counter()
    unflatten_into(loop.scratch, loop.global_flat)
    metrics = loop.evaluator(loop.scratch)
    eval_seconds = time.perf_counter() - t_eval
    row = metrics_row(comm, loop.rows, sent_before, round_index=rnd, epoch=(rnd + 1) * config.local_epochs,
                      generation=generation, elapsed=loop.elapsed, eval_seconds=eval_seconds,
                      loss=_weighted_mean(loss, weight, comm), kd_loss=losses["kd_loss"], metric=loop.task.metric,
                      metrics={**metrics, "corr_loss": losses["corr_loss"]} if config.uses_corr else metrics,
                      eval_mode=config.eval_mode, train_peak=train_peak, drift=drift)
    row["compute_s_cum_max"] = loop.clock.settle(comm)
    if loop.plan.active or config.slowdown:
        row.update(loop.plan.columns(comm, loop.round_steps))
    loop.rows.append(row)
    return row


def train_rounds(graph: LocalGraph, run_dir: str | Path, config: TrainConfig, *, comm: Comm,
                 resume: bool = False, on_round: Callable[[dict[str, Any]], None] | None = None,
                 info: dict[str, Any] | None = None, load_seconds: float = 0.0,
                 storage_options: dict | None = None) -> list[dict[str, Any]]:
    """The round loop on an already loaded graph (see :func:`run_trainer`; ``storage_options``:
    of a run directory on an object store)."""
    runs = RunDir(run_dir, storage_options)
    partitions = rank_placement(graph.part_ids, comm)
    placement = placement_columns(graph.num_nodes, graph.x.shape[1] * graph.x.element_size(), comm)
    loop = _prepare(graph, config, comm, (info or {}).get("out", "the input"))
    info = {**(info or {}), "world_size": comm.world_size, "config": config.to_dict(), "task": config.task,
            "num_parameters": num_parameters(loop.model), "steps_per_round": loop.steps_per_round,
            "threads": torch.get_num_threads(), **placement,
            **batch_columns(loop.task.num_train, loop.task.batch_size, comm)}
    if resume:
        all_ranks_ready(comm, "load its checkpoint",
                        lambda: _restore(loop, runs, config, comm, graph.generation, partitions))
    else:
        start_run(runs, comm, info)
    comm.barrier()
    loop.scratch = copy.deepcopy(loop.model)
    if config.uses_con:
        loop.global_model, loop.previous_model = copy.deepcopy(loop.model), copy.deepcopy(loop.model)
    if comm.rank == 0:
        log.info("rank 0: %d ranks, partitions per rank %s, %s model with %d parameters, task %s, strategy %s",
                 comm.world_size, list(graph.part_ids), config.model, num_parameters(loop.model), config.task,
                 config.reconcile)
    loop.clock = ComputeClock(loop.rows[-1].get("compute_s_cum_max", 0.0) if loop.rows else 0.0,
                              factor=loop.plan.slowdown)
    for rnd in range(loop.start_round, config.rounds):
        if patience_spent(loop.rows, config.patience):  # the same global rows on every rank
            break
        failpoints.failpoint(f"round:{comm.rank}:{rnd}")
        row = _round(loop, config, comm, rnd, graph.generation)
        rank_state = {"local": loop.previous_flat, "optimizer": loop.optimizer.state_dict(),
                      "bytes": comm.bytes.state_dict()}
        if loop.reconciler.drift is not None:
            rank_state["drift"] = loop.reconciler.drift.state_dict()
        loop.placement_log.record(rnd, partitions)
        commit_round(runs, rnd, comm, rank_state,
                     {"global": loop.global_flat, "generation": graph.generation, "elapsed": loop.elapsed,
                      "load_seconds": load_seconds, "reconcile": loop.reconciler.state_dict(),
                      "world_size": comm.world_size, "placement": loop.placement_log.entries,
                      **({"speeds": loop.plan.state_dict()} if loop.plan.state_dict() else {})}, loop.rows, row,
                     on_round)
        if comm.rank == 0:
            loop.placement_log.write(runs)
    return loop.rows


def global_weights(run_dir: str | Path) -> torch.Tensor:
    """θ_g of the latest complete round of a run (for tests and inspection)."""
    runs = RunDir(run_dir)
    latest = runs.latest_round()
    if latest is None:
        raise TrainerError(format_problem(f"run directory {run_dir}", "a complete checkpoint", "none",
                                          "train first."))
    return runs.load_global(latest)["global"]
