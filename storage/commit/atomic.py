"""Atomic outputs: files and directories appear complete or not at all.

Files: :func:`write_bytes_atomic` (and :func:`write_json_atomic`, :func:`save_npy_atomic`,
:func:`atomic_file`) write into a private temporary file beside the target, created with
``O_EXCL | O_NOFOLLOW`` under an unpredictable name (:func:`tempfile.mkstemp`), then
``fsync`` it, rename it over the target and ``fsync`` the directory. A symbolic link where
the file is expected is refused, never followed. A reader therefore sees the old file or
the new one, and a planted link can neither redirect the write nor survive it.

Directories: :func:`staged_output` writes under a hidden staging name and renames the
directory into place when complete. A killed or failed run leaves at most a hidden
``.NAME.partial-*`` directory beside the output, never a directory named like the
output; leftovers from a SIGKILL are removed by the next run that stages the same
output (:func:`_sweep_stale`).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import secrets
import socket
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

import fsspec
import numpy as np

from asepr.storage.errors import StoreError, format_problem
from asepr.storage.inputs.npy import save_npy
from asepr.storage.locations.fs import url_of

__all__ = [
    "atomic_file",
    "dumps_json",
    "pid_alive",
    "refuse_symlink",
    "save_npy_atomic",
    "staged_output",
    "write_bytes_atomic",
    "write_json_atomic",
]

log = logging.getLogger(__name__)


def _read_umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


#: Files are created private (mode 0600) and given the mode an ``open()`` would give them
#: just before they are renamed into place.
_FILE_MODE = 0o666 & ~_read_umask()


def _parent_and_name(path: str) -> tuple[str, str]:
    path = path.rstrip("/")
    parent, _, name = path.rpartition("/")
    return parent or ("/" if path.startswith("/") else ""), name


def _sibling(path: str, label: str) -> str:
    parent, name = _parent_and_name(path)
    token = f"{socket.gethostname()}-{os.getpid()}-{secrets.token_hex(4)}"
    stem = f".{name}.{label}-{token}"
    return f"{parent.rstrip('/')}/{stem}" if parent else stem


def pid_alive(pid: int) -> bool:
    """Whether a process ``pid`` of this host is alive (one we may not signal counts as alive)."""
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
        if owner_host == host and pid_text.isdigit() and not pid_alive(int(pid_text)):
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




def _json_default(value: Any) -> Any:
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, Path):
        return str(value)
    raise TypeError(f"{type(value).__name__} is not JSON serialisable")


def dumps_json(obj: Any) -> bytes:
    """Canonical JSON bytes (sorted keys, numpy scalars as Python numbers)."""
    return (json.dumps(obj, indent=2, sort_keys=True, default=_json_default) + "\n").encode()


def refuse_symlink(path: str | Path) -> None:
    """Raise :class:`StoreError` naming ``path`` when it is a symbolic link.

    Parameters
    ----------
    path
        A local path where asepr is about to write or replace a file.
    """
    path = Path(path)
    if path.is_symlink():
        raise StoreError(
            format_problem(
                f"file {path}",
                "a regular file or directory (or nothing yet)",
                f"a symbolic link to {os.readlink(path)}",
                "remove the link; asepr never writes through a symbolic link, which could "
                "redirect its output outside the directory.",
            )
        )


def _fsync_directory(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


@contextlib.contextmanager
def atomic_file(path: str | Path, *, durable: bool = True) -> Iterator[IO[bytes]]:
    """Yield a binary file that replaces the local file ``path`` when the block succeeds.

    The file is a fresh private temporary beside ``path`` (``O_EXCL | O_NOFOLLOW``, an
    unpredictable name). On success it is flushed, given the usual file mode, fsynced
    (``durable``), renamed over ``path``, and the directory is fsynced (``durable``). On
    any exception it is removed and ``path`` is left as it was.

    Parameters
    ----------
    path
        The local file to write.
    durable
        fsync the file and its directory, so a power cut leaves the old or the new
        file, never an empty one. Scratch files that a rerun recreates may skip it.

    Raises
    ------
    StoreError
        ``path`` is a symbolic link.
    OSError
        The write failed (a full disk, no permission), naming ``path`` when the
        operating system did not name a file.
    """
    target = Path(path)
    refuse_symlink(target)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            yield fh
            fh.flush()
            os.fchmod(fh.fileno(), _FILE_MODE)
            if durable:
                os.fsync(fh.fileno())
        os.replace(tmp, target)
    except BaseException as exc:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        if isinstance(exc, OSError) and exc.errno and exc.filename is None:
            # A short write (a full disk) names no file: name the one being written.
            raise OSError(exc.errno, exc.strerror, str(target)) from exc
        raise
    if durable:
        _fsync_directory(target.parent)


def _is_local(fs: fsspec.AbstractFileSystem | None) -> bool:
    if fs is None:
        return True
    protocol = fs.protocol if isinstance(fs.protocol, str) else fs.protocol[0]
    return protocol in ("file", "local")


def write_bytes_atomic(
    path: str | Path, data: bytes, *, fs: fsspec.AbstractFileSystem | None = None, durable: bool = True
) -> None:
    """Replace the file ``path`` with ``data`` atomically.

    Parameters
    ----------
    path
        The file to write (a local path, or a path on ``fs``).
    data
        Its new content.
    fs
        The filesystem of ``path``; None (or a local filesystem) writes locally through
        :func:`atomic_file`. On another filesystem (an object store) the bytes go out
        in one PUT (``fs.pipe``): an object store replaces an object atomically, so a
        reader gets the old bytes or the new ones, and there is no rename to make
        (``mv`` is a copy and a delete there, two requests that a crash can split).
    durable
        Local only: fsync the file and its directory (see :func:`atomic_file`).

    Raises
    ------
    StoreError
        ``path`` is a local symbolic link.
    """
    if _is_local(fs):
        with atomic_file(path, durable=durable) as fh:
            fh.write(data)
        return
    fs.pipe(str(path), data)


def write_json_atomic(path: str | Path, obj: Any, *, fs: fsspec.AbstractFileSystem | None = None) -> None:
    """Replace the file ``path`` with ``obj`` as canonical JSON (:func:`dumps_json`), atomically."""
    write_bytes_atomic(path, dumps_json(obj), fs=fs)


def save_npy_atomic(path: str | Path, array: np.ndarray, *, durable: bool = False) -> None:
    """Replace the local ``.npy`` file ``path`` with ``array`` atomically.

    Parameters
    ----------
    path
        The file (its name is kept as given; no ``.npy`` is appended).
    array
        What to save (:func:`numpy.save` format).
    durable
        fsync the file and its directory. Off by default: the ``.npy`` files of a run
        are scratch files in its staging directory, which a rerun checks or recreates.
    """
    with atomic_file(path, durable=durable) as fh:
        save_npy(fh, array)
