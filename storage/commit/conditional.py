"""Commits fenced by the object store: conditional writes, where the store honours them.

A remote output's writer holds a lease (:mod:`asepr.storage.commit.lease`), but a lease is
timed exclusion: a writer paused between its last look at the lease and its manifest PUT
(a stopped process, a long GC, a VM migrated) is not fenced by it, and would overwrite the
commit of the writer that took the lease over meanwhile. S3 and many S3-compatible
servers offer conditional writes: a PUT with ``If-None-Match: *`` creates an object only
if it is absent, one with ``If-Match: <etag>`` replaces only the version whose ETag that
is, and the store refuses any other with ``412 Precondition Failed`` (Delta Lake and
Iceberg commit on them). Where the store honours them, a remote output's manifest is
committed as a compare-and-swap on the ETag the writer read when it began
(:func:`manifest_etag` right after it took the lease, then :func:`put_if_unchanged`):
a writer that lost its lease, however long it paused, cannot overwrite a newer commit.

Not every server honours them: ``rclone serve s3`` accepts both headers and ignores them.
So support is probed, once per output and process (:func:`conditional_writes`), with an
object of its own: created with ``If-None-Match: *`` twice (the second must be refused),
replaced with a stale ``If-Match`` (refused) and with the right one (accepted), then
deleted. A store that fails the probe keeps the lease alone. Only S3 (s3fs) is probed:
other filesystems (``memory://``, GCS and Azure through fsspec) keep the lease alone.

The ETag and the content are read in that order (:func:`manifest_etag` before any read
of the manifest): if another commit lands between them, the compare-and-swap fails
(safely) rather than succeeding on content the writer never read.
"""

from __future__ import annotations

import logging
import secrets
import threading
from typing import Any

from asepr.storage.errors import StoreError, format_problem
from asepr.storage.locations.fs import join, url_of

__all__ = ["PROBE_PREFIX", "CommitConflict", "conditional_writes", "manifest_etag", "put_if_unchanged"]

log = logging.getLogger(__name__)

#: The name prefix of the probe objects (an output's own bookkeeping).
PROBE_PREFIX = ".asepr-probe-"
#: Whether conditional writes held, per output URL (probed once per process).
_PROBED: dict[str, bool] = {}
_PROBE_LOCK = threading.Lock()
#: Error codes of a refused condition: 412, and S3's 409 for a concurrent conditional write.
_REFUSED_CODES = {"PreconditionFailed", "ConditionalRequestConflict", "412", "409"}


class CommitConflict(StoreError):
    """The store refused a conditional write: another writer changed the object first."""


def _s3(fs) -> bool:
    return callable(getattr(fs, "call_s3", None)) and callable(getattr(fs, "split_path", None))


def _refused(exc: BaseException) -> bool:
    """Whether ``exc`` (or an exception it was raised from) is the store refusing a condition."""
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        response = getattr(exc, "response", None)
        if isinstance(response, dict):
            error = response.get("Error") or {}
            status = (response.get("ResponseMetadata") or {}).get("HTTPStatusCode")
            if str(error.get("Code")) in _REFUSED_CODES or status in (409, 412):
                return True
        exc = exc.__cause__ or exc.__context__
    return False


def _put(fs, path: str, data: bytes, **condition: str) -> dict[str, Any]:
    bucket, key, _ = fs.split_path(path)
    try:
        return fs.call_s3("put_object", Bucket=bucket, Key=key, Body=data, **condition)
    finally:
        fs.invalidate_cache(path)  # s3fs lists from its cache: this PUT did not go through it


def _etag(fs, path: str) -> str | None:
    bucket, key, _ = fs.split_path(path)
    try:
        return fs.call_s3("head_object", Bucket=bucket, Key=key)["ETag"]
    except FileNotFoundError:
        return None


def _refuses(fs, path: str, data: bytes, **condition: str) -> bool:
    """Whether the store refuses the conditional PUT (False: it wrote the object)."""
    try:
        _put(fs, path, data, **condition)
    except OSError as exc:
        if _refused(exc):
            return True
        raise
    return False


def _probe(fs, base: str) -> bool:
    path = join(base, f"{PROBE_PREFIX}{secrets.token_hex(8)}")
    try:
        if _refuses(fs, path, b"1", IfNoneMatch="*"):
            return False  # an object of a random name cannot exist: the store misreads the header
        if not _refuses(fs, path, b"2", IfNoneMatch="*"):
            return False  # the second create overwrote the first: the header is ignored
        if not _refuses(fs, path, b"3", IfMatch='"00000000000000000000000000000000"'):
            return False
        etag = _etag(fs, path)
        return etag is not None and not _refuses(fs, path, b"4", IfMatch=etag)
    finally:
        try:
            fs.rm(path)
        except Exception as exc:  # noqa: BLE001 - a leftover probe is harmless (and named as ours)
            log.warning("%s: probe object not removed (%s)", url_of(fs, path), exc)


def conditional_writes(fs, base: str) -> bool:
    """Whether the store of the output at ``base`` honours ``If-None-Match: *`` and
    ``If-Match`` on PUT (probed once per output and process; see the module docstring).

    Raises
    ------
    OSError
        The probe's requests failed (the store is unreachable, the credentials refused).
    """
    if not _s3(fs):
        return False
    url = url_of(fs, base)
    with _PROBE_LOCK:
        if url not in _PROBED:
            _PROBED[url] = _probe(fs, base)
            log.info("%s: conditional writes %s", url,
                     "honoured: the manifest is committed by compare-and-swap" if _PROBED[url]
                     else "not honoured: the lease alone fences the commit")
        return _PROBED[url]


def manifest_etag(fs, path: str) -> str | None:
    """The ETag of the object at ``path``, None when there is none (an S3 store only)."""
    return _etag(fs, path)


def put_if_unchanged(fs, path: str, data: bytes, etag: str | None, *, began: str) -> None:
    """Write ``data`` to ``path`` only if the object is still the version ``etag`` (None:
    only if there is none).

    Raises
    ------
    CommitConflict
        The store refused: another writer wrote ``path`` since ``etag`` was read (named
        with ``began``, what this writer started from).
    """
    condition = {"IfMatch": etag} if etag is not None else {"IfNoneMatch": "*"}
    if not _refuses(fs, path, data, **condition):
        return
    url = url_of(fs, path)
    raise CommitConflict(format_problem(
        f"{url} (the commit)", f"the manifest this run began from ({began})",
        "a manifest another writer committed since (the store refused the conditional write)",
        "this run lost its lease while paused and did not commit; the other writer's generation stands. "
        "Rerun the same command if its changes are still wanted."))
