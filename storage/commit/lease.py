"""One writer per output on an object store: a lease object taken by timed mutual exclusion.

A remote output (``s3://``, ``gs://``, ``memory://``, ...) has no ``flock``, and an
S3-compatible server need not honour conditional writes (``If-None-Match``): ``rclone
serve s3`` silently overwrites an object that s3fs opens with ``"xb"``. So the writer's
exclusion rests on what every object store does give, a read that sees the last
completed PUT, and on time: Fischer's timed mutual exclusion.

``OUT/.asepr.lease`` holds ``{token, host, pid, command, renewed_at, ttl}``; ``command``
is the command's name only (``asepr partition``, :mod:`asepr.storage.commit.holder`): every
reader of the bucket can read the lease, and a command line may carry credentials. To
take it,
a writer

1. reads the lease; one that is held (not expired, and not left by a dead process on
   this host) refuses the run, naming its holder;
2. writes its own record, measuring with the monotonic clock the time from the read to
   the end of the write; past ``settle / 2`` the attempt is void (another writer may
   have read "free" and written after it) and is made again;
3. waits ``settle`` and reads the lease back: its own token means it holds the lease;
   another token means another writer took it, and the run is refused naming it.

Why this excludes: if A and B both read "free", each wrote within ``settle / 2`` of its
read, and B read before A's write landed, so B's write landed before ``A's write +
settle / 2``, before A reads back; the last write wins both read-backs, and only its
writer goes on. A holder renews the lease on a heartbeat thread (every ``ttl / 3``),
and reads it back before it commits (:meth:`Lease.check_held`), so a writer that lost
its lease (paused past the TTL, say) before that read-back never writes a manifest; one
paused between the read-back and its PUT is fenced only where the store honours
conditional writes (:mod:`asepr.storage.commit.conditional`). An expired lease, or one
whose holder is a dead process on the same host, is taken over with a warning.
Wall-clock time is compared only against the TTL, which is long next to the skew of
synchronised clocks.
"""

from __future__ import annotations

import json
import logging
import math
import os
import secrets
import socket
import threading
import time
from typing import TYPE_CHECKING, Any

from asepr.storage.commit.atomic import pid_alive
from asepr.storage.commit.holder import command_name, holder_command
from asepr.storage.errors import StoreError, format_problem

if TYPE_CHECKING:
    from typing import Self

__all__ = ["LEASE_NAME", "Lease"]

log = logging.getLogger(__name__)

#: The lease object of a remote output's writer.
LEASE_NAME = ".asepr.lease"
#: Seconds a lease stays valid without renewal.
DEFAULT_TTL_S = 120.0
#: Seconds between a writer's claim and its read-back.
DEFAULT_SETTLE_S = 2.0
#: Claims whose read -> write took longer than ``settle / 2`` before the run is refused.
_ATTEMPTS = 5
#: The most bytes of a lease object that are read: a record is a few hundred.
_MAX_RECORD_BYTES = 1 << 14


