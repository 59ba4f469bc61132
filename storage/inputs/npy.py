"""Reading ``.npy`` files from many threads at once, and writing arrays to a disk that may fill up.

``np.load`` parses every ``.npy`` header with :func:`ast.literal_eval`. On CPython 3.11
before 3.11.8, and 3.12 before 3.12.2, the AST constructor keeps its recursion depth in
state that all threads share (CPython gh-106905, fixed by giving each call its own
counter), so two threads that parse headers at the same moment can fail with
``SystemError: AST constructor recursion depth mismatch``. The stages that run on
threads (``--workers 0``) load spill files concurrently, so every ``.npy`` read of the
project goes through :func:`load_npy`, which parses the header under one process-wide
lock on those versions and reads the data outside it.

``ndarray.tofile`` (which ``np.save`` uses too) writes through C ``fwrite`` and reports
a full disk as ``OSError: 119819 requested and 111097 written``, with no errno and no
file name. :func:`write_array` and :func:`save_npy` write through the Python file
object instead, so a full disk is an ``OSError`` with ``ENOSPC`` (or ``EDQUOT``) and the
file's path, which the project's error for a full disk names.
"""

from __future__ import annotations

import contextlib
import errno
import os
import sys
import threading
from typing import Any

import numpy as np

__all__ = ["HEADER_PARSE_THREAD_SAFE", "header_lock", "load_npy", "npz_member", "npz_member_header", "save_npy",
           "write_array"]


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


def npz_member_header(npz: Any, key: str) -> tuple[tuple[int, ...], np.dtype, int] | None:
    """What member ``key`` of an open ``NpzFile`` claims, without reading its data:
    ``(shape, dtype, bytes of data the member holds)``; None for a header version this
    reads only through ``np.load`` (3.0).

    The member's uncompressed size (its zip entry's ``file_size``) minus the header is what
    the data can be, so a header that claims more is known to lie before any allocation.
    """
    name = key if key in npz.zip.namelist() else f"{key}.npy"
    size = npz.zip.getinfo(name).file_size
    with npz.zip.open(name) as fh, header_lock():
        version = np.lib.format.read_magic(fh)
        if version == (1, 0):
            shape, _, dtype = np.lib.format.read_array_header_1_0(fh)
        elif version == (2, 0):
            shape, _, dtype = np.lib.format.read_array_header_2_0(fh)
        else:
            return None
        return tuple(int(s) for s in shape), np.dtype(dtype), size - fh.tell()


def write_array(fh: Any, array: np.ndarray) -> None:
    """Write ``array``'s bytes in C order to the binary file ``fh`` (as ``array.tofile(fh)``).

    Raises
    ------
    OSError
        With the operating system's errno (``ENOSPC`` on a full disk) and ``fh``'s path.
    """
    view = memoryview(np.ascontiguousarray(array).reshape(-1).view(np.uint8))
    name = getattr(fh, "name", None)
    try:
        while len(view):
            written = fh.write(view)
            if not written:
                raise OSError(errno.EIO, "the write made no progress", name)
            view = view[written:]
    except OSError as exc:
        if exc.filename is None and exc.errno is not None and isinstance(name, (str, bytes, os.PathLike)):
            raise OSError(exc.errno, exc.strerror, name) from exc
        raise


def save_npy(file: Any, array: np.ndarray) -> None:
    """``np.save(file, array)`` (format 1.0, no pickles) through :func:`write_array`.

    ``file`` is a path (``.npy`` is not appended) or an open binary file.
    """
    array = np.asanyarray(array)
    if array.dtype.hasobject:
        raise ValueError("save_npy writes plain arrays, not object arrays")
    header = np.lib.format.header_data_from_array_1_0(array)
    data = array.T if header["fortran_order"] else array
    if isinstance(file, (str, os.PathLike)):
        with open(file, "wb") as fh:
            np.lib.format.write_array_header_1_0(fh, header)
            write_array(fh, data)
        return
    np.lib.format.write_array_header_1_0(file, header)
    write_array(file, data)
