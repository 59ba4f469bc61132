"""Outputs and run directories on an object store (S3, GCS, Azure Blob, an S3-compatible server).

fsspec does the talking; this module holds what a remote location needs beyond it:

* :func:`parse_storage_options` and :func:`add_storage_options_flag`: the
  ``--storage-options JSON`` of every command, checked once at the door (a JSON object,
  or a usage error naming the flag). Trainers started by a launcher read it from
  :data:`STORAGE_OPTIONS_VARIABLE`, so that no secret shows on a command line.
* :func:`remote_error_problem` and :func:`remote_errors_as_problems`: a request that
  failed after the client's own retries (no answer, a timeout, refused credentials, a
  missing bucket) becomes a :class:`RemoteStoreError` naming the URL being read or
  written, what the store answered and the fix, never a traceback. The retries
  themselves are the client's (s3fs retries a failed request a bounded number of times,
  botocore retries each attempt by its ``retries`` config; both are set through
  ``--storage-options``, e.g. ``{"config_kwargs": {"retries": {"max_attempts": 2},
  "connect_timeout": 5, "read_timeout": 30}}``).

Credentials are never parsed here: a store's client reads its usual environment
variables and configuration files (``AWS_ACCESS_KEY_ID``, ``~/.aws/credentials``,
``GOOGLE_APPLICATION_CREDENTIALS``, ...) unless ``storage_options`` names them.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
from collections.abc import Iterator
from typing import Any

from asepr.storage.errors import StoreError, format_problem

__all__ = [
    "STORAGE_OPTIONS_VARIABLE",
    "RemoteStoreError",
    "add_storage_options_flag",
    "TRANSPORT_ERRORS",
    "parse_storage_options",
    "remote_error_problem",
    "remote_errors_as_problems",
]


class RemoteStoreError(StoreError):
    """A request to an object store failed after the client's retries (no answer, a
    timeout, credentials refused, no such bucket)."""


def _transport_errors() -> tuple[type[BaseException], ...]:
    """The exception types a store client raises for a failed request (those installed)."""
    # Not BrokenPipeError, a ConnectionError too: a closed stdout (``asepr inspect | head``) is no store's fault.
    found: list[type[BaseException]] = [asyncio.TimeoutError, ConnectionRefusedError, ConnectionResetError,
                                        ConnectionAbortedError, TimeoutError]
    with contextlib.suppress(ImportError):
        from fsspec.exceptions import FSTimeoutError

        found.append(FSTimeoutError)
    with contextlib.suppress(ImportError):
        from botocore.exceptions import BotoCoreError, ClientError

        found += [BotoCoreError, ClientError]
    with contextlib.suppress(ImportError):
        from aiohttp import ClientError as AiohttpClientError

        found.append(AiohttpClientError)
    return tuple(found)


#: What a failed request to a store raises, as the installed clients spell it.
TRANSPORT_ERRORS = _transport_errors()


def parse_storage_options(text: str | None, *, flag: str = "--storage-options") -> dict[str, Any]:
    """``text`` (a JSON object, as the command line gives it) as a dict; ``{}`` for None or empty.

    Raises
    ------
    StoreError
        ``text`` is not JSON, or not a JSON object; the message names ``flag``.
    """
    if text is None or not text.strip():
        return {}
    try:
        value = json.loads(text)
    except ValueError as exc:
        raise StoreError(format_problem(
            flag, 'a JSON object, e.g. \'{"client_kwargs": {"endpoint_url": "http://host:9000"}}\'',
            f"text that is no JSON ({exc})", "quote the whole object for the shell, keys in double quotes.")) from None
    if not isinstance(value, dict):
        raise StoreError(format_problem(flag, "a JSON object of fsspec storage options",
                                        f"a JSON {type(value).__name__}", "pass an object: '{\"key\": ...}'."))
    return value


#: The environment variable through which a launcher passes ``--storage-options`` to the
#: trainers it starts (the ranks inherit it; a command line would show it to every user).
STORAGE_OPTIONS_VARIABLE = "ASEPR_STORAGE_OPTIONS"


def _storage_options_type(text: str) -> dict[str, Any]:
    try:
        return parse_storage_options(text)
    except StoreError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def add_storage_options_flag(parser: argparse.ArgumentParser, *, environment: bool = False) -> None:
    """Add ``--storage-options JSON`` (dest ``storage_options``, a dict; ``{}`` when absent).

    With ``environment``, the default is :data:`STORAGE_OPTIONS_VARIABLE`'s value, as a
    launcher sets it for the trainers (a malformed value is a usage error too).
    """
    default = os.environ.get(STORAGE_OPTIONS_VARIABLE, "") if environment else ""
    parser.add_argument(
        "--storage-options", metavar="JSON", type=_storage_options_type, default=default,  # a str: parsed too
        help="fsspec options of a remote OUT (and run directory) as a JSON object, e.g. "
             '\'{"client_kwargs": {"endpoint_url": "http://host:9000"}}\'; credentials may also come from the '
             "store client's environment variables and configuration files")


def _first_transport_error(exc: BaseException) -> BaseException | None:
    """``exc`` or the first exception it was raised from that is a failed request.

    The chain is followed through the project's own errors too: a chunk that could not
    be fetched is reported by the reader as unreadable, but the store did not answer,
    and the fix is the connection, not the data. A missing object (FileNotFoundError)
    is left to the callers, which name what is missing.
    """
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        if isinstance(exc, (RemoteStoreError, FileNotFoundError)):
            return None
        if isinstance(exc, TRANSPORT_ERRORS):
            return exc
        exc = exc.__cause__ or exc.__context__
    return None


def remote_error_problem(exc: BaseException, url: str, *, doing: str = "reading") -> RemoteStoreError | None:
    """The project's error for a failed request to the store at ``url``, else None.

    ``exc`` (or an exception it was raised from) must be a transport error of a store
    client (:data:`TRANSPORT_ERRORS`); a :class:`RemoteStoreError` is returned as None
    (it already names its URL).
    """
    cause = _first_transport_error(exc)
    if cause is None:
        return None
    detail = str(cause).splitlines()[0] if str(cause) else ""
    credentials = _credentials_problem(cause)
    if credentials is not None:
        return RemoteStoreError(format_problem(
            f"{url} ({doing})", "credentials the store accepts", f"{credentials} ({type(cause).__name__}: {detail})",
            "check the key and secret and that they may use this bucket: --storage-options '{\"key\": ..., "
            "\"secret\": ...}', or the client's environment variables (AWS_ACCESS_KEY_ID, "
            "AWS_SECRET_ACCESS_KEY) and configuration files; then rerun the same command (nothing was changed)."))
    return RemoteStoreError(format_problem(
        f"{url} ({doing})", "an object store that answers each request",
        f"{type(cause).__name__}: {detail} (after the client's retries)",
        "check that the store is reachable from this machine, the endpoint and the credentials "
        "(--storage-options, or the client's environment variables and configuration files), then rerun "
        "the same command; raise the client's retries or timeouts in --storage-options for a slow store."))


#: What a store answers when it refuses the credentials it was given (S3's codes, and the
#: HTTP statuses of servers that send no code).
_REFUSED_CREDENTIALS = {"AccessDenied", "InvalidAccessKeyId", "SignatureDoesNotMatch", "InvalidToken",
                        "ExpiredToken", "AuthorizationHeaderMalformed", "Forbidden", "403", "401"}


def _credentials_problem(cause: BaseException) -> str | None:
    """How the credentials failed, when that is what ``cause`` says; else None."""
    if type(cause).__name__ in ("NoCredentialsError", "PartialCredentialsError"):
        return "no credentials: none were given and the client found none"
    response = getattr(cause, "response", None)
    if isinstance(response, dict):
        code = str((response.get("Error") or {}).get("Code") or "")
        status = (response.get("ResponseMetadata") or {}).get("HTTPStatusCode")
        if code in _REFUSED_CREDENTIALS or status in (401, 403):
            answer = code if code and code != str(status) else "Forbidden" if status == 403 else "Unauthorized"
            return f"credentials that the store refused (HTTP {status or '?'} {answer})"
    return None


@contextlib.contextmanager
def remote_errors_as_problems(url: str, *, doing: str = "reading") -> Iterator[None]:
    """Raise :func:`remote_error_problem`'s error for a failed request to a store in the block.

    Other exceptions (the project's own errors among them, unless a failed request caused
    them) pass unchanged.
    """
    try:
        yield
    except Exception as exc:
        problem = remote_error_problem(exc, url, doing=doing)
        if problem is None:
            raise
        raise problem from exc
