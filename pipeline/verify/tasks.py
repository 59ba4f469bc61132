"""The verifier's parallel reads: shards split into runs of about equal bytes, and tasks on
a thread pool whose results come back in order, each failure held until the serial order
reaches the check it belongs to (:mod:`asepr.pipeline.verify.output`)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from asepr.storage.locations.fs import fingerprint
from asepr.storage.progress import current

__all__ = ["Failed", "edge_runs", "hash_shards", "run_tasks", "value_of"]


def edge_runs(shards: list, runs: int) -> list[list]:
    """Contiguous runs of shards of about equal bytes, in stream order."""
    sizes = [max(1, int(s.size or 0)) for s in shards]
    total = sum(sizes)
    out: list[list] = [[]]
    done = 0
    for shard, size in zip(shards, sizes):
        if out[-1] and len(out) < runs and done >= total * len(out) / runs:
            out.append([])
        out[-1].append(shard)
        done += size
    return [run for run in out if run]


def hash_shards(shards: list) -> list[str]:
    return [fingerprint(s) for s in shards]


@dataclass(frozen=True)
class Failed:
    """A task's exception, raised again where a serial run would have met it."""

    error: Exception


def value_of(result: Any) -> Any:
    if isinstance(result, Failed):
        raise result.error
    return result


def run_tasks(workers: int, tasks: list[tuple[str, Callable, tuple]],
               timings: dict[str, float]) -> list[Any]:
    """Run ``(kind, fn, args)`` tasks on ``workers`` threads, in order; results in order,
    a task's exception as :class:`Failed` (the caller raises it where the check it
    belongs to comes). ``timings[kind]`` sums each kind's seconds; progress counts tasks."""
    lock, bar = threading.Lock(), current()
    bar.expect(len(tasks))

    def timed(kind: str, fn: Callable, args: tuple) -> Any:
        start = time.perf_counter()
        try:
            return fn(*args)
        except Exception as exc:  # noqa: BLE001 - handed back, raised in the serial order
            return Failed(exc)
        finally:
            with lock:
                timings[kind] = timings.get(kind, 0.0) + time.perf_counter() - start
            bar.update(1)

    with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="asepr-verify") as pool:
        futures: list[Future] = [pool.submit(timed, kind, fn, args) for kind, fn, args in tasks]
        return [f.result() for f in futures]
