"""Where a trainer computes: ``--device cuda|cpu|auto`` and the process group's backend.

A rank on ``cuda`` holds its model, its features and labels on GPU ``LOCAL_RANK`` of
its machine, moves each batch's graph there, evaluates there, and its process group is
NCCL, whose collectives take device tensors only (:class:`training.comm.Comm` stages
host tensors through the device). On ``cpu`` everything stays in host memory and the
process group is gloo. ``auto`` is ``cuda`` where torch sees a GPU. The graph structure
(the sampler's adjacency, the partition's routing) stays in host memory either way: it
is indexed, not multiplied.
"""

from __future__ import annotations

import os

import torch

from storage.errors import format_problem
from training.checkpoint import TrainerError

__all__ = ["backend_for", "local_rank", "resolve_device"]


def local_rank() -> int:
    """This process's rank on its machine (torchrun's or SLURM's), 0 when launched alone."""
    for name in ("LOCAL_RANK", "SLURM_LOCALID"):
        value = os.environ.get(name, "")
        if value.isdigit():
            return int(value)
    return 0


def resolve_device(name: str, rank_here: int | None = None) -> torch.device:
    """The device ``--device name`` means for the process of local rank ``rank_here``
    (default :func:`local_rank`).

    Raises
    ------
    TrainerError
        ``cuda`` where torch sees no GPU, or fewer GPUs than the local ranks need.
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
    count = torch.cuda.device_count()
    if here >= count:
        raise TrainerError(format_problem(
            "--device cuda", f"a GPU for local rank {here}", f"{count} GPU(s) on this machine",
            f"launch at most {count} ranks per machine (--nproc), or train with --device cpu."))
    return torch.device("cuda", here)


def backend_for(device: torch.device) -> str:
    """The process group's backend: NCCL between GPUs, gloo between CPUs."""
    return "nccl" if device.type == "cuda" else "gloo"
