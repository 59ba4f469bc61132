"""Counts read from a file, checked before anything is sized by them.

A count in a file is a claim: OGB's ``num-node-list.csv.gz`` says how many nodes to
make room for, an ``.npy`` header how many elements follow, a label how many classes
there are. Allocated blindly, a crafted claim of 10^12 ends in a ``MemoryError`` with no
word of where it came from (or, worse, in minutes of swapping). So a claim is checked
first against what the file can hold, where that is known, and against the memory the
machine has available (:func:`check_claim`), and a claim beyond either is refused naming
the file, the claim and what bounds it.
"""

from __future__ import annotations

import psutil

from asepr.storage.errors import InputError, format_problem

__all__ = ["available_memory", "check_claim", "check_stored"]


def available_memory() -> int:
    """Bytes of memory available to a new allocation on this machine now."""
    return int(psutil.virtual_memory().available)


def _bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB", "PiB"):
        if n < 1024 or unit == "PiB":
            return f"{n:,.0f} {unit}" if unit == "B" else f"{n:,.1f} {unit}"
        n /= 1024
    return f"{n:,.1f} PiB"


def check_claim(count: int, item_bytes: int, *, where: str, claim: str, fix: str) -> None:
    """Refuse a ``claim`` of ``count`` items that would take more than the available memory
    at ``item_bytes`` each (InputError naming ``where``, the claim and the memory)."""
    need = int(count) * int(item_bytes)
    available = available_memory()
    if need > available:
        raise InputError(format_problem(
            where, f"{claim} whose arrays fit in this machine's available memory ({_bytes(available)})",
            f"{int(count):,} ({_bytes(need)} at {item_bytes} bytes each)", fix))


def check_stored(claimed_bytes: int, stored_bytes: int, *, where: str, claim: str, fix: str) -> None:
    """Refuse a ``claim`` of ``claimed_bytes`` of data where the file holds only ``stored_bytes``."""
    if claimed_bytes > stored_bytes:
        raise InputError(format_problem(
            where, f"{claim} that the file can hold ({_bytes(stored_bytes)} of data)",
            f"a claim of {_bytes(claimed_bytes)}", fix))
