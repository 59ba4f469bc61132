"""``asepr verify``, checks 1 to 3 for one partition store, from one read of each array.

:func:`scan_partition` opens a store, checks its attributes against the manifest,
reads each array once through the checked reader (zarr checks every chunk's crc32c),
hashes what it read against the store's ``array_checksums`` and checks the CSR
layout, and returns what the checks across partitions need (:class:`PartitionScan`).
A store whose chunks are missing, undecodable or altered is described chunk by chunk
by :func:`asepr.storage.partitions.store.checksum_problems` (which reads it again), then
scanned again with its damaged chunks read as the fill value, so that the problems it
causes elsewhere (masters, edges, node rows) are reported too. A well-formed store's
assigned edges must also be within its share's cap (:mod:`asepr.pipeline.verify.shares`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numba
import numpy as np

from asepr.pipeline.verify.shares import share_problems
from asepr.storage.errors import StoreError
from asepr.storage.partitions.output_stores import resolve_store_url
from asepr.storage.partitions.store import (
    EDGE_ARRAYS,
    PartitionStore,
    array_digest,
    checksum_problems,
    combine_digests,
    open_store,
)

__all__ = ["CSR_ARRAYS", "NODE_ROW_ARRAYS", "Csr", "PartitionScan", "owned_edge_keys", "read_arrays",
           "scan_partition"]

#: What the CSR checks read (``edges/is_halo`` too with halo 1).
CSR_ARRAYS = ("nodes/global_nid", "nodes/is_master", *EDGE_ARRAYS)
#: What the node row comparison reads.
NODE_ROW_ARRAYS = ("nodes/global_nid", "nodes/x", "nodes/y", "nodes/split")


@dataclass
class Csr:
    """A partition's checked CSR and what one pass over it found."""

    gids: np.ndarray
    is_master: np.ndarray
    indptr: np.ndarray
    indices: np.ndarray
    owned: np.ndarray | None
    touched_owned: np.ndarray
    into: np.ndarray | None
    owned_edges: int


@dataclass
class PartitionScan:
    """One partition's findings. ``store`` is None when it could not be opened or its
    layout is wrong; ``csr`` is None when the CSR is malformed; ``arrays`` holds the node
    rows read (for the node comparison); ``node_error`` says why they are not there
    when they did not decode."""

    part_id: int
    problems: list[tuple[str, str]] = field(default_factory=list)
    store: PartitionStore | None = None
    damaged: bool = False
    csr: Csr | None = None
    arrays: dict[str, np.ndarray] = field(default_factory=dict)
    node_error: str | None = None


def read_arrays(store: PartitionStore, names) -> dict[str, np.ndarray]:
    """Read whole arrays (checked or not, as the store was opened)."""
    return {name: np.asarray(store.arrays[name][...]) for name in names}


def _attr_problems(store: PartitionStore, entry, manifest) -> list[str]:
    attrs = store.attrs
    expect = {
        "part_id": int(entry["part_id"]),
        "num_parts": int(manifest["num_parts"]),
        "generation": int(entry.get("generation", manifest["generation"])),
        "checksum": entry.get("checksum"),
        "undirected": bool(manifest.get("undirected", False)),
        "halo": int(manifest.get("halo", 0)),
    }
    return [f"attrs {key} is {attrs.get(key)!r}, the manifest says {value!r}"
            for key, value in expect.items() if attrs.get(key) != value]


def _digests_match(store: PartitionStore, data: dict[str, np.ndarray]) -> bool:
    """Whether the arrays read hash to the recorded digests, and those to the checksum."""
    recorded = dict(store.attrs.get("array_checksums") or {})
    if sorted(recorded) != sorted(store.arrays) or sorted(data) != sorted(store.arrays):
        return False
    if any(array_digest(name, data[name]) != recorded[name] for name in store.arrays):
        return False
    return combine_digests(recorded) == store.attrs.get("checksum")


