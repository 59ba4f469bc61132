"""Where a trainer computes: ``--device cuda|cpu|auto`` and the process group's backend.

A rank on ``cuda`` holds its model, its features and labels on GPU ``LOCAL_RANK mod G``
of its machine's ``G`` GPUs, moves each batch's graph there and evaluates there. With
one GPU per rank the process group is NCCL, whose collectives take device tensors only
(:class:`asepr.training.group.comm.Comm` stages host tensors through the device). NCCL refuses two
ranks on one device, so when a machine runs more ranks than it has GPUs they share the
GPUs and the process group is gloo, whose buffers ``Comm`` stages through host memory:
the reconciliation's few collectives per round cost a copy each way, the computation
stays on the GPU. On ``cpu`` everything stays in host memory and the process group is
gloo. ``auto`` is ``cuda`` where torch sees a GPU. The graph structure (the sampler's
adjacency, the partition's routing) stays in host memory either way: it is indexed,
not multiplied.
"""

from __future__ import annotations

import os

import torch

from asepr.storage.errors import format_problem
from asepr.training.rundir.checkpoint import TrainerError

__all__ = ["backend_for", "gpu_index", "local_rank", "resolve_device"]


def local_rank() -> int:
    """This process's rank on its machine (torchrun's or SLURM's), 0 when launched alone."""
    for name in ("LOCAL_RANK", "SLURM_LOCALID"):
        value = os.environ.get(name, "")
        if value.isdigit():
            return int(value)
    return 0


def gpu_index(rank_here: int, gpu_count: int) -> int:
    """The GPU of local rank ``rank_here`` on a machine with ``gpu_count`` GPUs: its own
    while there are enough, shared round-robin otherwise."""
    return int(rank_here) % max(int(gpu_count), 1)


def resolve_device(name: str, rank_here: int | None = None) -> torch.device:
    """The device ``--device name`` means for the process of local rank ``rank_here``
    (default :func:`local_rank`).

    Raises
    ------
    TrainerError
        ``cuda`` where torch sees no GPU.
    """
    available = torch.cuda.is_available()
    if name == "cpu" or (name == "auto" and not available):
        return torch.device("cpu")
    if not available:
        raise TrainerError(format_problem(
            "--device cuda", "a CUDA GPU visible to torch",
            f"none (torch {torch.__version__}, torch.cuda.is_available() is False)",
            "train with --device cpu or --device auto, or on a machine with a GPU and a CUDA build of torch."))
    here = local_rank() if rank_here is None else int(rank_here)
    return torch.device("cuda", gpu_index(here, torch.cuda.device_count()))


def backend_for(device: torch.device, ranks_here: int = 1, gpu_count: int | None = None) -> str:
    """The process group's backend for ``ranks_here`` ranks on this machine: NCCL when each
    has a GPU of its own, gloo between CPUs or between ranks that share a GPU (every
    machine of a job must run as many ranks per GPU, so that all ranks agree)."""
    if device.type != "cuda":
        return "gloo"
    count = torch.cuda.device_count() if gpu_count is None else int(gpu_count)
    return "nccl" if int(ranks_here) <= count else "gloo"
