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

__all__ = [
    "AseprError",
    "SchemaError",
    "InputError",
    "InputNotFoundError",
    "StoreError",
    "format_problem",
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