class Lease:
    """The lease of a remote output's single writer (a context manager).

    Parameters
    ----------
    fs, path
        The filesystem and the path of the lease object (``OUT/.asepr.lease``).
    url
        The lease's URL, for messages.
    ttl, settle
        Seconds a record stays valid without renewal; seconds between a claim and its
        read-back (twice the longest read -> write a claim may take).
    """

    def __init__(self, fs, path: str, url: str, *, ttl: float | None = None,
                 settle: float | None = None, command: str | None = None):
        ttl = DEFAULT_TTL_S if ttl is None else ttl
        settle = DEFAULT_SETTLE_S if settle is None else settle
        if settle <= 0 or ttl <= 2 * settle:
            raise ValueError(f"lease: expected 0 < settle and ttl > 2 * settle, found settle {settle}, ttl {ttl}")
        self.fs, self.path, self.url = fs, path, url
        self.ttl, self.settle = float(ttl), float(settle)
        self.token = secrets.token_hex(16)
        self.command = holder_command(command) if command is not None else command_name()
        self._held = False
        self._lost: str | None = None
        self._stop = threading.Event()
        self._heartbeat: threading.Thread | None = None

    # --- the record --------------------------------------------------------------------

    def _record(self) -> dict[str, Any]:
        return {"token": self.token, "host": socket.gethostname(), "pid": os.getpid(), "command": self.command,
                "renewed_at": time.time(), "ttl": self.ttl}

    def _write(self) -> None:
        self.fs.pipe(self.path, json.dumps(self._record()).encode())

    def read(self) -> dict[str, Any] | None:
        """The lease record; None when there is none.

        Raises
        ------
        StoreError
            The object is not a lease record (it names the object and how to clear it).
        """
        try:
            raw = self.fs.cat_file(self.path, start=0, end=_MAX_RECORD_BYTES + 1)
        except FileNotFoundError:
            return None
        record = _parse_record(raw)
        if record is None:
            raise StoreError(format_problem(
                f"lease {self.url}",
                "a JSON lease record {token: text, host: text, pid: integer, command: text, renewed_at: "
                "seconds, ttl: seconds > 0}",
                f"{raw[:60]!r}" + (" (and more)" if len(raw) > 60 else ""),
                f"make sure no asepr command writes this output, then delete {self.url}."))
        return record

    def _free(self, record: dict[str, Any] | None) -> bool:
        """Whether ``record`` may be taken: none, this writer's own (a void claim of its,
        made again), expired, or a dead process of this host."""
        if record is None or record.get("token") == self.token:
            return True
        if time.time() > record["renewed_at"] + record["ttl"]:
            log.warning("taking over the expired lease %s of %s", self.url, _holder(record))
            return True
        if record["host"] == socket.gethostname() and not pid_alive(record["pid"]):
            log.warning("taking over the lease %s of a process that is gone: %s", self.url, _holder(record))
            return True
        return False

    def _refusal(self, record: dict[str, Any]) -> StoreError:
        return StoreError(format_problem(
            f"output lease {self.url}", "no other writer of this output",
            f"held by {_holder(record)}",
            "wait for that command to finish (or stop it); a lease of a killed writer expires "
            f"{_number(record.get('ttl')) or self.ttl:.0f} s after its last renewal and is then taken over."))

    # --- taking, renewing, releasing ---------------------------------------------------

    def acquire(self) -> Self:
        """Take the lease (Fischer's protocol, see the module) and start the heartbeat.

        Raises
        ------
        StoreError
            Another writer holds it (naming host, pid and command), or every claim took
            longer than ``settle / 2`` (a store too slow for the settle time).
        """
        slowest = 0.0
        for _ in range(_ATTEMPTS):
            start = time.monotonic()
            record = self.read()
            if not self._free(record):
                raise self._refusal(record)
            self._write()
            took = time.monotonic() - start
            if took > self.settle / 2:
                slowest = max(slowest, took)
                log.warning("lease %s: the claim took %.2f s (> settle/2 = %.2f s); claiming again",
                            self.url, took, self.settle / 2)
                continue
            time.sleep(self.settle)
            back = self.read()
            if back is None or back.get("token") != self.token:
                raise self._refusal(back or {"host": "?", "pid": "?", "command": "a writer that released it"})
            self._held = True
            self._heartbeat = threading.Thread(target=self._beat, name="asepr-lease", daemon=True)
            self._heartbeat.start()
            return self
        raise StoreError(format_problem(
            f"output lease {self.url}", f"a read and a write of the lease within {self.settle / 2:.1f} s",
            f"{_ATTEMPTS} claims, the slowest {slowest:.1f} s",
            "check the store's latency, or retry when it is less loaded."))

    def _beat(self) -> None:
        while not self._stop.wait(self.ttl / 3):
            try:
                record = self.read()
                if record is None or record.get("token") != self.token:
                    self._lost = f"held by {_holder(record)}" if record else "deleted"
                    return
                self._write()
            except Exception as exc:  # noqa: BLE001 - a failed renewal is reported at the commit
                log.warning("lease %s: renewal failed (%s)", self.url, exc)

    def check_held(self) -> None:
        """Read the lease back: the writer may commit only while it holds it.

        Raises
        ------
        StoreError
            The lease is gone or another writer's (nothing is committed).
        """
        record = None if self._lost else self.read()
        if self._held and not self._lost and record is not None and record.get("token") == self.token \
                and time.time() <= record["renewed_at"] + record["ttl"]:
            return
        found = self._lost or (f"held by {_holder(record)}" if record else "no lease")
        raise StoreError(format_problem(
            f"output lease {self.url}", "the lease of this writer at its commit", found,
            "this run lost its lease (paused past the TTL, or the lease was removed) and did not commit; "
            "rerun the same command once the other writer is done."))

    def release(self) -> None:
        """Stop the heartbeat and delete the lease if it is still this writer's."""
        self._stop.set()
        if self._heartbeat is not None:
            self._heartbeat.join()
        if self._held:
            self._held = False
            try:
                record = self.read()
                if record is not None and record.get("token") == self.token:
                    self.fs.rm(self.path)
            except Exception as exc:  # noqa: BLE001 - the store may be gone: the run's own error matters
                log.warning("lease %s: not removed (%s); it expires on its own", self.url, exc)

    def __enter__(self) -> Self:
        return self.acquire()

    def __exit__(self, *exc) -> None:
        self.release()


def _number(value: object) -> float | None:
    """``value`` as a finite number of seconds; None for anything else (text, a bool)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return None
    return float(value)


def _parse_record(raw: bytes) -> dict[str, Any] | None:
    """The lease record in ``raw``, its times as floats; None when ``raw`` is no lease record
    (no JSON, too long, nested too deep for the parser, or a field of the wrong type: a
    ``ttl`` of ``"100000"`` would otherwise fail the arithmetic of every later check)."""
    if len(raw) > _MAX_RECORD_BYTES:
        return None
    try:
        record = json.loads(raw)
    except (ValueError, RecursionError):
        return None
    if not isinstance(record, dict) or not isinstance(record.get("token"), str):
        return None
    renewed, ttl, pid = _number(record.get("renewed_at")), _number(record.get("ttl")), record.get("pid")
    if renewed is None or ttl is None or ttl <= 0 or isinstance(pid, bool) or not isinstance(pid, int) \
            or not isinstance(record.get("host"), str):
        return None
    return {**record, "renewed_at": renewed, "ttl": ttl}


def _holder(record: dict[str, Any] | None) -> str:
    if not record:
        return "nobody"
    return (f"pid {record.get('pid')} on host {str(record.get('host'))[:80]} "
            f"(command: {holder_command(record.get('command'))})")
