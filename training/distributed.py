"""The trainer: process-group setup and the reconciliation round loop.

One process per rank. Rank r loads its own partition(s) (:mod:`training.data`) and
runs, every round (DESIGN.md section 7):

1. local epochs from the global weights θ_g (+ μ·L_con with ``con``);
2. θ_avg: the weighted FedAvg, one flat-buffer all_reduce;
3. with ``kd``: ensemble distillation of θ_avg into the new θ_g; else θ_g = θ_avg;
4. evaluation of θ_g: each rank scores its own master nodes (or own edges), the sums
   are all_reduced;
5. checkpoint: every rank saves its local state, rank 0 commits the round
   (:class:`training.checkpoint.RunDir`) and the metrics row.

All randomness of a round derives from ``(seed, round, rank)``, so ``resume`` from a
round's checkpoint reproduces the uninterrupted run's weights exactly (same world size,
CPU, one thread per rank being the reproducible setting).

The process group comes from ``RANK``/``WORLD_SIZE``/``MASTER_ADDR``/``MASTER_PORT``
(torchrun sets them) or from SLURM's ``SLURM_PROCID``/``SLURM_NTASKS`` (with
``MASTER_ADDR`` from the environment or the first host of ``SLURM_JOB_NODELIST``).
Backend: gloo on CPU, nccl when CUDA is present. A collective blocked on a dead peer
fails after ``timeout_s``; under torchrun the agent stops the surviving ranks at once.
"""

from __future__ import annotations

import copy
import logging
import os
import re
import signal
import time
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from storage import read_manifest
from storage.errors import format_problem
from storage.resources import peak_rss_bytes
from training.checkpoint import RunDir, TrainerError
from training.comm import Comm
from training.config import TrainConfig
from training.data import (
    LocalGraph,
    load_local_graph,
    normalize_features,
    project_features,
    rank_partitions,
)
from training.local import train_local
from training.models import build_model, flatten, num_parameters, unflatten_into
from training.reconcile import distill, weighted_average
from training.tasks import make_task, round_seed

__all__ = ["TrainerError", "global_weights", "init_process_group", "run_trainer", "train_rounds"]

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
    backend = "nccl" if torch.cuda.is_available() else "gloo"
    if backend == "nccl":
        torch.cuda.set_device(local_rank)
    dist.init_process_group(backend, rank=rank, world_size=world, timeout=timedelta(seconds=config.timeout_s))
    return rank, world, local_rank


def _test_kill_hook(rank: int, round_index: int) -> None:
    """Test hook: ``ASEPR_TEST_KILL_RANK=r:R`` SIGKILLs rank r when it starts round R."""
    spec = os.environ.get("ASEPR_TEST_KILL_RANK")
    if spec and spec == f"{rank}:{round_index}":
        log.warning("test hook: rank %d kills itself at round %d", rank, round_index)
        os.kill(os.getpid(), signal.SIGKILL)


