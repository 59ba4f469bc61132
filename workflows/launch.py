"""Launch K trainer processes on this machine through ``torch.distributed.run``'s API.

``launch_trainers("OUT", "RUN", config, nproc=4)`` takes the run directory's lock
(a second launch into ``RUN`` is refused, naming the holder), writes ``config`` to
``RUN/config.json`` and does what ``torchrun --standalone --nproc-per-node 4 --no-python
asepr-rank OUT --config RUN/config.json --run-dir RUN`` does: an elastic agent with a
local c10d rendezvous starts the ranks, streams their output, and stops the survivors as
soon as one rank fails (no restarts: a failed round is resumed with ``resume=True``).
The ranks exit by themselves if this process (their agent) is killed
(:func:`asepr.training.loop.distributed.exit_with_parent`). A failure comes back as
:class:`TrainLaunchError` naming each failed rank, its exit code or signal, and the fix.

Across machines (``asepr train --nnodes MIN:MAX --rdzv-endpoint HOST:PORT``, the same
command on every machine, :class:`Elastic`) each machine's agent meets the others at a
c10d rendezvous, as ``torchrun --nnodes MIN:MAX --rdzv-backend c10d`` does. The launcher
then takes no lock (rank 0 of the job takes it, wherever it runs) and leaves the checks of
the run directory to the ranks. With ``--max-restarts N`` an agent whose ranks failed
(a peer machine lost) meets the survivors again and restarts its ranks, which resume
from the last complete round at the new world size (:mod:`asepr.training.group.elastic`). The
machine that hosts the rendezvous (the endpoint's) must survive.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import signal
import socket
import sys
import threading
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from asepr.storage.errors import AseprError, format_problem
from asepr.storage.locations.remote import STORAGE_OPTIONS_VARIABLE
from asepr.storage.progress import track
from asepr.training.rundir.checkpoint import LOCK_TOKEN_VARIABLE, RunDir
from asepr.training.config import TrainConfig

__all__ = ["Elastic", "TrainLaunchError", "elastic_settings", "launch_trainers"]

log = logging.getLogger(__name__)


class TrainLaunchError(AseprError):
    """One or more trainer ranks failed."""


@dataclass(frozen=True)
class Elastic:
    """torchrun's elastic settings of a job across machines (``asepr train --nnodes``)."""

    min_nodes: int
    max_nodes: int
    endpoint: str
    run_id: str
    #: torchrun's ``--rdzv-conf``: e.g. ``{"last_call_timeout": "60"}``, the seconds the
    #: rendezvous waits for more machines once MIN have joined (torch's default 30).
    conf: tuple[tuple[str, str], ...] = ()


def _rdzv_conf(text: str | None) -> tuple[tuple[str, str], ...]:
    pairs = []
    for item in filter(None, (text or "").split(",")):
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise TrainLaunchError(format_problem("--rdzv-conf", "KEY=VALUE pairs joined by commas", repr(text),
                                                  "pass e.g. --rdzv-conf last_call_timeout=60,read_timeout=120."))
        pairs.append((key.strip(), value.strip()))
    return tuple(pairs)


def elastic_settings(nnodes: str | None, endpoint: str | None, run_id: str | None,
                     conf: str | None = None) -> Elastic | None:
    """``--nnodes MIN:MAX`` (or ``N``), ``--rdzv-endpoint``, ``--rdzv-id`` and
    ``--rdzv-conf`` as :class:`Elastic`; None without ``--nnodes``.

    Raises
    ------
    TrainLaunchError
        A malformed ``--nnodes`` or ``--rdzv-conf``, or a missing ``--rdzv-endpoint``, in one line.
    """
    if nnodes is None:
        if endpoint:
            raise TrainLaunchError(format_problem("--rdzv-endpoint", "--nnodes MIN:MAX with it",
                                                  "no --nnodes", "pass --nnodes MIN:MAX too (e.g. 1:2)."))
        return None
    low, _, high = str(nnodes).partition(":")
    try:
        bounds = int(low), int(high or low)
    except ValueError:
        bounds = (0, 0)
    if not 1 <= bounds[0] <= bounds[1]:
        raise TrainLaunchError(format_problem("--nnodes", "MIN:MAX with 1 <= MIN <= MAX (or N)", repr(nnodes),
                                              "pass e.g. --nnodes 1:2."))
    if not endpoint:
        raise TrainLaunchError(format_problem("--nnodes", "--rdzv-endpoint HOST:PORT with it (the rendezvous, "
                                              "reachable from every machine)", "no --rdzv-endpoint",
                                              "pass --rdzv-endpoint HOST:PORT, the same on every machine."))
    return Elastic(bounds[0], bounds[1], endpoint, run_id or "asepr", _rdzv_conf(conf))


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


