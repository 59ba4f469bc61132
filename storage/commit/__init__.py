"""Commits and exclusion: how a write appears complete or not at all, and by one writer.

Atomic files and directories (:mod:`~storage.commit.atomic`), the local output lock
(:mod:`~storage.commit.lock`), the object-store lease (:mod:`~storage.commit.lease`),
paths kept inside an output (:mod:`~storage.commit.confine`) and the fault injector of the
crash tests (:mod:`~storage.commit.failpoints`).
"""
