"""The optional extras: which commands need which, and the error when one is missing.

A plain ``pip install asepr`` imports, validates, partitions, verifies and ingests; the
trainers need ``asepr[train]`` (torch and PyTorch Geometric) and ``--algo metis`` needs
``asepr[metis]`` (pymetis). Those modules are imported only by the commands that use
them, so a missing one surfaces as a :class:`ModuleNotFoundError` of that command, which
:func:`missing_extra` turns into the project's error naming the extra to install.
"""

from __future__ import annotations

import importlib.util

from asepr.storage.errors import AseprError, format_problem

__all__ = ["EXTRAS", "MissingExtraError", "missing_extra", "require_extra"]

#: The top-level module -> the extra that installs it.
EXTRAS = {"torch": "train", "torch_geometric": "train", "pymetis": "metis"}


class MissingExtraError(AseprError):
    """A command needs an optional dependency that is not installed."""


def _error(module: str, extra: str, what: str) -> MissingExtraError:
    return MissingExtraError(format_problem(
        f"the Python package '{module}', needed by {what}", f"it installed (the asepr[{extra}] extra has it)",
        "it is not installed",
        f'install asepr[{extra}]: pip install "asepr[{extra}]" (from a checkout: pip install ".[{extra}]").'))


def missing_extra(exc: ImportError, what: str) -> MissingExtraError | None:
    """The error to report for ``exc`` when it is the import of an optional extra's module,
    else None (a broken installation, reported as it is)."""
    name = (getattr(exc, "name", None) or "").split(".")[0]
    extra = EXTRAS.get(name)
    return _error(name, extra, what) if extra else None


def require_extra(module: str, what: str) -> None:
    """Refuse at once, before any work, when ``module`` (a key of :data:`EXTRAS`) is absent."""
    try:
        found = importlib.util.find_spec(module) is not None
    except ImportError:
        found = False
    if not found:
        raise _error(module, EXTRAS[module], what)
