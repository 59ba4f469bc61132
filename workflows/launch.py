"""Launch K trainer processes on this machine through ``torch.distributed.run``'s API.

``launch_trainers(["OUT", "--rounds", "5"], nproc=4)`` is what
``torchrun --standalone --nproc-per-node 4 -m training.main OUT --rounds 5`` does: an
elastic agent with a local c10d rendezvous starts the ranks, streams their output, and
stops the survivors as soon as one rank fails (no restarts: a failed round is resumed
with ``--resume``). A failure comes back as :class:`TrainLaunchError` naming each
failed rank, its exit code or signal, and the fix.
"""

from __future__ import annotations

import logging
import os
import signal
import socket
import sys
import uuid
from collections.abc import Sequence

from storage.errors import AseprError, format_problem

__all__ = ["TrainLaunchError", "launch_trainers"]

log = logging.getLogger(__name__)


class TrainLaunchError(AseprError):
    """One or more trainer ranks failed."""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _describe(failure) -> str:
    code = failure.exitcode
    if code is not None and code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exit code {code}"


def launch_trainers(trainer_args: Sequence[str], nproc: int, *, monitor_interval: float = 0.2) -> None:
    """Run ``python -m training.main *trainer_args`` as ``nproc`` ranks; raise on any failure."""
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.launcher.api import LaunchConfig, elastic_launch

    if nproc < 1:
        raise TrainLaunchError(format_problem("--nproc", "an integer >= 1", str(nproc), "pass --nproc K."))
    config = LaunchConfig(
        min_nodes=1, max_nodes=1, nproc_per_node=nproc, run_id=f"asepr-{uuid.uuid4().hex[:8]}",
        rdzv_backend="c10d", rdzv_endpoint=f"127.0.0.1:{_free_port()}", max_restarts=0,
        monitor_interval=monitor_interval, start_method="spawn",
    )
    env_before = os.environ.get("OMP_NUM_THREADS")
    # torchrun sets OMP_NUM_THREADS=1 per rank; the trainer picks its own thread count.
    os.environ.setdefault("OMP_NUM_THREADS", str(max(1, (os.cpu_count() or 1) // nproc)))
    try:
        elastic_launch(config, sys.executable)("-u", "-m", "training.main", *trainer_args)
    except ChildFailedError as exc:
        first_rank, first = exc.get_first_failure()
        others = [f"rank {r} {_describe(f)}" for r, f in sorted(exc.failures.items()) if r != first_rank]
        described = f"rank {first_rank} (pid {first.pid}) failed first: {_describe(first)}"
        if others:
            described += "; then the agent stopped " + ", ".join(others)
        raise TrainLaunchError(
            format_problem(
                f"trainer job of {nproc} ranks",
                "every rank to finish", described,
                "see the rank's error above; rerun the same command with --resume to continue from "
                "the last complete round.",
            )
        ) from None
    finally:
        if env_before is None:
            os.environ.pop("OMP_NUM_THREADS", None)
