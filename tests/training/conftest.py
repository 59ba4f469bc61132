"""Fixtures for the training tests: Cora partitioned with ASEP, and a 2-rank launcher."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from asepr.pipeline.config import PartitionConfig
from asepr.pipeline.partition_run import partition_to_store
from asepr.storage.importers import import_dataset
from asepr.workflows.demo import bundled_cora

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="session")
def cora_input(tmp_path_factory) -> Path:
    """The bundled Cora (2,708 nodes, 5,278 undirected edges, 7 classes) as an input."""
    path = tmp_path_factory.mktemp("cora") / "in"
    import_dataset("gnn-npz", bundled_cora(), path, shard_rows=1_000, overwrite=True)
    return path


@pytest.fixture(scope="session")
def cora_parts(cora_input, tmp_path_factory):
    """``parts(k, halo=0)``: Cora partitioned by ASEP into k stores (cached for the whole test run)."""
    cache: dict[tuple[int, int], Path] = {}

    def parts(k: int, halo: int = 0) -> Path:
        if (k, halo) not in cache:
            out = tmp_path_factory.mktemp(f"cora-k{k}-h{halo}") / "out"
            partition_to_store(cora_input, out, PartitionConfig(num_parts=k, algo="asep"), halo=halo)
            cache[k, halo] = out
        return cache[k, halo]

    return parts


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _forked_rank(rank: int, world: int, port: int, fn, args) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    try:
        fn(rank, world, *args)
    finally:
        dist.destroy_process_group()


def fork_ranks(world: int, fn, *args) -> None:
    """Run ``fn(rank, world, *args)`` in ``world`` forked gloo ranks; a failure is raised here."""
    mp.start_processes(_forked_rank, args=(world, free_port(), fn, args), nprocs=world, join=True,
                       start_method="fork")


def spawn_ranks(world: int, trainer_args: list[str], *, extra_env: dict | None = None) -> list[subprocess.Popen]:
    """Start ``python -m asepr.training.main`` as ``world`` ranks with plain RANK/WORLD_SIZE/MASTER_*
    variables (the non-torchrun launch path); stdout and stderr are captured."""
    port = free_port()
    procs = []
    for rank in range(world):
        env = dict(os.environ, RANK=str(rank), WORLD_SIZE=str(world), LOCAL_RANK=str(rank),
                   MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), OMP_NUM_THREADS="1", **(extra_env or {}))
        procs.append(subprocess.Popen([sys.executable, "-m", "asepr.training.main", *trainer_args], cwd=REPO, env=env,
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    return procs


def wait_ranks(procs: list[subprocess.Popen], timeout: float = 300) -> list[tuple[int, str, str]]:
    results = []
    for p in procs:
        try:
            out, err = p.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            for q in procs:
                q.kill()
            raise
        results.append((p.returncode, out, err))
    return results


def run_ranks(world: int, trainer_args: list[str], **kw) -> list[tuple[int, str, str]]:
    results = wait_ranks(spawn_ranks(world, trainer_args, **kw))
    for rank, (code, _out, err) in enumerate(results):
        assert code == 0, f"rank {rank} exited {code}:\n{err[-3000:]}"
    return results
