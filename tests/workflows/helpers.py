"""Crash-test helpers: run a real ``asepr`` command that pauses at a named point."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def spawn_paused(args: list[str], pause_at: str, marker: Path) -> subprocess.Popen:
    """Start ``asepr ARGS`` so that it writes ``marker`` and waits at ``pause_at``."""
    env = dict(os.environ, ASEPR_FAILPOINTS=f"{pause_at}=pause", ASEPR_FAILPOINT_MARKER=str(marker),
               PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    return subprocess.Popen([sys.executable, "-m", "asepr", *args], cwd=REPO, env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


def wait_for_pause(marker: Path, proc: subprocess.Popen, what: str, timeout: float = 180.0) -> None:
    """Block until ``proc`` reaches its pause point (``marker`` exists); fail if it exits first."""
    deadline = time.monotonic() + timeout
    while not marker.exists():
        if proc.poll() is not None:
            raise AssertionError(f"{what} exited ({proc.returncode}) before pausing: {proc.stderr.read().decode()}")
        if time.monotonic() > deadline:
            proc.kill()
            raise AssertionError(f"{what} never reached the pause point")
        time.sleep(0.05)
