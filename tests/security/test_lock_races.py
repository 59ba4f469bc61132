"""Races on the output lock: stale-lock takeovers by several processes at once.

A lock whose record names a dead process is taken over by exactly one contender, every
round, and the others are refused with a message that names the holder. Two ingests
started together on an output with such a lock either commit one after the other or
one of them is refused; either way the output verifies and every ingest that returned
a manifest has its edges in the committed generation.

The default suite runs a few rounds of each race; ``-m slow`` runs the full counts.
"""

from __future__ import annotations

import json
import multiprocessing as mp
import queue
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from asepr.storage.partitions.manifest import LOCK_NAME, read_manifest
from tests.security import increments, race_workers
from tests.security.race_workers import BARRIER_TIMEOUT_S


def dead_pid() -> int:
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    return gone.pid


def write_stale_lock(directory: Path) -> int:
    """A lock record of a process that is gone (as a killed writer leaves it); returns its pid."""
    pid = dead_pid()
    (directory / LOCK_NAME).write_text(json.dumps({
        "pid": pid, "host": socket.gethostname(), "started": 1.0,
        "acquired": "2026-01-01T00:00:00", "command": "asepr ingest ...", "token": "stale",
    }))
    return pid


# --- four processes take over one stale lock ---------------------------------------------------


def _race_takeovers(directory: Path, rounds: int, contenders: int = 4) -> None:
    ctx = mp.get_context("spawn")
    start, attempted, released = (ctx.Barrier(contenders + 1) for _ in range(3))
    results = ctx.Queue()
    procs = [ctx.Process(target=race_workers.contender, args=(str(directory), rounds, start, attempted, released, results))
             for _ in range(contenders)]
    for p in procs:
        p.start()
    try:
        for r in range(rounds):
            write_stale_lock(directory)
            start.wait(BARRIER_TIMEOUT_S)
            attempted.wait(BARRIER_TIMEOUT_S)
            got = [results.get(timeout=BARRIER_TIMEOUT_S) for _ in range(contenders)]
            holders = [pid for rr, pid, held, _ in got if held]
            assert all(rr == r for rr, *_ in got)
            assert len(holders) == 1, f"round {r}: {len(holders)} processes hold the lock"
            for _, pid, held, message in got:
                if not held:
                    assert f"pid {holders[0]} on host {socket.gethostname()}" in message, message
            released.wait(BARRIER_TIMEOUT_S)
            assert not (directory / LOCK_NAME).exists()
    finally:
        for barrier in (start, attempted, released):
            barrier.abort()  # a failed round must not leave the contenders waiting
        for p in procs:
            p.join(timeout=30)
            if p.is_alive():
                p.kill()


def test_four_processes_taking_over_a_stale_lock_leave_one_holder(tmp_path):
    _race_takeovers(tmp_path, rounds=5)


@pytest.mark.slow
def test_four_processes_taking_over_a_stale_lock_leave_one_holder_50_rounds(tmp_path):
    _race_takeovers(tmp_path, rounds=50)


# --- two ingests on an output with a stale lock -----------------------------------------------


@pytest.fixture(scope="module")
def tiny_output(tmp_path_factory) -> dict:
    """A tiny partitioned graph (k = 2) and two new edge shards for it."""
    return increments.tiny_output(tmp_path_factory.mktemp("tiny"))


def _race_ingests(tiny: dict, workdir: Path, rounds: int) -> None:
    from asepr.pipeline import verify_output
    from asepr.storage.locations.fs import discover_shards, fingerprint

    ctx = mp.get_context("spawn")
    start, done = ctx.Barrier(3), ctx.Barrier(3)
    jobs, results = ctx.Queue(), ctx.Queue()
    procs = [ctx.Process(target=race_workers.ingester, args=(rounds, jobs, start, done, results)) for _ in range(2)]
    for p in procs:
        p.start()
    sha = {e: fingerprint(discover_shards(e, what="edges")[0]) for e in tiny["edges"]}
    try:
        for r in range(rounds):
            out = workdir / f"round-{r}"
            shutil.copytree(tiny["out"], out)
            stale = write_stale_lock(out)
            for edges in tiny["edges"]:
                jobs.put((str(out), edges))
            start.wait(BARRIER_TIMEOUT_S)
            done.wait(BARRIER_TIMEOUT_S)
            got = []
            for _ in range(2):
                try:
                    got.append(results.get(timeout=BARRIER_TIMEOUT_S))
                except queue.Empty:
                    pytest.fail(f"round {r}: an ingest process reported nothing")
            committed = [(edges, gen) for edges, gen, _ in got if gen is not None]
            assert committed, f"round {r}: no ingest committed: {got}"
            for _, gen, message in got:
                if gen is None:
                    assert "a lock held by pid" in message and f"pid {stale} " not in message, message
            manifest = read_manifest(out)
            assert manifest["generation"] == 1 + len(committed)
            stored = {s["sha256"] for inc in manifest.get("increments", []) for s in inc["edges"]}
            assert stored == {sha[edges] for edges, _ in committed}, f"round {r}: {got}"
            report = verify_output(out)
            assert report.ok, f"round {r}: {report.summary()}"
            shutil.rmtree(out)
    finally:
        for barrier in (start, done):
            barrier.abort()
        for p in procs:
            p.join(timeout=60)
            if p.is_alive():
                p.kill()


def test_two_ingests_on_a_stale_lock_commit_one_after_the_other_or_one_is_refused(tiny_output, tmp_path):
    _race_ingests(tiny_output, tmp_path, rounds=5)


@pytest.mark.slow
def test_two_ingests_on_a_stale_lock_commit_one_after_the_other_or_one_is_refused_20_rounds(tiny_output,
                                                                                              tmp_path):
    _race_ingests(tiny_output, tmp_path, rounds=20)
