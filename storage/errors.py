"""The one error hierarchy of asepr.

Every error a user can cause derives from :class:`AseprError`, so a caller (or the
CLI) can catch the whole family in one place. Where a standard exception fits, the
subclass derives from it too, so ``except ValueError`` or ``except FileNotFoundError``
keeps working for code that does not know asepr.

Messages follow one shape: *where* (file, column, row range or partition), *what was
expected*, *what was found*, and *how to fix it*. :func:`format_problem` builds that
shape so every raise site reads the same.
"""

from __future__ import annotations

import contextlib
import errno
import os
from collections.abc import Iterator

__all__ = [
    "AseprError",
    "SchemaError",
    "InputError",
    "InputNotFoundError",
    "StoreError",
    "FileSystemError",
    "format_problem",
    "os_error_problem",
    "os_errors_as_problems",
]


class AseprError(Exception):
    """Base class of every error raised by asepr on bad input or a bad store."""


class SchemaError(AseprError, ValueError):
    """A file's columns or dtypes do not match the input format."""


class InputError(AseprError, ValueError):
    """Input values are wrong: out-of-range ids, NaN features, duplicate shards, ..."""


class InputNotFoundError(InputError, FileNotFoundError):
    """A path, directory or glob that should hold input matched nothing."""


class StoreError(AseprError):
    """An output store is missing, incomplete, locked or inconsistent."""


class FileSystemError(StoreError, OSError):
    """The operating system refused a file operation: the disk is full, the quota is
    exhausted, permission is denied, or the filesystem is read-only.

    It is an :class:`OSError` too, with the original ``errno`` and ``filename``, so code
    that handles ``OSError`` keeps working; :func:`os_error_problem` builds it.
    """

    def __str__(self) -> str:
        return str(self.strerror)


def format_problem(
    where: str,
    expected: str,
    found: str,
    fix: str | None = None,
) -> str:
    """Build the standard four-part error message.

    Parameters
    ----------
    where
        The file, column and row range (or partition) at fault.
    expected
        What the input format requires there.
    found
        What was actually there.
    fix
        How the user can repair the input, if there is a known remedy.
    """
    message = f"{where}: expected {expected}, found {found}."
    if fix:
        message += f" Fix: {fix}"
    return message


_ROOM = "room to write"
_ACCESS = "permission to write (or read) there"
_ELSEWHERE = "choose an output directory (or --run-dir) on a disk with room"
_ANOTHER = "or choose another output directory (or --run-dir)"
#: errno -> (what was expected, what was found, how to fix it): the OS errors a user can fix.
_FILESYSTEM_PROBLEMS = {
    errno.ENOSPC: (_ROOM, "the disk full", f"free space on that disk, or {_ELSEWHERE}"),
    errno.EDQUOT: (_ROOM, "the disk quota exhausted",
                   f"free space within your quota, or {_ELSEWHERE}"),
    errno.EACCES: (_ACCESS, "permission denied",
                   f"make it writable (and readable) for this user, {_ANOTHER}"),
    errno.EPERM: (_ACCESS, "the operation not permitted",
                  f"make it writable for this user (its owner, mode and attributes), {_ANOTHER}"),
    errno.EROFS: (_ACCESS, "a read-only filesystem",
                  f"remount it read-write, {_ANOTHER}"),
}


def os_error_problem(
    exc: BaseException,
    *,
    then: str = "rerun the same command",
    within: str | None = None,
) -> FileSystemError | None:
    """The project's error for an OS error a user can fix, else None.

    ``exc`` or an exception it was raised from (``__cause__``/``__context__``) must be
    an :class:`OSError` whose ``errno`` is ENOSPC, EDQUOT, EACCES, EROFS, or EPERM on a
    named file (an EPERM without a file is about a process, not a permission on disk).
    An :class:`AseprError` is returned as None: it already speaks for itself.

    The message names the file (``filename``, and ``filename2`` of a rename) within
    ``within`` (e.g. ``"output OUT"``), what the operating system found, and the fix,
    which ends with ``then`` (what to run after it).
    """
    seen: set[int] = set()
    while isinstance(exc, Exception) and id(exc) not in seen:
        seen.add(id(exc))
        if isinstance(exc, AseprError):
            return None
        if isinstance(exc, OSError) and exc.errno in _FILESYSTEM_PROBLEMS:
            if exc.errno != errno.EPERM or exc.filename is not None:
                return _filesystem_error(exc, then, within)
        exc = exc.__cause__ or exc.__context__
    return None


def _filesystem_error(exc: OSError, then: str, within: str | None) -> FileSystemError:
    expected, found, fix = _FILESYSTEM_PROBLEMS[exc.errno]
    names = [os.fsdecode(f) if isinstance(f, (str, bytes, os.PathLike)) else str(f)
             for f in (exc.filename, exc.filename2) if f is not None]
    where = " -> ".join(names) if names else None
    if within:
        where = f"{within} (writing {where})" if where else within
    where = where or "a file the operating system did not name"
    code = errno.errorcode.get(exc.errno, str(exc.errno))
    found = f"{found} ({code}: {exc.strerror or os.strerror(exc.errno)})"
    filename = [exc.filename] if exc.filename is not None else []
    message = format_problem(where, expected, found, f"{fix}; then {then}.")
    return FileSystemError(exc.errno, message, *filename)


@contextlib.contextmanager
def os_errors_as_problems() -> Iterator[None]:
    """Raise the project's error (:func:`os_error_problem`) for a fixable OS error in the block.

    Every entry point (the ``asepr`` commands, each trainer rank) runs inside it, so no
    command prints a traceback for a full disk or a directory it may not write.
    Other exceptions pass unchanged.
    """
    try:
        yield
    except BaseException as exc:
        problem = os_error_problem(exc)
        if problem is None:
            raise
        raise problem from exc
