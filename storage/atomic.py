"""Atomic directory outputs: write under a hidden staging name, rename when complete.

A killed or failed run leaves at most a hidden ``.NAME.partial-*`` directory beside
the output, never a directory named like the output. :func:`staged_output` removes
its staging directory on any exception; leftovers from a SIGKILL are removed by the
next run that stages the same output (:func:`_sweep_stale`).
"""

from __future__ import annotations

import contextlib
import logging
import os
import secrets
import socket
from collections.abc import Iterator

import fsspec

from storage.errors import StoreError, format_problem
from storage.fs import url_of

__all__ = ["staged_output", "write_bytes_atomic"]

log = logging.getLogger(__name__)


def _parent_and_name(path: str) -> tuple[str, str]:
    path = path.rstrip("/")
    parent, _, name = path.rpartition("/")
    return parent or ("/" if path.startswith("/") else ""), name


def _sibling(path: str, label: str) -> str:
    parent, name = _parent_and_name(path)
    token = f"{socket.gethostname()}-{os.getpid()}-{secrets.token_hex(4)}"
    stem = f".{name}.{label}-{token}"
    return f"{parent.rstrip('/')}/{stem}" if parent else stem


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _sweep_stale(fs: fsspec.AbstractFileSystem, path: str) -> None:
    """Remove staging siblings of ``path`` left by dead processes on this host."""
    parent, name = _parent_and_name(path)
    if not parent or not fs.exists(parent):
        return
    prefix = f".{name}."
    host = socket.gethostname()
    for entry in fs.ls(parent, detail=False):
        base = entry.rstrip("/").rpartition("/")[2]
        if not base.startswith(prefix):
            continue
        rest = base[len(prefix):]
        label, _, token = rest.partition("-")
        parts = token.rsplit("-", 2)
        if label not in ("partial", "old") or len(parts) != 3:
            continue
        owner_host, pid_text, _ = parts
        if owner_host == host and pid_text.isdigit() and not _pid_alive(int(pid_text)):
            log.info("removing stale staging directory %s", url_of(fs, entry))
            fs.rm(entry, recursive=True)


@contextlib.contextmanager
def staged_output(
    fs: fsspec.AbstractFileSystem, path: str, *, overwrite: bool = False
) -> Iterator[str]:
    """Yield a staging directory that becomes ``path`` when the block succeeds.

    Parameters
    ----------
    fs, path
        Where the finished output goes.
    overwrite
        Replace an existing output. Without it, an existing output is an error, raised
        before any work is done.
    """
    url = url_of(fs, path)
    if fs.exists(path) and not overwrite:
        raise StoreError(
            format_problem(
                f"output {url}",
                "a path that does not exist yet",
                "an existing file or directory",
                "choose another output path, or pass --overwrite to replace it.",
            )
        )
    _sweep_stale(fs, path)
    staging = _sibling(path, "partial")
    fs.makedirs(staging, exist_ok=True)
    try:
        yield staging
    except BaseException:
        with contextlib.suppress(Exception):
            fs.rm(staging, recursive=True)
        raise
    old = None
    if fs.exists(path):
        old = _sibling(path, "old")
        fs.mv(path, old, recursive=True)
    fs.mv(staging, path, recursive=True)
    if old is not None:
        fs.rm(old, recursive=True)


def write_bytes_atomic(fs: fsspec.AbstractFileSystem, path: str, data: bytes) -> None:
    """Write a file under a temporary name and rename it into place."""
    tmp = _sibling(path, "partial")
    with fs.open(tmp, "wb") as fh:
        fh.write(data)
    fs.mv(tmp, path)
