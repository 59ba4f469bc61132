"""The cheap structural invariants of a partition store's arrays, checked on every read.

zarr's crc32c codec proves that a chunk is the one that was stored, not that the one
stored is sound: whoever can write the store can rewrite a chunk and its CRC. A reader
that trusted such a chunk would hand a trainer an edge to node 10^9 of a store of 2,376
nodes, a CSR whose rows run backwards, a split of 7 or a feature of NaN, and fail far
from the cause, or not at all. So each block a :class:`~asepr.storage.integrity.checked_array.CheckedArray`
returns is checked against what the layout promises (:func:`store_rules`), at the cost
of one vectorised pass over bytes already in memory:

* ``nodes/global_nid``: non-negative, strictly increasing (below the output's node
  count when the manifest is known);
* ``nodes/x``: finite (the input's validation refuses NaN and infinite features);
* ``nodes/y``: -1 (unknown) or a class id >= 0; ``nodes/split``: -1, 0, 1 or 2;
* ``nodes/is_master``, ``edges/is_halo``: bytes 0 or 1;
* ``edges/indptr``: within ``[0, m]``, never decreasing, 0 in its first row and ``m``
  in its last;
* ``edges/indices``: within ``[0, n)``.

What no structural invariant can see (a finite feature changed to another finite value)
only the content digests find: ``asepr verify`` hashes every array.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

__all__ = ["VALUE_FIX", "Problem", "Rule", "store_rules"]

#: ``(row within the block, what was expected, what was found)``.
Problem = tuple[int, str, str]
#: ``rule(block, start, total)``: the first problem of the rows ``[start, start + len(block))``
#: of an array of ``total`` rows, or None.
Rule = Callable[[np.ndarray, int, int], "Problem | None"]

#: The fix named in every message about a value the layout excludes.
VALUE_FIX = ("the store was altered or damaged after it was written (its chunks' CRCs match); run "
             "`asepr verify OUT` to see what else is, then rerun `asepr partition ... --overwrite` (or restore "
             "the store from a copy).")


def _first(bad: np.ndarray) -> int:
    return int(np.flatnonzero(bad)[0])


def _within(low: int, high: int | None, what: str) -> Rule:
    """Values in ``[low, high)`` (``high`` None: no upper bound)."""
    expected = f"{what} in [{low}, {high})" if high is not None else f"{what} >= {low}"

    def rule(block: np.ndarray, start: int, total: int) -> Problem | None:
        bad = block < low if high is None else (block < low) | (block >= high)
        if not len(block) or not bad.any():
            return None
        row = _first(bad)
        return row, expected, f"{block[row]}"
    return rule


def _increasing(low: int, high: int | None) -> Rule:
    within = _within(low, high, "node ids")

    def rule(block: np.ndarray, start: int, total: int) -> Problem | None:
        problem = within(block, start, total)
        if problem is not None:
            return problem
        bad = np.diff(block) <= 0
        if bad.any():
            row = _first(bad) + 1
            return row, "node ids in strictly increasing order", f"{block[row]} after {block[row - 1]}"
        return None
    return rule


def _finite(block: np.ndarray, start: int, total: int) -> Problem | None:
    ok = np.isfinite(block)
    if ok.all():
        return None
    bad = ~ok.reshape(len(block), -1).all(axis=1)
    row = _first(bad)
    return row, "finite features", f"{block[row][~np.isfinite(block[row])][0]}"


def _split(block: np.ndarray, start: int, total: int) -> Problem | None:
    bad = (block < -1) | (block > 2)
    if not bad.any():
        return None
    row = _first(bad)
    return row, "a split of -1 (none), 0 (train), 1 (val) or 2 (test)", f"{block[row]}"


def _flags(block: np.ndarray, start: int, total: int) -> Problem | None:
    raw = block.view(np.uint8)
    bad = raw > 1
    if not bad.any():
        return None
    row = _first(bad)
    return row, "a flag stored as byte 0 or 1", f"byte {raw[row]}"


def _indptr(num_edges: int) -> Rule:
    within = _within(0, num_edges + 1, "row offsets")

    def rule(block: np.ndarray, start: int, total: int) -> Problem | None:
        if not len(block):
            return None
        if start == 0 and block[0] != 0:
            return 0, "row offsets that start at 0", f"{block[0]}"
        if start + len(block) == total and block[-1] != num_edges:
            return len(block) - 1, f"row offsets that end at the edge count {num_edges}", f"{block[-1]}"
        problem = within(block, start, total)
        if problem is not None:
            return problem
        bad = np.diff(block) < 0
        if bad.any():
            row = _first(bad) + 1
            return row, "row offsets that never decrease", f"{block[row]} after {block[row - 1]}"
        return None
    return rule


def store_rules(num_nodes: int, num_edges: int, *, global_nodes: int | None = None) -> dict[str, Rule]:
    """The rule of each array of a store of ``num_nodes`` rows and ``num_edges`` edges
    (``global_nodes``: the output's node count, when the manifest is known)."""
    return {
        "nodes/global_nid": _increasing(0, global_nodes),
        "nodes/x": _finite,
        "nodes/y": _within(-1, None, "labels"),
        "nodes/split": _split,
        "nodes/is_master": _flags,
        "edges/indptr": _indptr(num_edges),
        "edges/indices": _within(0, num_nodes, "destination rows (part-local node ids)"),
        "edges/is_halo": _flags,
    }
