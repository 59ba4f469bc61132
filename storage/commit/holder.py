"""Who holds a lock or a lease: a record that names the holder and carries no credential.

The output lock (:mod:`asepr.storage.commit.lock`) and the object-store lease
(:mod:`asepr.storage.commit.lease`) record their holder so that a refused writer can say who
is in the way. The record holds the command's *name* (``asepr partition``), never its
arguments: ``--storage-options`` carries secrets, a lock file outlives a killed writer,
and a lease object is readable by every reader of its bucket. A record written by an
older asepr may still hold a whole command line, so :func:`holder_command` shows only
the leading words of a recorded command, never its options.
"""

from __future__ import annotations

import os
import re
import sys

__all__ = ["command_name", "holder_command", "set_command_name"]

#: The name the entry point gave this process (:func:`set_command_name`).
_NAME: str | None = None
#: A word of a command's name: a program or a subcommand, no path, option or value.
_WORD = re.compile(r"[A-Za-z][A-Za-z0-9_.-]{0,39}")
#: The most words of a recorded command that are shown.
_SHOWN_WORDS = 3


def set_command_name(name: str) -> None:
    """Name this process's command for the lock and lease records (``"asepr ingest"``).

    The entry points call it once: the ``asepr`` command line with its subcommand, the
    trainer ranks with ``"asepr train"``.
    """
    global _NAME
    _NAME = holder_command(name)


def command_name() -> str:
    """The command name recorded for this process: the one set by the entry point, else
    the program's file name without its arguments (``"pytest"``)."""
    if _NAME:
        return _NAME
    program = os.path.basename(sys.argv[0]) if sys.argv and sys.argv[0] else "python"
    return holder_command(program.removesuffix(".py")) or "python"


def holder_command(recorded: object) -> str:
    """The leading words of a recorded command (at most three, each a plain word; the
    program by its file name), for a message: an option, a path, a URL or a JSON value
    ends it, so a secret given on an old record's command line is never shown."""
    words = []
    given = str(recorded or "").split()[:_SHOWN_WORDS]
    if given:
        given[0] = given[0].rpartition("/")[2]  # a program's path: its name
    for word in given:
        if not _WORD.fullmatch(word):
            break
        words.append(word)
    return " ".join(words) or "an unnamed command"