def _layout_problems(store: PartitionStore, entry, manifest) -> tuple[bool, list[str]]:
    n, m = store.num_nodes, store.num_edges
    d = int(manifest.get("feat_dim", store.x.shape[1] if len(store.x.shape) == 2 else 0))
    shapes = {
        "nodes/global_nid": ((n,), ("int64",)), "nodes/x": ((n, d), ("float32",)),
        "nodes/y": ((n,), ("int64",)), "nodes/split": ((n,), ("int8",)),
        "nodes/is_master": ((n,), ("bool",)), "edges/indptr": ((n + 1,), ("int64",)),
        "edges/indices": ((m,), ("int32", "int64")),
    }
    if manifest.get("halo"):
        shapes["edges/is_halo"] = ((m,), ("bool",))
    ok, found = True, []
    for name, (shape, dtypes) in shapes.items():
        array = store.arrays.get(name)
        if array is None:
            found.append(f"array {name} is missing")
            ok = False
        elif tuple(array.shape) != shape or array.dtype.name not in dtypes:
            found.append(f"array {name}: expected {'|'.join(dtypes)} {list(shape)}, "
                         f"found {array.dtype.name} {list(array.shape)}")
            ok = False
    counts = store.attrs.get("counts", {})
    for key, value in (("nodes", n), ("edges", m)):
        if counts.get(key) != value or entry.get("counts", {}).get(key) != value:
            found.append(f"counts.{key}: attrs say {counts.get(key)}, manifest "
                         f"{entry.get('counts', {}).get(key)}, the arrays hold {value}")
    return ok, found


def _read_checked(scan: PartitionScan) -> dict[str, np.ndarray] | None:
    """Every array once, checked and hashed against its digest: the arrays, or None when a
    chunk is missing, undecodable or altered (each problem is recorded, chunk by chunk)."""
    store, where = scan.store, f"partition {scan.part_id}"
    try:
        data = read_arrays(store, list(store.arrays))
        if _digests_match(store, data):
            return data
    except StoreError:
        data = None
    found = checksum_problems(store)
    scan.problems += [(where, f"checksum mismatch: {name}") for name in found]
    scan.damaged = bool(found) or data is None
    return data


def _read_unchecked(scan: PartitionScan, url, storage_options, halo: int) -> dict[str, np.ndarray] | None:
    """A damaged store's arrays, its damaged chunks read as the fill value: None when the
    CSR still does not read (recorded); node rows that do not are left out
    (``scan.node_error`` says why)."""
    scan.store = open_store(url, storage_options=storage_options, verify=False)
    try:
        data = read_arrays(scan.store, list(CSR_ARRAYS) + (["edges/is_halo"] if halo else []))
    except Exception as exc:  # noqa: BLE001 - a damaged store may fail to decode in any way
        scan.problems.append((f"partition {scan.part_id}",
                              f"could not be scanned past its damage ({type(exc).__name__}: {exc})"))
        return None
    try:
        data.update(read_arrays(scan.store, NODE_ROW_ARRAYS[1:]))
    except Exception as exc:  # noqa: BLE001 - as above; the node comparison reports it
        scan.node_error = f"{type(exc).__name__}: {exc}"
    return data


def _check_csr(where: str, data: dict[str, np.ndarray], attrs, num_nodes: int, halo: int,
               undirected: bool) -> tuple[Csr | None, list[tuple[str, str]]]:
    """Check 3 on the arrays read: ``(csr, problems)``; ``csr`` None when it is malformed."""
    gids, is_master = data["nodes/global_nid"], data["nodes/is_master"]
    indptr, indices = data["edges/indptr"], data["edges/indices"]
    n, m = len(gids), len(indices)
    if n and (gids[0] < 0 or gids[-1] >= num_nodes or (np.diff(gids) <= 0).any()):
        return None, [(where, f"nodes/global_nid must be strictly increasing within [0, {num_nodes})")]
    if indptr[0] != 0 or indptr[-1] != m or (np.diff(indptr) < 0).any():
        return None, [(where, f"edges/indptr must start at 0, never decrease and end at {m}; "
                              f"found start {indptr[0]}, end {indptr[-1]}")]
    if m and (indices.min() < 0 or indices.max() >= n):
        return None, [(where, f"edges/indices must lie in [0, {n}); found [{indices.min()}, {indices.max()}]")]
    is_halo = data.get("edges/is_halo") if halo else None
    owned = ~is_halo if is_halo is not None else None
    unsorted, touched, touched_owned, into, owned_edges = _walk(
        indptr, indices, owned if owned is not None else np.zeros(0, np.bool_), undirected, bool(halo))
    found = []
    if unsorted >= 0:
        found.append((where, f"edges/indices are not sorted within row {unsorted}"))
    stray = np.flatnonzero(~touched & ~is_master)
    if len(stray):
        found.append((where, f"{len(stray):,} node(s) have no edge here and are not mastered here, "
                             f"e.g. global_nid {gids[stray[:5]].tolist()}"))
    if is_halo is not None and int(is_halo.sum()) != attrs.get("counts", {}).get("halo_edges"):
        found.append((where, f"{int(is_halo.sum())} halo edges, attrs counts say "
                             f"{attrs.get('counts', {}).get('halo_edges')}"))
    csr = Csr(gids, is_master, indptr, indices, owned, touched_owned, into if halo else None, int(owned_edges))
    return csr, found