@contextlib.contextmanager
def _environment(**values: str) -> Iterator[None]:
    """``os.environ`` with ``values`` set for the block (the ranks inherit it), then as it was."""
    before = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for k, v in before.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def launch_trainers(out: str | Path, run_dir: str | Path, config: TrainConfig, nproc: int, *,
                    strategy: str = "asepr", fds_partition: str = "auto", resume: bool = False,
                    overwrite: bool = False, quiet: bool = False, verbose: int = 0,
                    monitor_interval: float = 0.2, storage_options: dict | None = None,
                    elastic: Elastic | None = None, max_restarts: int = 0) -> None:
    """Train ``config`` on ``out`` as ``nproc`` ranks (``python -P -m asepr.training.main``); raise on any failure.

    Parameters
    ----------
    out
        The partition output (the input directory with ``strategy="fds"``).
    run_dir
        The run directory: locked for the launch, ``config.json`` written into it. Like
        ``out``, a path or an fsspec URL (``s3://bucket/runs/cora``).
    config
        The resolved config the ranks read back.
    strategy, fds_partition, resume, overwrite, quiet, verbose
        The trainer's ``--strategy``, ``--fds-partition``, ``--resume``, ``--overwrite``, ``-q``
        and ``-v``. Without ``resume`` or ``overwrite``, a run directory holding a previous
        run is refused before any rank starts; with ``resume``, one without a complete
        round to resume (or of another config or world size).
    storage_options
        fsspec options of a remote ``out`` and ``run_dir``; the ranks get them through
        :data:`asepr.storage.locations.remote.STORAGE_OPTIONS_VARIABLE`, never on their command line.
    elastic
        A job across machines: ``nproc`` ranks on this machine, its agent meeting the
        others' at the rendezvous (see the module docstring); None: this machine only.
    max_restarts
        How many times the agent restarts its failed ranks (they resume); 0: a failure
        ends the job.

    Raises
    ------
    TrainLaunchError
        A rank failed (named with its exit code or signal), or ``nproc`` < 1.
    StoreError
        Another run holds ``run_dir``, or it holds a previous run (see above).
    TrainerError
        ``config.device`` is ``cuda`` and torch sees no GPU on this machine.
    """
    if nproc < 1:
        raise TrainLaunchError(format_problem("--nproc", "an integer >= 1", str(nproc), "pass --nproc K."))
    from asepr.training.group.device import resolve_device

    resolve_device(config.device, nproc - 1)  # --device cuda without a GPU: refused before any rank starts
    runs = RunDir(run_dir, storage_options)
    if elastic is not None:
        _launch_across_machines(out, run_dir, runs, config, nproc, elastic, max_restarts, storage_options,
                                [*(["--resume"] * bool(resume)), *(["--overwrite"] * bool(overwrite and not resume)),
                                 *(["-q"] * bool(quiet)), *(["-v"] * int(verbose))], monitor_interval)
        return
    made = _missing_directories(runs.path) if isinstance(runs.path, Path) else []
    try:
        with runs.lock() as lock:
            if resume:
                runs.check_resume(config, nproc, any_world=strategy != "fds")
            elif not overwrite:
                runs.refuse_previous_run()
            args = [str(out), "--config", str(runs.write_config(config)), "--run-dir", str(run_dir)]
            if strategy == "fds":
                args += ["--strategy", "fds", "--fds-partition", fds_partition]
            args += ["--resume"] * bool(resume) + ["--overwrite"] * bool(overwrite and not resume)
            args += ["-q"] * bool(quiet) + ["-v"] * int(verbose)
            environment = {LOCK_TOKEN_VARIABLE: lock.token, STORAGE_OPTIONS_VARIABLE: json.dumps(storage_options or {}),
                           **(FRESH_STORE_PER_ROUND if max_restarts else {})}
            with _environment(OMP_NUM_THREADS=_rank_threads(nproc), **environment), _startup_progress(runs):
                _elastic_launch(args, nproc, monitor_interval, max_restarts=max_restarts, runs=runs)
    except AseprError:
        for directory in made:  # a launch refused at once leaves no empty run directory behind
            try:
                directory.rmdir()
            except OSError:
                break
        raise


