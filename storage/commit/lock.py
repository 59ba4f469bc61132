"""One writer per output directory: an OS lock on a file that names its owner.

``OUT/.asepr.lock`` is held with ``fcntl.flock`` (exclusive, non-blocking) and holds
the owner's pid, host, process start time and command name (``asepr partition``, never
its arguments, which may carry credentials: :mod:`asepr.storage.commit.holder`). The file is
private to its owner (mode 0600): a lock left by a killed writer stays on disk. The kernel decides who
holds it: two processes can never both hold the lock, and a dead holder's lock is
released by the kernel when the process goes. A contender never renames or deletes
the lock file; only the holder removes it, while still holding the lock, when it
releases. A contender that locked a file which was removed meanwhile (it opened it
before the holder released) notices that the path no longer names the file it locked
and starts over on the new one.

A second writer is refused with a message naming the holder's pid, host and start
time. A record left by a writer that is gone (same host, and the pid is dead or now
belongs to a younger process) is taken over with a warning. A record of a live
process that does not hold the OS lock (a writer on another host, where the
filesystem may not share locks between hosts, or an older asepr) is respected: the
run is refused. A lock file that is no asepr lock (not a JSON owner record, a
symbolic link) is refused with a message that names it and says how to clear it.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import logging
import os
import secrets
import socket
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import psutil

from asepr.storage.commit.holder import command_name, holder_command
from asepr.storage.errors import StoreError, format_problem
from asepr.storage.partitions.manifest import LOCK_NAME

if TYPE_CHECKING:
    from typing import Self

__all__ = ["OutputLock", "waiting_file_lock"]

log = logging.getLogger(__name__)

#: How long a refused contender waits for a holder that has just taken the lock to
#: write its record (so the refusal can name it).
_RECORD_WAIT_S = 2.0
#: Attempts at locking a path whose file the holder keeps replacing.
_ATTEMPTS = 100
#: The lock file's mode: its owner's alone.
_MODE = 0o600


def _process_start(pid: int) -> float | None:
    try:
        return psutil.Process(pid).create_time()
    except (psutil.NoSuchProcess, psutil.ZombieProcess):
        return None
    except psutil.AccessDenied:
        return -1.0


def _parse(raw: bytes) -> dict | str | None:
    """The owner record in ``raw``; None when empty; a description when it is no asepr lock."""
    if not raw.strip():
        return None
    try:
        owner = json.loads(raw)
    except (ValueError, RecursionError):
        return f"content that is not JSON ({raw[:40]!r})"
    if not isinstance(owner, dict) or not isinstance(owner.get("pid"), int) or not owner.get("host"):
        return f"JSON without the owner's pid and host ({str(owner)[:60]})"
    return owner


class OutputLock:
    """An exclusive OS lock on an output directory that names its holder (a context manager).

    Parameters
    ----------
    directory
        The (local) output directory; it must exist.
    what
        What the directory is, for the message that refuses a second writer
        (``"output"``, ``"run directory"``).
    """

    def __init__(self, directory: str | Path, *, what: str = "output"):
        self.directory = Path(directory)
        self.what = what
        self.path = self.directory / LOCK_NAME
        self.token = secrets.token_hex(8)
        self.held = False
        self._fd: int | None = None

    def _owner_record(self) -> dict:
        return {
            "pid": os.getpid(),
            "host": socket.gethostname(),
            "started": _process_start(os.getpid()),
            "acquired": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            "command": command_name(),
            "token": self.token,
        }

    def _read(self) -> dict | str | None:
        """The owner record at the path; None when there is none; a description when it is no asepr lock."""
        try:
            fd = os.open(self.path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
        except FileNotFoundError:
            return None
        except OSError as exc:
            return "a symbolic link" if self.path.is_symlink() else f"an unreadable file ({exc.strerror or exc})"
        try:
            return _parse(os.pread(fd, 1 << 16, 0))
        except OSError as exc:
            return f"an unreadable file ({exc.strerror or exc})"
        finally:
            os.close(fd)

    def _is_stale(self, owner: dict) -> bool:
        if owner.get("host") != socket.gethostname():
            return False
        pid = owner.get("pid")
        if not isinstance(pid, int):
            return False
        started = _process_start(pid)
        if started is None:
            return True
        recorded = owner.get("started")
        # The pid was reused by a process that started after the owner.
        return isinstance(recorded, (int, float)) and started > 0 and abs(started - recorded) > 1.0

    def _open(self) -> int:
        try:
            return os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, _MODE)
        except OSError as exc:
            if exc.errno == errno.ELOOP or self.path.is_symlink():
                raise StoreError(self._foreign_message("a symbolic link")) from exc
            raise StoreError(
                format_problem(
                    f"output directory {self.directory}",
                    "a writable directory",
                    f"{exc.strerror or exc}",
                    "choose an output path you can write to, or fix its permissions.",
                )
            ) from exc

    def _still_at_path(self, fd: int) -> bool:
        """Whether the path still names the file ``fd`` locked (the holder removes it on release)."""
        try:
            now = os.stat(self.path, follow_symlinks=False)
        except FileNotFoundError:
            return False
        mine = os.fstat(fd)
        return (now.st_dev, now.st_ino) == (mine.st_dev, mine.st_ino)

    def acquire(self) -> Self:
        for _ in range(_ATTEMPTS):
            fd = self._open()
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(fd)
                raise StoreError(self._refusal()) from None
            except OSError:
                os.close(fd)
                raise
            if not self._still_at_path(fd):
                self._unlock(fd)
                continue
            try:
                self._claim(fd)
            except BaseException:
                self._unlock(fd)
                raise
            self._fd = fd
            self.held = True
            return self
        raise StoreError(self._refusal())

    def _claim(self, fd: int) -> None:
        """With the OS lock held on ``fd``: check the record left there, then write ours."""
        owner = _parse(os.pread(fd, 1 << 16, 0))
        if isinstance(owner, str):
            raise StoreError(self._foreign_message(owner))
        if isinstance(owner, dict):
            if not self._is_stale(owner):
                raise StoreError(self._held_message(owner))
            log.warning(
                "taking over the stale lock %s of pid %s on host %s (that process is gone)",
                self.path, owner.get("pid"), owner.get("host"),
            )
        record = json.dumps(self._owner_record(), indent=2).encode()
        with contextlib.suppress(OSError):  # another user's file: theirs to restrict
            os.fchmod(fd, _MODE)  # a lock file left by an older asepr was world-readable
        os.ftruncate(fd, 0)
        os.pwrite(fd, record, 0)

    @staticmethod
    def _unlock(fd: int) -> None:
        try:
            fcntl.flock(fd, fcntl.LOCK_UN)
        finally:
            os.close(fd)

    def _refusal(self) -> str:
        """The message for a contender: the holder's record, waited for while the holder writes it."""
        deadline = time.monotonic() + _RECORD_WAIT_S
        owner = self._read()
        # Empty, or still the record of a writer that is gone: the holder is writing its own.
        while (owner is None or isinstance(owner, dict) and self._is_stale(owner)) and time.monotonic() < deadline:
            time.sleep(0.02)
            owner = self._read()
        if isinstance(owner, str):
            return self._foreign_message(owner)
        return self._held_message(owner or {})

    def _foreign_message(self, found: str) -> str:
        return format_problem(
            f"lock file {self.path}",
            "an asepr lock (a JSON record of the writer's pid, host and command)",
            f"{found}: it is unreadable or not an asepr lock, so its owner cannot be checked",
            f"once no asepr process is writing to {self.directory}, remove {self.path} and rerun.",
        )

    def _held_message(self, owner: dict) -> str:
        pid, host = owner.get("pid", "?"), owner.get("host", "?")
        since = owner.get("acquired", "an unknown time")
        started = owner.get("started")
        if isinstance(started, (int, float)) and started > 0:
            process = f"pid {pid} on host {host} (started {time.strftime('%Y-%m-%dT%H:%M:%S%z', time.localtime(started))})"
        else:
            process = f"pid {pid} on host {host}"
        process += f", command {holder_command(owner.get('command'))}"
        return format_problem(
            f"{self.what} {self.directory}",
            "no other writer",
            f"a lock held by {process} since {since} ({self.path})",
            "wait for that run to finish; if it is no longer running (e.g. on another host), "
            f"delete {self.path} and rerun.",
        )

    def release(self) -> None:
        if not self.held:
            return
        fd, self._fd = self._fd, None
        self.held = False
        if fd is None:
            return
        try:
            if self._still_at_path(fd):
                self.path.unlink(missing_ok=True)  # removed while still locked: see the module docstring
        finally:
            self._unlock(fd)

    def __enter__(self) -> Self:
        return self.acquire()

    def __exit__(self, *exc) -> None:
        self.release()


@contextlib.contextmanager
def waiting_file_lock(path: str | Path, *, what: str) -> Iterator[None]:
    """Hold an exclusive OS lock on the local file ``path`` for the block, waiting for it.

    For a short read-modify-write of a shared file (an input's id map, which ingests
    into different outputs of one input update): the writers take turns rather than
    refuse each other. The lock file is created private (mode 0600) and never removed
    (removing it would let a waiting writer lock a file nobody else sees); the kernel
    releases the lock of a writer that dies.

    Raises
    ------
    StoreError
        The lock file cannot be created (naming it and ``what`` it guards), or is a
        symbolic link.
    """
    path = Path(path)
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, _MODE)
    except OSError as exc:
        found = "a symbolic link" if exc.errno == errno.ELOOP or path.is_symlink() else f"{exc.strerror or exc}"
        raise StoreError(format_problem(
            f"lock file {path} (of {what})", "a lock file asepr can create and write", found,
            f"make the directory {path.parent} writable for this user, or remove {path} if it is a link.",
        )) from exc
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            log.warning("waiting for %s: another asepr process holds %s", what, path)
            fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing the last descriptor releases the lock