def _threads(config: TrainConfig, world: int) -> int:
    if config.threads:
        return config.threads
    return max(1, (os.cpu_count() or 1) // max(world, 1))


def _weighted_mean(value: float, weight: float, comm: Comm) -> float:
    t = torch.tensor([value * weight if weight else 0.0, float(weight)], dtype=torch.float64)
    comm.all_reduce(t, "control")
    return float(t[0] / t[1]) if t[1] else float("nan")


def _round_bytes(comm: Comm) -> float:
    """The largest number of bytes any rank sent so far (reported per rank)."""
    t = torch.tensor([comm.bytes.total_sent], dtype=torch.float64)
    if comm.world_size > 1:
        dist.all_reduce(t, op=dist.ReduceOp.MAX, group=comm.group)  # bookkeeping: not counted
    return float(t.item())


def run_trainer(out: str | Path, run_dir: str | Path, config: TrainConfig, *, resume: bool = False,
                comm: Comm | None = None, storage_options: dict | None = None,
                on_round: Callable[[dict[str, Any]], None] | None = None) -> list[dict[str, Any]]:
    """Train this rank for ``config.rounds`` rounds; return the metrics rows (rank 0's log).

    Parameters
    ----------
    out
        The partition output (``asepr partition``); the latest committed generation is used.
    run_dir
        Checkpoints and ``metrics.csv`` go here.
    resume
        Continue from the latest complete checkpoint in ``run_dir`` (its config must match
        in every field but ``rounds``, ``timeout_s``, ``threads`` and ``eval_every``).
    comm
        The collectives (default: over the initialised process group, or a single rank).
    on_round
        Called on rank 0 with each metrics row once its round is committed.
    """
    comm = comm or Comm()
    torch.set_num_threads(_threads(config, comm.world_size))
    manifest = read_manifest(out, storage_options=storage_options)
    generation = int(manifest["generation"])
    part_ids = rank_partitions(int(manifest["num_parts"]), comm.rank, comm.world_size)
    t_load = time.perf_counter()
    graph = load_local_graph(out, part_ids, storage_options=storage_options)
    load_seconds = time.perf_counter() - t_load
    return train_rounds(graph, run_dir, config, comm=comm, resume=resume, on_round=on_round,
                        info={"out": str(out), "generation": generation}, load_seconds=load_seconds)


def train_rounds(graph: LocalGraph, run_dir: str | Path, config: TrainConfig, *, comm: Comm,
                 resume: bool = False, on_round: Callable[[dict[str, Any]], None] | None = None,
                 info: dict[str, Any] | None = None, load_seconds: float = 0.0) -> list[dict[str, Any]]:
    """The round loop on an already loaded graph (see :func:`run_trainer`)."""
    rank, world = comm.rank, comm.world_size
    runs = RunDir(run_dir)
    generation = graph.generation
    part_ids = list(graph.part_ids)
    out = (info or {}).get("out", "the input")
    num_classes = comm.max_int(int(graph.y.max()) + 1 if graph.num_nodes else 0)
    graph.x = normalize_features(graph.x, config.feature_norm)
    if config.feature_projection:
        graph.x = project_features(graph.x, config.feature_projection, config.seed)
    in_dim = graph.x.shape[1]
    if comm.max_int(in_dim) != in_dim:
        raise TrainerError(format_problem(f"partition(s) {part_ids} of {out}", "the feature width of the other ranks",
                                          f"width {in_dim}", "repartition the input: the stores disagree."))
    if config.task == "node" and num_classes < 2:
        raise TrainerError(format_problem(f"labels (nodes/y) of {out}", "at least 2 classes for --task node",
                                          f"{num_classes} classes", "use --task link, or an input with labels."))
    task = make_task(graph, config, num_classes)
    torch.manual_seed(config.seed)
    model = build_model(config, in_dim, task.out_dim)
    optimizer = torch.optim.Adam(model.parameters(), lr=config.lr, weight_decay=config.weight_decay)
    global_flat = flatten(model)
    previous_flat: torch.Tensor | None = None
    rows: list[dict[str, Any]] = []
    start_round, elapsed = 0, 0.0
    info = {**(info or {}), "world_size": world, "config": config.to_dict(), "task": config.task,
            "num_parameters": num_parameters(model)}
    if resume:
        latest = runs.check_resume(config, world)
        g = runs.load_global(latest)
        r = runs.load_rank(latest, rank)
        global_flat = g["global"].to(torch.float32)
        previous_flat = r["local"].to(torch.float32)
        optimizer.load_state_dict(r["optimizer"])
        comm.bytes.load_state_dict(r["bytes"])
        rows = list(g["metrics_rows"])
        elapsed = float(g["elapsed"])
        start_round = latest + 1
        if int(g.get("generation", generation)) != generation and rank == 0:
            log.warning("resuming at round %d on generation %d (the checkpoint was trained on generation %d)",
                        start_round + 1, generation, int(g["generation"]))
    elif rank == 0:
        runs.clear()
        runs.write_run_info(info)
    comm.barrier()
    scratch = copy.deepcopy(model)
    global_model = copy.deepcopy(model) if config.uses_con else None
    previous_model = copy.deepcopy(model) if config.uses_con else None
    if rank == 0:
        log.info("rank 0: %d ranks, partitions per rank %s, %s model with %d parameters, task %s, strategy %s",
                 world, part_ids, config.model, num_parameters(model), config.task, config.reconcile)
    for rnd in range(start_round, config.rounds):
        _test_kill_hook(rank, rnd)
        t0 = time.perf_counter()
        sent_before = comm.bytes.total_sent
        torch.manual_seed(round_seed(config.seed, rnd, rank))
        gen = torch.Generator().manual_seed(round_seed(config.seed, rnd, rank, 1))
        unflatten_into(model, global_flat)
        con_models = {}
        if config.uses_con and previous_flat is not None:
            unflatten_into(global_model, global_flat)
            unflatten_into(previous_model, previous_flat)
            con_models = {"global_model": global_model, "previous_model": previous_model}
        loss = train_local(model, optimizer, task, config, gen, **con_models)
        local_flat = flatten(model)
        weight = float(task.num_train)
        avg_flat = weighted_average(local_flat, weight, comm)
        kd_loss = float("nan")
        if config.uses_kd:
            global_flat, kd_loss = distill(scratch, local_flat, avg_flat, task, config, comm, weight, gen)
        else:
            global_flat = avg_flat
        previous_flat = local_flat
        train_seconds = time.perf_counter() - t0
        row: dict[str, Any] | None = None
        if (rnd + 1) % config.eval_every == 0 or rnd + 1 == config.rounds:
            unflatten_into(scratch, global_flat)
            metrics = task.evaluate(scratch, comm)
            mean_loss = _weighted_mean(loss, weight, comm)
            round_sent = comm.bytes.total_sent - sent_before
            max_sent = _round_bytes(comm)
            seconds = time.perf_counter() - t0
            elapsed += seconds
            row = {"round": rnd + 1, "generation": generation, "seconds": round(seconds, 4),
                   "elapsed_s": round(elapsed, 4), "train_seconds": round(train_seconds, 4),
                   "loss": mean_loss, "kd_loss": kd_loss, "metric": task.metric,
                   "val": metrics["val"], "test": metrics["test"],
                   **{k: v for k, v in metrics.items() if k not in ("val", "test")},
                   "bytes_sent_round": round_sent, "bytes_sent_total_max": max_sent,
                   "world_size": world, "peak_rss_mib": round(peak_rss_bytes() / 2**20, 1)}
            rows.append(row)
        else:
            elapsed += time.perf_counter() - t0
        runs.save_rank(rnd, rank, {"local": local_flat, "optimizer": optimizer.state_dict(),
                                   "bytes": comm.bytes.state_dict()})
        comm.barrier()
        if rank == 0:
            runs.commit(rnd, world, {"global": global_flat, "generation": generation, "elapsed": elapsed,
                                     "load_seconds": load_seconds}, rows)
            if row is not None:
                log.info("round %d: %s", rnd + 1, row)
                if on_round is not None:
                    on_round(row)
    return rows


def global_weights(run_dir: str | Path) -> torch.Tensor:
    """θ_g of the latest complete round of a run (for tests and inspection)."""
    runs = RunDir(run_dir)
    latest = runs.latest_round()
    if latest is None:
        raise TrainerError(format_problem(f"run directory {run_dir}", "a complete checkpoint", "none",
                                          "train first."))
    return runs.load_global(latest)["global"]
