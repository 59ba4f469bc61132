"""How ``asepr`` shows the progress of its long steps (:mod:`asepr.storage.progress`).

On a terminal every stage gets a ``tqdm`` bar (cleared when the stage ends); elsewhere
(a log file, CI, a pipe) a stage that runs longer than :data:`LINE_INTERVAL_S` prints
one line per interval, in the command's own style::

    asepr partition: assignment: 2,400,000 of 5,000,000 (48%) after 30 s

Nothing is shown under ``-q`` or ``--no-progress``. The bars and lines go to stderr, so
that a command's results on stdout stay clean.
"""

from __future__ import annotations

import argparse
import sys
import threading
import time

from asepr.storage.progress import Bar, Reporter

__all__ = ["LINE_INTERVAL_S", "LineBar", "reporter_for", "terminal_bar"]

#: Seconds between two lines of a stage when stderr is not a terminal; a stage shorter
#: than this prints nothing.
LINE_INTERVAL_S = 15.0


class LineBar:
    """A stage's progress as a line on stderr every :data:`LINE_INTERVAL_S` seconds."""

    def __init__(self, prefix: str, name: str, interval: float = LINE_INTERVAL_S, stream=None):
        self.prefix, self.name, self.interval = prefix, name, interval
        self.stream = stream or sys.stderr
        self.count, self.total = 0, 0
        self.start = self._last = time.monotonic()
        self._lock = threading.Lock()

    def expect(self, n: int) -> None:
        with self._lock:
            self.total += n

    def update(self, n: int = 1) -> None:
        with self._lock:
            self.count += n
            now = time.monotonic()
            if now - self._last < self.interval:
                return
            self._last = now
            if self.total:
                done = f"{self.count:,} of {self.total:,} ({min(100.0, 100.0 * self.count / self.total):.0f}%)"
            else:
                done = f"{self.count:,}" if self.count else "running"
            print(f"{self.prefix}: {self.name}: {done} after {now - self.start:.0f} s", file=self.stream, flush=True)

    def close(self) -> None:
        """Nothing to clear: the lines stay in the log."""


class _TqdmBar:
    """A ``tqdm`` bar whose total grows as the stage learns it."""

    def __init__(self, name: str):
        from tqdm import tqdm

        self._bar = tqdm(total=None, desc=name if len(name) <= 40 else name[:39] + "…", unit="", unit_scale=True, leave=False, dynamic_ncols=True,
                         mininterval=0.2, file=sys.stderr)
        self._lock = threading.Lock()

    def expect(self, n: int) -> None:
        with self._lock:
            self._bar.total = (self._bar.total or 0) + n
            self._bar.refresh()

    def update(self, n: int = 1) -> None:
        with self._lock:
            self._bar.update(n)

    def close(self) -> None:
        with self._lock:
            self._bar.close()


def terminal_bar(name: str) -> Bar:
    """A ``tqdm`` bar for stage ``name`` on stderr."""
    return _TqdmBar(name)


def reporter_for(args: argparse.Namespace) -> Reporter | None:
    """The reporter of a command's flags: None under ``-q`` or ``--no-progress``, bars on
    a terminal, periodic lines otherwise."""
    if getattr(args, "quiet", False) or getattr(args, "no_progress", False):
        return None
    if sys.stderr.isatty():
        return terminal_bar
    prefix = f"asepr {args.command}"
    return lambda name: LineBar(prefix, name)
