"""Reading ``.npy`` files from many threads at once.

``np.load`` parses every ``.npy`` header with :func:`ast.literal_eval`. On CPython 3.11
before 3.11.8, and 3.12 before 3.12.2, the AST constructor keeps its recursion depth in
state that all threads share (CPython gh-106905, fixed by giving each call its own
counter), so two threads that parse headers at the same moment can fail with
``SystemError: AST constructor recursion depth mismatch``. The stages that run on
threads (``--workers 0``) load spill files concurrently, so every ``.npy`` read of the
project goes through :func:`load_npy`, which parses the header under one process-wide
lock on those versions and reads the data outside it.
"""

from __future__ import annotations

import contextlib
import os
import sys
import threading
from typing import Any

import numpy as np

__all__ = ["HEADER_PARSE_THREAD_SAFE", "header_lock", "load_npy", "npz_member"]


def _parse_is_thread_safe(version: tuple[int, ...]) -> bool:
    """Whether ``ast.literal_eval`` may run on several threads at once on this CPython."""
    if version[:2] == (3, 11):
        return version >= (3, 11, 8)
    if version[:2] == (3, 12):
        return version >= (3, 12, 2)
    return version >= (3, 13)


#: False where ``.npy`` headers must not be parsed concurrently (see the module docstring).
HEADER_PARSE_THREAD_SAFE = _parse_is_thread_safe(tuple(sys.version_info[:3]))

_HEADER_LOCK = threading.Lock()


def header_lock() -> contextlib.AbstractContextManager:
    """The process-wide lock around header parses (a no-op where the parse is thread-safe)."""
    return contextlib.nullcontext() if HEADER_PARSE_THREAD_SAFE else _HEADER_LOCK


def load_npy(file: str | os.PathLike | Any, mmap_mode: str | None = None, *, allow_pickle: bool = False):
    """``np.load`` whose header parse never runs concurrently where that is unsafe.

    Parameters
    ----------
    file
        A path (``.npy`` or ``.npz``) or an open binary file.
    mmap_mode
        As for ``np.load``: ``"r"``, ``"r+"``, ``"c"`` map the array; None reads it.

    A path is mapped under the lock (which parses the header only) and, without
    ``mmap_mode``, copied into memory outside it. An open file is loaded whole under the
    lock. Members of an ``.npz`` are read with :func:`npz_member`.
    """
    if not isinstance(file, (str, os.PathLike)):
        with header_lock():
            return np.load(file, allow_pickle=allow_pickle)
    with header_lock():
        loaded = np.load(file, mmap_mode=mmap_mode or "r", allow_pickle=allow_pickle)
    if mmap_mode is not None or not isinstance(loaded, np.memmap):
        return loaded
    array = np.array(loaded)
    del loaded
    return array


def npz_member(npz: Any, key: str) -> np.ndarray:
    """``npz[key]`` of an open ``np.lib.npyio.NpzFile`` (it parses the member's header)."""
    with header_lock():
        return npz[key]
