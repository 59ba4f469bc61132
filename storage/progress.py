"""Progress of long steps: the library counts, the command line draws.

Every stage that :func:`asepr.storage.resources.stage` logs is also tracked here: it opens a
progress *bar* for its thread (:func:`track`), and the loops inside it count what they
have done into the innermost bar of their thread (:func:`advance`: rows read, rows
written, tasks finished, checks made), after announcing how much there is when they
know it (:func:`expect`). A loop on a helper thread takes the bar with it
(:func:`current`, then :func:`carried` on that thread).

Nothing is drawn unless a command installed a reporter (:func:`reporting`): the
``asepr`` command line installs a bar on a terminal, a line every few seconds otherwise,
and none under ``-q`` or ``--no-progress`` (``workflows/progress.py``). The reporter is
process-wide, as logging is: a library user gets no output unless they ask for it, and
the pipeline never imports a drawing library.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator
from typing import Protocol

__all__ = ["Bar", "NoBar", "Reporter", "advance", "carried", "current", "expect", "reporting", "track"]


class Bar(Protocol):
    """What a reporter's bar does: count, learn its total, and close."""

    def update(self, n: int = 1) -> None: ...

    def expect(self, n: int) -> None: ...

    def close(self) -> None: ...


#: ``reporter(stage_name)`` opens a :class:`Bar` for one stage.
Reporter = Callable[[str], Bar]


class NoBar:
    """A bar that draws nothing: the default, and a stage's bar without a reporter."""

    def __enter__(self) -> NoBar:
        return self

    def __exit__(self, *exc) -> bool:
        return False

    def update(self, n: int = 1) -> None:
        """Count ``n`` more (ignored)."""

    def expect(self, n: int) -> None:
        """Add ``n`` to the total (ignored)."""

    def close(self) -> None:
        """Nothing to close."""


_NO_BAR = NoBar()
_reporter: Reporter | None = None
_local = threading.local()


def _stack() -> list[tuple[str, Bar]]:
    if not hasattr(_local, "bars"):
        _local.bars = []
    return _local.bars


@contextlib.contextmanager
def reporting(reporter: Reporter | None) -> Iterator[None]:
    """Draw the progress of the stages run inside the block with ``reporter`` (None: none)."""
    global _reporter
    previous, _reporter = _reporter, reporter
    try:
        yield
    finally:
        _reporter = previous


@contextlib.contextmanager
def track(name: str) -> Iterator[Bar]:
    """Open stage ``name``'s bar on this thread for the block; a stage of the same name
    already open here (the command's stage around the library's) keeps its one bar."""
    stack = _stack()
    if _reporter is None or (stack and stack[-1][0] == name):
        yield stack[-1][1] if stack else _NO_BAR
        return
    bar = _reporter(name)
    stack.append((name, bar))
    try:
        yield bar
    finally:
        stack.pop()
        bar.close()


@contextlib.contextmanager
def carried(bar: Bar) -> Iterator[Bar]:
    """Count this thread's work into ``bar`` (another thread's :func:`current`) for the
    block: a helper thread doing part of a stage."""
    stack = _stack()
    stack.append(("", bar))
    try:
        yield bar
    finally:
        stack.pop()


def current() -> Bar:
    """This thread's innermost open bar (a :class:`NoBar` when none), to hand to a
    helper thread that does part of the stage's work."""
    stack = _stack()
    return stack[-1][1] if stack else _NO_BAR


def advance(n: int = 1) -> None:
    """Count ``n`` more units of work into this thread's innermost bar."""
    if n:
        current().update(int(n))


def expect(n: int) -> None:
    """Add ``n`` units to the total of this thread's innermost bar (a stage that makes
    several passes expects each)."""
    if n:
        current().expect(int(n))
