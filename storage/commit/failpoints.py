"""Environment-driven fault injection for the crash-safety tests.

Production code marks the points where a kill must leave a recoverable state with
``failpoints.failpoint("name")``. With ``ASEPR_FAILPOINTS`` unset (the normal case) the
call returns at once. The variable holds ``name=action`` items separated by commas:

``pause``
    create the file named by ``ASEPR_FAILPOINT_MARKER`` (if set), then sleep forever,
    so a test can SIGKILL the process at a known point instead of guessing with timers;
``kill``
    SIGKILL the own process;
``wait``
    create the marker file (which must be set), then wait until the test removes it and
    go on, so a test can act at a known point (stop the process, let another writer
    commit) and then let it continue.

Callers import the module, not the function (``from asepr.storage.commit import failpoints``), so an
in-process test can monkeypatch ``failpoints.failpoint`` and see every call.

Names in use: ``route`` (a shard's first batch spilled), ``finalize`` (a store's arrays
written, its attrs not yet), ``between-commits`` (a finished store renamed into
staging), ``swap`` (the first store of a new generation moved into place),
``manifest`` (every store swapped, the manifest not yet replaced), ``commit-put`` (a
remote output's writer has read its lease back and is about to PUT its manifest) and
``round:<rank>:<round>`` (a trainer rank starting a round).
"""

from __future__ import annotations

import logging
import os
import signal
import threading
import time
from pathlib import Path

__all__ = ["ACTIONS", "MARKER_VARIABLE", "VARIABLE", "failpoint", "parse"]

log = logging.getLogger(__name__)

VARIABLE = "ASEPR_FAILPOINTS"
MARKER_VARIABLE = "ASEPR_FAILPOINT_MARKER"
ACTIONS = ("pause", "kill", "wait")


def parse(spec: str) -> dict[str, str]:
    """Parse ``name=action[,name=action...]`` into ``{name: action}``.

    Parameters
    ----------
    spec
        The value of ``ASEPR_FAILPOINTS``.

    Raises
    ------
    ValueError
        An item without ``=`` or with an action other than ``pause`` or ``kill``.
    """
    points: dict[str, str] = {}
    for item in filter(None, (part.strip() for part in spec.split(","))):
        name, sep, action = item.rpartition("=")
        if not sep or not name or action not in ACTIONS:
            raise ValueError(
                f"{VARIABLE}: expected name=action items with action in {ACTIONS}, found {item!r}"
            )
        points[name] = action
    return points


def _announce(name: str) -> None:
    marker = os.environ.get(MARKER_VARIABLE)
    if not marker:
        return
    # Several worker threads can reach the same point at once: each writes its own
    # temp file, and the replace is atomic.
    tmp = f"{marker}.{os.getpid()}-{threading.get_ident()}.tmp"
    Path(tmp).write_text(f"{name} {os.getpid()}\n")
    os.replace(tmp, marker)


def failpoint(name: str) -> None:
    """Act on the failpoint ``name`` if ``ASEPR_FAILPOINTS`` names it; otherwise return.

    Parameters
    ----------
    name
        The point reached, e.g. ``"swap"`` or ``"round:1:3"``.
    """
    spec = os.environ.get(VARIABLE)
    if not spec:
        return
    action = parse(spec).get(name)
    if action is None:
        return
    log.warning("failpoint %r: %s (pid %d)", name, action, os.getpid())
    if action == "kill":
        os.kill(os.getpid(), signal.SIGKILL)
    _announce(name)
    marker = os.environ.get(MARKER_VARIABLE)
    while action == "pause" or marker and os.path.exists(marker):
        time.sleep(0.05)
