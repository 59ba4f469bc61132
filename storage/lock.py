"""One writer per output directory: a lock file that names its owner.

``OUT/.asepr.lock`` is created atomically (written under a private name, then
hard-linked into place, which fails if the lock exists) and holds the owner's pid,
host, process start time and command line. A second writer is refused with a message
naming that pid and host. A lock whose owner is gone (same host, and the pid is dead
or now belongs to a younger process) is stale: it is taken over with a warning. A lock
file that is no asepr lock (unreadable, not a JSON owner record, a symbolic link) is
refused with a message that names it and says how to clear it.
"""

from __future__ import annotations

import json
import logging
import os
import secrets
import socket
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

import psutil

from storage.errors import StoreError, format_problem
from storage.manifest import LOCK_NAME

if TYPE_CHECKING:
    from typing import Self

__all__ = ["OutputLock"]

log = logging.getLogger(__name__)


def _process_start(pid: int) -> float | None:
    try:
        return psutil.Process(pid).create_time()
    except (psutil.NoSuchProcess, psutil.ZombieProcess):
        return None
    except psutil.AccessDenied:
        return -1.0


class OutputLock:
    """An exclusive, stale-aware lock on an output directory (a context manager).

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

    def _owner_record(self) -> dict:
        return {
            "pid": os.getpid(),
            "host": socket.gethostname(),
            "started": _process_start(os.getpid()),
            "acquired": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            "command": " ".join(sys.argv),
            "token": self.token,
        }

    def _read(self) -> dict | str | None:
        """The owner record; None when there is no lock; a description when it is no asepr lock."""
        try:
            fd = os.open(self.path, os.O_RDONLY | os.O_NOFOLLOW)
        except FileNotFoundError:
            return None
        except OSError as exc:
            return "a symbolic link" if self.path.is_symlink() else f"an unreadable file ({exc.strerror or exc})"
        with os.fdopen(fd, "rb") as fh:
            try:
                raw = fh.read(1 << 16)
            except OSError as exc:
                return f"an unreadable file ({exc.strerror or exc})"
        try:
            owner = json.loads(raw)
        except ValueError:
            return f"content that is not JSON ({raw[:40]!r})"
        if not isinstance(owner, dict) or not isinstance(owner.get("pid"), int) or not owner.get("host"):
            return f"JSON without the owner's pid and host ({str(owner)[:60]})"
        return owner

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

    def acquire(self) -> Self:
        record = json.dumps(self._owner_record(), indent=2).encode()
        private = self.directory / f"{LOCK_NAME}.{self.token}"
        try:
            fd = os.open(private, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o666)
            with os.fdopen(fd, "wb") as fh:
                fh.write(record)
        except OSError as exc:
            raise StoreError(
                format_problem(
                    f"output directory {self.directory}",
                    "a writable directory",
                    f"{exc.strerror or exc}",
                    "choose an output path you can write to, or fix its permissions.",
                )
            ) from exc
        try:
            for _ in range(3):
                try:
                    os.link(private, self.path)
                    self.held = True
                    return self
                except FileExistsError:
                    owner = self._read()
                    if owner is None:
                        continue  # released between our attempt and the read
                    if isinstance(owner, str):
                        raise StoreError(self._foreign_message(owner))
                    if self._is_stale(owner):
                        log.warning(
                            "taking over the stale lock %s of pid %s on host %s (that process is gone)",
                            self.path, owner.get("pid"), owner.get("host"),
                        )
                        try:
                            os.rename(self.path, self.directory / f"{LOCK_NAME}.stale-{self.token}")
                            os.unlink(self.directory / f"{LOCK_NAME}.stale-{self.token}")
                        except FileNotFoundError:
                            pass  # another writer took it over first; retry
                        continue
                    raise StoreError(self._held_message(owner))
            owner = self._read()
            raise StoreError(self._foreign_message(owner) if isinstance(owner, str)
                             else self._held_message(owner or {}))
        finally:
            private.unlink(missing_ok=True)

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
        return format_problem(
            f"{self.what} {self.directory}",
            "no other writer",
            f"a lock held by pid {pid} on host {host} since {since} ({self.path})",
            "wait for that run to finish; if it is no longer running (e.g. on another host), "
            f"delete {self.path} and rerun.",
        )

    def release(self) -> None:
        if not self.held:
            return
        owner = self._read()
        if isinstance(owner, dict) and owner.get("token") == self.token:
            self.path.unlink(missing_ok=True)
        self.held = False

    def __enter__(self) -> Self:
        return self.acquire()

    def __exit__(self, *exc) -> None:
        self.release()
