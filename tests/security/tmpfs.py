"""A small tmpfs mounted for one test: a disk that fills up, or a read-only filesystem.

Mounting needs root (or CAP_SYS_ADMIN); where the test process may not mount, the test
is skipped with a message saying so.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest


@contextlib.contextmanager
def mounted_tmpfs(directory: Path, size: str = "4m", *, read_only: bool = False) -> Iterator[Path]:
    """Mount a tmpfs of ``size`` on ``directory`` (created) for the block, then unmount it."""
    directory.mkdir(parents=True, exist_ok=True)
    options = f"size={size}" + (",ro" if read_only else "")
    try:
        mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(directory)],
                                 capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError) as exc:
        pytest.skip(f"cannot mount a tmpfs here ({exc}): the disk-full and read-only tests need "
                    "root or CAP_SYS_ADMIN")
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here ({mounted.stderr.strip()}): the disk-full and read-only "
                    "tests need root or CAP_SYS_ADMIN")
    try:
        yield directory
    finally:
        subprocess.run(["umount", "-l", str(directory)], capture_output=True, timeout=30)


def fill(directory: Path, keep: int = 0) -> None:
    """Fill the filesystem of ``directory`` up to ``keep`` free bytes (one filler file)."""
    stat = os.statvfs(directory)
    free = stat.f_bavail * stat.f_frsize - keep
    if free > 0:
        with open(directory / ".filler", "wb") as fh:
            with contextlib.suppress(OSError):
                fh.write(b"\0" * free)