def scan_partition(out, manifest, entry, storage_options) -> PartitionScan:
    """Open, check and read one partition (checks 1 to 3 of :mod:`asepr.pipeline.verify`)."""
    scan = PartitionScan(int(entry["part_id"]))
    where = f"partition {scan.part_id}"
    halo = int(manifest.get("halo", 0))
    try:
        url = resolve_store_url(out, manifest, entry, storage_options)
        scan.store = open_store(url, storage_options=storage_options)
    except StoreError as exc:
        scan.problems.append((where, str(exc)))
        scan.store = None
        return scan
    scan.problems += [(where, m) for m in _attr_problems(scan.store, entry, manifest)]
    data = _read_checked(scan)
    layout_ok, found = _layout_problems(scan.store, entry, manifest)
    scan.problems += [(where, m) for m in found]
    if layout_ok and scan.damaged:
        data = _read_unchecked(scan, url, storage_options, halo)
    if not layout_ok or data is None:
        scan.store = None
        return scan
    scan.csr, found = _check_csr(where, data, scan.store.attrs, int(manifest["num_nodes"]), halo,
                                 bool(manifest.get("undirected", False)))
    scan.problems += found
    if scan.csr is not None:
        scan.problems += [(where, m) for m in share_problems(manifest, scan.part_id, scan.csr.owned_edges)]
    scan.arrays = {name: data[name] for name in NODE_ROW_ARRAYS if name in data}
    return scan


def owned_edge_keys(store: PartitionStore, num_nodes: int, halo: int) -> tuple[np.ndarray, np.ndarray]:
    """A scanned partition's assigned edges again (for the exact edge comparison): ``(src, key)``
    in ``global_nid`` space, ``key = src * N + dst``."""
    data = read_arrays(store, list(CSR_ARRAYS) + (["edges/is_halo"] if halo else []))
    gids, indptr = data["nodes/global_nid"], data["edges/indptr"]
    row = np.repeat(np.arange(len(gids), dtype=np.int64), np.diff(indptr))
    src, dst = gids[row], gids[data["edges/indices"]]
    if halo:
        keep = ~data["edges/is_halo"]
        src, dst = src[keep], dst[keep]
    return src, src * num_nodes + dst


@numba.njit(cache=True, nogil=True)
def _walk(indptr, indices, owned, undirected, halo):
    """One pass over a CSR whose ranges are checked: the first row not sorted (-1: none),
    nodes touching any edge, nodes touching an owned edge, in-edges per node (halo), owned edges."""
    n = len(indptr) - 1
    unsorted = -1
    touched = np.zeros(n, dtype=np.bool_)
    touched_owned = np.zeros(n, dtype=np.bool_)
    into = np.zeros(n if halo else 0, dtype=np.int64)
    owned_edges = 0
    for u in range(n):
        lo, hi = indptr[u], indptr[u + 1]
        if hi > lo:
            touched[u] = True
        for j in range(lo, hi):
            w = indices[j]
            touched[w] = True
            if j > lo and w < indices[j - 1] and unsorted < 0:
                unsorted = u
            if len(owned) == 0 or owned[j]:
                touched_owned[u] = True
                touched_owned[w] = True
                owned_edges += 1
            if halo:
                into[w] += 1
                if undirected and u != w:
                    into[u] += 1
    return unsorted, touched, touched_owned, into, owned_edges
