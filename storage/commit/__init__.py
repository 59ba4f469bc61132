"""Commits and exclusion: how a write appears complete or not at all, and by one writer.

Atomic files and directories (:mod:`~asepr.storage.commit.atomic`), the local output lock
(:mod:`~asepr.storage.commit.lock`), the object-store lease (:mod:`~asepr.storage.commit.lease`),
paths kept inside an output (:mod:`~asepr.storage.commit.confine`) and the fault injector of the
crash tests (:mod:`~asepr.storage.commit.failpoints`).
"""