def _rank_threads(nproc: int) -> str:
    """torchrun sets OMP_NUM_THREADS=1 per rank unless it is set; give each rank its share
    of the cores (the trainer then picks its own thread count)."""
    return os.environ.get("OMP_NUM_THREADS") or str(max(1, (os.cpu_count() or 1) // nproc))


#: torch's elastic agents share one store between the rendezvous rounds of a job, without
#: a prefix per round, so the ranks restarted after a lost machine read the process-group
#: addresses of the ranks before them and wait for those; with sharing off, rank 0 of every
#: round hosts a fresh store (set whenever the ranks may be restarted).
FRESH_STORE_PER_ROUND = {"TORCH_DISABLE_SHARE_RDZV_TCP_STORE": "1"}


def _launch_across_machines(out, run_dir, runs: RunDir, config: TrainConfig, nproc: int, elastic: Elastic,
                            max_restarts: int, storage_options: dict | None, flags: list[str],
                            monitor_interval: float) -> None:
    """This machine's agent of a job across machines: no lock here (rank 0 of the job
    takes it) and every machine writes the same ``config.json``."""
    args = [str(out), "--config", str(runs.write_config(config)), "--run-dir", str(run_dir), *flags]
    options = {STORAGE_OPTIONS_VARIABLE: json.dumps(storage_options or {})}
    with _environment(OMP_NUM_THREADS=_rank_threads(nproc), **options, **FRESH_STORE_PER_ROUND):
        _elastic_launch(args, nproc, monitor_interval, elastic=elastic, max_restarts=max_restarts, runs=runs)


#: Seconds between two looks at the run directory while the ranks start.
STARTUP_POLL_S = 2.0


@contextlib.contextmanager
def _startup_progress(runs: RunDir) -> Iterator[None]:
    """The ranks' start-up as a progress stage (:mod:`asepr.storage.progress`) until their first
    round is committed: loading the partitions and training that round can take minutes
    before rank 0 prints its first line, and a bar (or a line every few seconds) says
    the job is alive meanwhile. A thread looks at the run directory's latest round."""
    first = _latest_round(runs)
    done = threading.Event()
    with track("trainers: loading the partitions and the first round") as bar:

        def watch() -> None:
            while not done.wait(STARTUP_POLL_S):
                if _latest_round(runs) != first:
                    return
                bar.update(0)  # redraws the bar's clock, or prints the periodic line

        thread = threading.Thread(target=watch, name="asepr-train-startup", daemon=True)
        thread.start()
        try:
            yield
        finally:
            done.set()
            thread.join()


def _latest_round(runs: RunDir) -> int | None:
    """The run directory's latest complete round; None also while it cannot be read."""
    try:
        return runs.latest_round()
    except (AseprError, OSError):
        return None


def _missing_directories(path: Path) -> list[Path]:
    """``path`` and those of its parents that do not exist yet, innermost first."""
    missing = []
    while not path.exists() and path != path.parent:
        missing.append(path)
        path = path.parent
    return missing


def _elastic_launch(trainer_args: Sequence[str], nproc: int, monitor_interval: float, *,
                    elastic: Elastic | None = None, max_restarts: int = 0, runs: RunDir | None = None) -> None:
    """``python -P -m asepr.training.main *trainer_args`` as ``nproc`` ranks under an elastic agent
    (this machine alone, or one of ``elastic``'s machines)."""
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.launcher.api import LaunchConfig, elastic_launch

    if elastic is None:
        elastic = Elastic(1, 1, f"127.0.0.1:{_free_port()}", f"asepr-{uuid.uuid4().hex[:8]}")
    config = LaunchConfig(
        min_nodes=elastic.min_nodes, max_nodes=elastic.max_nodes, nproc_per_node=nproc, run_id=elastic.run_id,
        rdzv_backend="c10d", rdzv_endpoint=elastic.endpoint, rdzv_configs=dict(elastic.conf),
        max_restarts=max_restarts, monitor_interval=monitor_interval, start_method="spawn",
    )
    try:
        # -P: the working directory stays off sys.path, so a user's own folders there cannot
        # shadow the package
        elastic_launch(config, sys.executable)("-u", "-P", "-m", "asepr.training.main", *trainer_args)
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
                f"see the rank's error above; {rerun_advice(runs)}",
            )
        ) from None


def rerun_advice(runs: RunDir | None) -> str:
    """How to go on after a failed job: ``--resume`` only when a round is complete (a resume
    without one is refused); otherwise the same command, with ``--overwrite`` where it
    would refuse the unfinished checkpoints the job left."""
    if runs is None:
        return "rerun the same command with --resume to continue from the last complete round."
    latest = _latest_round(runs)
    if latest is not None:
        return f"rerun the same command with --resume to continue from round {latest + 1}, the last complete one."
    try:
        left = runs.previous_run()
    except (AseprError, OSError):
        left = []
    if left:
        return (f"no round was complete, so there is nothing to resume; rerun the same command with --overwrite "
                f"(it deletes only this job's {' and '.join(left)}).")
    return "no round was complete, so there is nothing to resume; rerun the same command."
