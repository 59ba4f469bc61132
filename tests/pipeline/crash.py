"""An in-process stand-in for a kill at a writer's named failpoint (:mod:`asepr.storage.commit.failpoints`)."""

from __future__ import annotations

from asepr.storage.commit import failpoints


class Crash(BaseException):
    """Stands for a kill: not an Exception, so only BaseException handlers see it."""


def crash_at(monkeypatch, stage: str, after: int = 1) -> None:
    """Make ``failpoints.failpoint(stage)`` raise Crash on its ``after``-th hit."""
    hits = {"n": 0}

    def hook(name):
        if name == stage:
            hits["n"] += 1
            if hits["n"] >= after:
                raise Crash(stage)

    monkeypatch.setattr(failpoints, "failpoint", hook)
