"""Run the write stages as Dask tasks, timed, with an optional progress bar.

Every stage of a write (route, finalize, gather, rebuild) is a list of calls of one
function, one Dask task per shard or partition. :func:`run_tasks` runs them on a
``distributed.Client`` or, without one, on local threads (a failed stage's
threads are joined before its error surfaces); :func:`timed` records a
stage's wall time (and the workers' peak memory) in the run's ``timings``.
"""

from __future__ import annotations

import contextlib
import logging
import os
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor, as_completed
from typing import Any

import dask

from asepr.storage.progress import current
from asepr.storage.resources import peak_rss_bytes, stage

__all__ = ["Progress", "bar_for", "run_tasks", "task_slots", "timed", "worker_peak_rss"]

log = logging.getLogger(__name__)

#: ``progress(stage_name, total_tasks)`` returns a context manager with ``update(n)``
#: (a ``tqdm`` bar fits): a library caller's own bar per stage. Without one, a stage's
#: tasks count into the stage's bar of :mod:`asepr.storage.progress`, which the command line draws.
Progress = Callable[[str, int], Any]


class _StageTasks:
    """The tasks of a stage, counted into its :mod:`asepr.storage.progress` bar."""

    def __init__(self, total: int):
        self._bar = current()
        self._bar.expect(total)

    def __enter__(self) -> _StageTasks:
        return self

    def __exit__(self, *exc) -> bool:
        return False

    def update(self, n: int = 1) -> None:
        """Count ``n`` finished tasks."""
        self._bar.update(n)


def bar_for(progress: Progress | None, name: str, total: int):
    """``progress(name, total)``, or the stage's own bar (:func:`asepr.storage.progress.current`)
    when ``progress`` is None."""
    return progress(name, total) if progress else _StageTasks(total)


def task_slots(client) -> int:
    """How many tasks :func:`run_tasks` runs at once: the local threads (dask's
    ``num_workers``, else the CPU count) or the client's workers."""
    if client is None:
        return dask.config.get("num_workers", None) or os.cpu_count() or 1
    return max(1, len(client.scheduler_info().get("workers", {})))


def _run_local(fn, calls: list[tuple[tuple, dict]], bar, prefix: str) -> list:
    """The calls on local threads (as many as dask's threaded scheduler would use).

    On a failure the pending calls are cancelled and the running ones are waited for
    before the error propagates, so no thread of a failed stage is still writing into
    the staging directory when the caller cleans up or reruns.
    """
    workers = min(len(calls), task_slots(None))
    with ThreadPoolExecutor(max_workers=workers, thread_name_prefix=prefix) as pool:
        futures = [pool.submit(fn, *args, **kwargs) for args, kwargs in calls]
        try:
            for future in as_completed(futures):
                future.result()
                bar.update(1)
        except BaseException:
            for future in futures:
                future.cancel()
            raise  # leaving the with-block waits for the calls still running
    return [future.result() for future in futures]


def run_tasks(name: str, fn, calls: list[tuple[tuple, dict]], client, progress: Progress | None) -> list:
    """Run ``fn(*args, **kwargs)`` for each call as one Dask task each.

    Parameters
    ----------
    name
        The stage, for the task keys and the progress bar.
    fn, calls
        The function and its ``(args, kwargs)`` per task.
    client
        A ``distributed.Client``; None runs the tasks on local threads.
    progress
        Draws one bar for the stage (see :data:`Progress`).

    Returns
    -------
    list
        The results, in the order of ``calls``.
    """
    if not calls:
        return []
    prefix = f"asepr-{name.replace(' ', '-')}-{os.urandom(6).hex()}"
    with bar_for(progress, name, len(calls)) as bar:
        if client is None:
            return _run_local(fn, calls, bar, prefix)
        import distributed

        tasks = [
            dask.delayed(fn, pure=False)(*args, **kwargs, dask_key_name=f"{prefix}-{i}")
            for i, (args, kwargs) in enumerate(calls)
        ]

        futures = client.compute(tasks)
        for _ in distributed.as_completed(futures, raise_errors=False):
            bar.update(1)
        return client.gather(futures)


def worker_peak_rss(client) -> dict[str, int]:
    """Peak resident memory (bytes) per Dask worker; empty without a client or on error."""
    if client is None:
        return {}
    try:
        return {k: int(v) for k, v in client.run(peak_rss_bytes).items()}
    except Exception:  # noqa: BLE001 - diagnostics only
        return {}


@contextlib.contextmanager
def timed(name: str, timings: dict[str, float], client) -> Iterator[dict[str, Any]]:
    """Log stage ``name`` and add its wall time to ``timings[name]``.

    Yields the stage's info dict (:func:`asepr.storage.resources.stage`); the workers' peak
    memory is added to it when a client is given.
    """
    start = time.perf_counter()
    with stage(name, log) as info:
        yield info
        workers = worker_peak_rss(client)
        if workers:
            info["workers_peak_rss_mib"] = round(max(workers.values()) / 2**20)
    timings[name] = timings.get(name, 0.0) + time.perf_counter() - start
