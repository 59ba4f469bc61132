"""Processes of the race tests (a module of its own, light to import in a spawned child)."""

from __future__ import annotations

import os
import threading

BARRIER_TIMEOUT_S = 120


def contender(directory: str, rounds: int, start, attempted, released, results) -> None:
    from asepr.storage.commit.lock import OutputLock
    from asepr.storage.errors import StoreError

    for r in range(rounds):
        try:
            start.wait(BARRIER_TIMEOUT_S)
        except threading.BrokenBarrierError:
            return  # the test failed and stopped the race
        lock = OutputLock(directory)
        try:
            lock.acquire()
            results.put((r, os.getpid(), True, ""))
        except StoreError as exc:
            results.put((r, os.getpid(), False, str(exc)))
        try:
            attempted.wait(BARRIER_TIMEOUT_S)
        finally:
            lock.release()
        released.wait(BARRIER_TIMEOUT_S)


def ingester(rounds: int, jobs, start, done, results) -> None:
    from asepr.pipeline.increment.ingest import ingest
    from asepr.storage.errors import StoreError

    for _ in range(rounds):
        out, edges = jobs.get(timeout=BARRIER_TIMEOUT_S)
        start.wait(BARRIER_TIMEOUT_S)
        try:
            manifest = ingest(out, edges)
            results.put((edges, manifest["generation"], ""))
        except StoreError as exc:
            results.put((edges, None, str(exc)))
        done.wait(BARRIER_TIMEOUT_S)
