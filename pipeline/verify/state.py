"""``asepr verify``, check 8: ``state.zarr`` is intact and agrees with the stores.

The state is read once (:func:`load_state`: every array against its checksum, the
checksums against the store's). The partition scans record, per node, which
partitions hold it and which it touches an assigned (non-halo) edge of
(:class:`ReplicaBits`, the state's own bitset layout, O(N * ceil(k / 64))); after the
scans the state must agree with them: the replica bitsets equal the touched bits of
every scanned partition (and set none for a node a partition does not hold), the
loads are the partitions' assigned edge counts, and the masters are the stores'.
"""

from __future__ import annotations

import numpy as np

from asepr.storage.errors import AseprError, StoreError
from asepr.storage.partitions.state import open_state, resolve_state_url, state_problems

__all__ = ["ReplicaBits", "load_state", "state_masters_problems", "state_partition_problems"]


def load_state(out, manifest, storage_options, num_nodes: int, num_parts: int,
               problems: list[tuple[str, str]]) -> dict | None:
    """The state's loads, replicas and masters (O(N)), or None (no state, or a problem).

    One read: :func:`asepr.storage.partitions.state.open_state` checks every array's digest as it loads
    it. Only when that fails (or the digests cover other arrays than the state holds)
    does :func:`asepr.storage.partitions.state.state_problems` list each problem.
    """
    if not manifest.get("state"):
        return None
    try:
        url = resolve_state_url(out, manifest, storage_options=storage_options)
    except AseprError as exc:
        problems.append(("state", str(exc)))
        return None
    try:
        state = open_state(url, verify=True, storage_options=storage_options)
        covered = sorted(state.attrs.get("array_checksums") or {}) == sorted(state.arrays)
    except StoreError as exc:
        state, covered = None, False
        error = str(exc)
    if state is None or not covered:
        found = state_problems(url, storage_options=storage_options)
        problems += [("state", message) for message in (found or [error])]
        return None
    if state.num_nodes != num_nodes or state.num_parts != num_parts:
        problems.append(("state", f"{state.num_nodes} nodes and {state.num_parts} partitions, the manifest says "
                                  f"{num_nodes} and {num_parts}"))
        return None
    if state.num_edges != int(manifest["num_edges"]):
        problems.append(("state", f"num_edges {state.num_edges}, the manifest says {manifest['num_edges']}"))
    return {"loads": state["partitions/loads"], "replicas": state["vertices/replicas"],
            "master": state["vertices/master"]}


class ReplicaBits:
    """Per node and partition: held by the store (``present``), touching an assigned edge
    there (``touched``); uint64 words, bit ``p & 63`` of word ``p >> 6``."""

    def __init__(self, num_nodes: int, num_parts: int):
        words = max(1, -(-num_parts // 64))
        self.present = np.zeros((num_nodes, words), dtype=np.uint64)
        self.touched = np.zeros((num_nodes, words), dtype=np.uint64)

    def add(self, part_id: int, gids: np.ndarray, touched: np.ndarray) -> None:
        """Record partition ``part_id``'s nodes (``gids``, checked in range) and its touched rows."""
        word, bit = part_id >> 6, np.uint64(1) << np.uint64(part_id & 63)
        self.present[gids, word] |= bit
        self.touched[gids[touched], word] |= bit


def _column(words: np.ndarray, part_id: int) -> np.ndarray:
    return ((words[:, part_id >> 6] >> np.uint64(part_id & 63)) & np.uint64(1)).astype(bool)


def state_partition_problems(state: dict, bits: ReplicaBits, edges: dict[int, int]) -> list[tuple[str, str]]:
    """Loads and replica bits of each scanned partition (``edges``: part_id -> assigned edges)."""
    found = []
    replicas = state["replicas"]
    if replicas.shape != bits.present.shape:
        return [("state", f"vertices/replicas has shape {list(replicas.shape)}, expected "
                          f"{list(bits.present.shape)}")]
    wrong_any = np.bitwise_or.reduce((replicas ^ bits.touched) & bits.present, axis=0)
    stray_any = np.bitwise_or.reduce(replicas & ~bits.present, axis=0)
    for p, count in sorted(edges.items()):
        where = f"partition {p}"
        if int(state["loads"][p]) != count:
            found.append((where, f"holds {count:,} assigned edges, the state's load says {int(state['loads'][p]):,}"))
        flag = np.uint64(1) << np.uint64(p & 63)
        if wrong_any[p >> 6] & flag:
            present = _column(bits.present, p)
            wrong = np.flatnonzero(present & (_column(replicas, p) != _column(bits.touched, p)))
            found.append((where, f"the state's replica bit disagrees for {len(wrong):,} node(s), e.g. global_nid "
                                 f"{wrong[:5].tolist()}"))
        if stray_any[p >> 6] & flag:
            others = int(np.count_nonzero(_column(replicas, p) & ~_column(bits.present, p)))
            found.append((where, f"the state has {others:,} replica(s) here of nodes the store does not hold"))
    return found


def state_masters_problems(state: dict, master_part: np.ndarray, master_count: np.ndarray) -> list[tuple[str, str]]:
    """Nodes with exactly one master in the stores must have that master in the state."""
    ok = master_count == 1
    bad = np.flatnonzero(ok & (state["master"].astype(np.int64) != master_part))
    if not len(bad):
        return []
    v = int(bad[0])
    return [("state", f"{len(bad):,} node(s) have another master in the state than in the stores, e.g. "
                      f"global_nid {v}: state {int(state['master'][v])}, stores {int(master_part[v])}")]
