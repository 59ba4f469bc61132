"""An in-process stand-in for a kill at a writer's named pause point."""

from __future__ import annotations


class Crash(BaseException):
    """Stands for a kill: not an Exception, so only BaseException handlers see it."""


def crash_at(monkeypatch, stage: str, modules, after: int = 1) -> None:
    """Make ``pause_point(stage)`` in each of ``modules`` raise Crash on its ``after``-th hit."""
    hits = {"n": 0}

    def hook(name):
        if name == stage:
            hits["n"] += 1
            if hits["n"] >= after:
                raise Crash(stage)

    for module in modules:
        monkeypatch.setattr(module, "pause_point", hook)
