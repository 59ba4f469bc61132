"""``asepr verify``, check 5: the partitions' edges are the input's edge rows, as multisets.

Two steps, both out of core and in O(1) memory besides one edge batch:

1. **Fingerprints** (every run). Each edge ``(u, v)`` is the integer key
   ``e = u * N + v`` (``N`` nodes; distinct edges have distinct keys). Edges fall into
   ``FINGERPRINT_BUCKETS`` buckets by their source ``u``. For each bucket ``b`` and
   each side (input, partitions) we keep the exact count of its edges and, in
   ``LANES`` independent lanes, the value of its characteristic polynomial at a point
   ``z``::

       F_b(z) = prod over the edges e of bucket b (with multiplicity) of (z - e)   mod p

   with ``p = 2**61 - 1`` (prime) and ``z`` drawn uniformly from ``[N**2, p)`` by
   :mod:`secrets` at the start of each run, one per lane. The product commutes, so
   the input is folded in stream order and each partition row by row, in any order
   and on any thread, and the folds of several threads are multiplied together.

   *Why it is as strict as the sort* (the argument, not a heuristic): the keys lie in
   ``[0, N**2)``, below ``p`` (this path needs ``p - N**2 >= 2**60``, i.e. fewer than
   about 1.07e9 nodes; otherwise step 2 runs for every bucket), so they are distinct
   elements of the field ``GF(p)``. Two multisets ``A != B`` of keys have different
   monic polynomials ``P_A(x) = prod (x - a)`` and ``P_B(x)`` (``GF(p)[x]`` factors
   uniquely), so ``P_A - P_B`` is a nonzero polynomial of degree at most
   ``m = max(|A|, |B|)`` and has at most ``m`` roots. ``z`` is uniform over
   ``p - N**2`` values and is chosen after the files were written, so nothing that
   wrote or damaged them can aim at it: a differing bucket goes unnoticed in one lane
   with probability at most ``m / (p - N**2)``, in both (independent) lanes at most
   ``(m / (p - N**2))**2``. Over all buckets that is at most
   ``sum_b (m_b / (p - N**2))**2 <= |E| * max_b m_b / 2**120``, which each run computes
   from its counts and logs (:func:`miss_bound`): on the 50 M-edge synthetic graph
   (``max_b m_b`` = 8,009) about ``8e-26``; below ``2**-60`` whenever
   ``|E| * max_b m_b <= 2**60``, so for every graph of up to ``2**30`` edges. The counts
   are compared exactly. This is the polynomial identity test (Schwartz-Zippel; the
   multiset hash of Clarke et al., "Incremental Multiset Hash Functions", 2003, in its
   characteristic-polynomial form). ``z - e`` is never 0 (``z >= N**2 > e``).

2. **Exact diagnosis** (only for the buckets whose count or fingerprint differ, or
   for all of them when ``N**2 >= p`` or ``edge_check="exact"``): the edges whose
   source falls in such a bucket are hashed into bucket files on disk (both sides),
   each file is sorted and compared, and each differing edge is named with its
   multiplicities and the partitions that hold it. The sets of differing edges are
   the same as a full comparison's, so the messages are too.
"""

from __future__ import annotations

import math
import secrets
import shutil
import tempfile
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import numba
import numpy as np
import pyarrow as pa
from llvmlite import ir
from numba.core import types
from numba.extending import intrinsic

from asepr.pipeline.stream import iter_edge_batches
from asepr.storage.inputs.npy import write_array

__all__ = [
    "EDGE_CHECKS",
    "FINGERPRINT_BUCKETS",
    "LANES",
    "MERSENNE_61",
    "BucketSink",
    "EdgeFingerprint",
    "InputEdges",
    "bucket_count",
    "compare_bucket_files",
    "draw_points",
    "exact_edge_problems",
    "fingerprint_applies",
    "fold_input_batch",
    "fold_partition",
    "miss_bound",
    "mulmod61",
    "scan_input_edges",
    "source_buckets",
]

#: The prime modulus of the fingerprints.
MERSENNE_61 = (1 << 61) - 1
#: Buckets by source node (a power of two; 65,536 x (8 + 2 x 8) bytes per side fit in L2).
FINGERPRINT_BUCKETS = 1 << 16
_BUCKET_SHIFT = np.uint64(64 - 16)
#: Independent evaluation points.
LANES = 2
#: ``edge_check`` choices of :func:`asepr.pipeline.verify.verify_output`.
EDGE_CHECKS = ("fingerprint", "exact")

_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_BUCKET_EDGES = 4 << 20
_PART_RECORD = np.dtype([("key", "<i8"), ("part", "<i4")])


def fingerprint_applies(num_nodes: int) -> bool:
    """Whether every edge key ``u * N + v`` lies below the modulus with ``2**60`` points
    to spare above it (see the module docstring)."""
    return num_nodes * num_nodes <= MERSENNE_61 - (1 << 60)


def miss_bound(a: EdgeFingerprint, b: EdgeFingerprint, num_nodes: int) -> float:
    """The bound on the probability that buckets whose multisets differ all went
    unnoticed: ``sum_b (m_b / (p - N**2)) ** LANES`` with ``m_b`` the larger count."""
    m = np.maximum(a.counts, b.counts).astype(np.float64)
    return float(np.sum((m / float(MERSENNE_61 - num_nodes * num_nodes)) ** len(a.z)))


def draw_points(num_nodes: int) -> np.ndarray:
    """``LANES`` evaluation points, uniform in ``[N**2, p)``, from the OS's randomness."""
    low = num_nodes * num_nodes
    return np.array([low + secrets.randbelow(MERSENNE_61 - low) for _ in range(LANES)], dtype=np.uint64)


# --- arithmetic modulo 2**61 - 1 ---------------------------------------------------------


@intrinsic
def _mul_fold61(typingctx, a, b):
    """The 128-bit product of two uint64 folded once: ``(a*b mod 2**61) + (a*b >> 61)``,
    which is ``a*b mod (2**61 - 1)`` plus a multiple of the modulus, below ``2**62`` for
    ``a, b < 2**61``."""
    sig = types.uint64(types.uint64, types.uint64)

    def codegen(context, builder, signature, args):
        i128 = ir.IntType(128)
        prod = builder.mul(builder.zext(args[0], i128), builder.zext(args[1], i128))
        low = builder.and_(prod, ir.Constant(i128, MERSENNE_61))
        high = builder.lshr(prod, ir.Constant(i128, 61))
        return builder.trunc(builder.add(low, high), ir.IntType(64))

    return sig, codegen


@numba.njit(cache=True, inline="always")
def mulmod61(a, b):
    """``a * b mod (2**61 - 1)`` for ``a, b < 2**61`` (2**61 = 1 modulo the prime)."""
    p = np.uint64(MERSENNE_61)
    s = _mul_fold61(a, b)
    s = (s & p) + (s >> np.uint64(61))
    return s - p if s >= p else s


@numba.njit(cache=True, inline="always")
def _bucket(u):
    return (np.uint64(u) * _GOLDEN) >> _BUCKET_SHIFT


@numba.njit(cache=True, inline="always")
def _fold_keys(buckets, keys, size, z, counts, acc):
    for i in range(size):
        b = buckets[i]
        counts[b] += 1
        for lane in range(acc.shape[1]):
            acc[b, lane] = mulmod61(acc[b, lane], z[lane] - keys[i])


@numba.njit(cache=True, nogil=True)
def _fold_input(src, dst, num_nodes, z, counts, acc):
    n = np.int64(num_nodes)
    for i in range(len(src)):
        if src[i] < 0 or src[i] >= n or dst[i] < 0 or dst[i] >= n:
            return False
    un = np.uint64(n)
    for i in range(len(src)):
        b = _bucket(src[i])
        key = np.uint64(src[i]) * un + np.uint64(dst[i])
        counts[b] += 1
        for lane in range(acc.shape[1]):
            acc[b, lane] = mulmod61(acc[b, lane], z[lane] - key)
    return True


@numba.njit(cache=True, nogil=True)
def _fold_rows(gids, indptr, indices, owned, num_nodes, z, counts, acc):
    # Keys are gathered a block at a time, then folded: the gathers' cache misses then
    # overlap instead of waiting behind the chains of multiplications (3x faster).
    un = np.uint64(num_nodes)
    block = 4096
    keys = np.empty(block, dtype=np.uint64)
    buckets = np.empty(block, dtype=np.uint64)
    size = 0
    for u in range(len(gids)):
        b = _bucket(gids[u])
        base = np.uint64(gids[u]) * un
        for j in range(indptr[u], indptr[u + 1]):
            if len(owned) and not owned[j]:
                continue
            keys[size] = base + np.uint64(gids[indices[j]])
            buckets[size] = b
            size += 1
            if size == block:
                _fold_keys(buckets, keys, size, z, counts, acc)
                size = 0
    _fold_keys(buckets, keys, size, z, counts, acc)


@numba.njit(cache=True, nogil=True)
def _combine(acc, other):
    for b in range(acc.shape[0]):
        for lane in range(acc.shape[1]):
            acc[b, lane] = mulmod61(acc[b, lane], other[b, lane])


class EdgeFingerprint:
    """One side's per-bucket edge counts and polynomial values (see the module docstring)."""

    def __init__(self, z: np.ndarray):
        self.z = z
        self.counts = np.zeros(FINGERPRINT_BUCKETS, dtype=np.int64)
        self.acc = np.ones((FINGERPRINT_BUCKETS, len(z)), dtype=np.uint64)

    def merge(self, other: EdgeFingerprint) -> None:
        """Fold another fingerprint of the same points into this one (order-free)."""
        self.counts += other.counts
        _combine(self.acc, other.acc)

    def differing_buckets(self, other: EdgeFingerprint) -> np.ndarray:
        """Boolean mask of the buckets whose counts or values differ."""
        return (self.counts != other.counts) | (self.acc != other.acc).any(axis=1)


def fold_input_batch(fp: EdgeFingerprint, src: np.ndarray, dst: np.ndarray, num_nodes: int) -> bool:
    """Fold one input batch; False (nothing folded) when an id lies outside ``[0, N)``."""
    return bool(_fold_input(src, dst, num_nodes, fp.z, fp.counts, fp.acc))


def fold_partition(fp: EdgeFingerprint, gids: np.ndarray, indptr: np.ndarray, indices: np.ndarray,
                   owned: np.ndarray | None, num_nodes: int) -> None:
    """Fold one partition's (owned) edges; its CSR must already be checked in range."""
    owned = np.zeros(0, dtype=np.bool_) if owned is None else owned
    _fold_rows(gids, indptr, indices, owned, num_nodes, fp.z, fp.counts, fp.acc)


@numba.njit(cache=True, nogil=True)
def _count_in(src, dst, undirected, in_degree):
    for i in range(len(src)):
        in_degree[dst[i]] += 1
        if undirected and src[i] != dst[i]:
            in_degree[src[i]] += 1


@dataclass
class InputEdges:
    """What one pass over a run of input edge shards found."""

    rows: int
    fingerprint: EdgeFingerprint | None
    in_degree: np.ndarray | None
    bad_url: str | None = None


def scan_input_edges(shards, batch_rows: int, num_nodes: int, z: np.ndarray | None, halo: int,
                     undirected: bool) -> InputEdges:
    """Fold a run of input edge shards (``z`` None: only count and check them); with halo 1,
    count each node's in-edges. Stops at the first batch with an id outside ``[0, N)``
    (``bad_url`` names its shard)."""
    found = InputEdges(0, EdgeFingerprint(z) if z is not None else None,
                       np.zeros(num_nodes, dtype=np.int64) if halo else None)
    try:
        return _scan_input_edges(found, shards, batch_rows, num_nodes, undirected)
    finally:
        # Arrow's allocator keeps the decoded batches' memory; the node table needs it more.
        pa.default_memory_pool().release_unused()


def _scan_input_edges(found: InputEdges, shards, batch_rows: int, num_nodes: int, undirected: bool) -> InputEdges:
    for batch in iter_edge_batches(shards, batch_rows):
        src, dst = batch.src, batch.dst
        found.rows += len(src)
        if found.fingerprint is not None:
            ok = fold_input_batch(found.fingerprint, src, dst, num_nodes)
        else:
            ok = not (src.size and (src.min() < 0 or dst.min() < 0 or src.max() >= num_nodes
                                    or dst.max() >= num_nodes))
        if not ok:
            found.bad_url = shards[batch.shard_index].url
            return found
        if found.in_degree is not None:
            _count_in(src, dst, undirected, found.in_degree)
    return found


def source_buckets(src: np.ndarray) -> np.ndarray:
    """The fingerprint bucket of each source node (as :func:`_bucket`)."""
    return (src.astype(np.uint64) * _GOLDEN) >> _BUCKET_SHIFT


# --- step 2: exact comparison of the selected buckets, out of core ------------------------


def bucket_count(num_edges: int) -> int:
    """Bucket files for the exact comparison: about 4 Mi edges each."""
    return max(1, math.ceil(num_edges / _BUCKET_EDGES))


class BucketSink:
    """Hash-partitions records into ``buckets`` append-only files (by their int64 key)."""

    def __init__(self, directory: Path, buckets: int, dtype: np.dtype):
        directory.mkdir(parents=True)
        self.paths = [directory / f"b{b:05d}.bin" for b in range(buckets)]
        self.files = [open(p, "wb") for p in self.paths]  # noqa: SIM115 - closed by close()
        self.dtype = dtype

    @classmethod
    def for_partitions(cls, directory: Path, buckets: int) -> BucketSink:
        """A sink of ``(key, part)`` records, for the partitions' side."""
        return cls(directory, buckets, _PART_RECORD)

    def add(self, records: np.ndarray, keys: np.ndarray | None = None) -> None:
        keys = records if keys is None else keys
        if len(self.files) == 1:
            write_array(self.files[0], records)
            return
        bucket = ((keys.astype(np.uint64) * _GOLDEN) >> np.uint64(33)) % np.uint64(len(self.files))
        order = np.argsort(bucket, kind="stable")
        bounds = np.searchsorted(bucket[order], np.arange(len(self.files) + 1, dtype=np.uint64))
        records = records[order]
        for b in np.flatnonzero(np.diff(bounds)):
            write_array(self.files[b], records[bounds[b] : bounds[b + 1]])

    def add_partition_edges(self, part_id: int, keys: np.ndarray) -> None:
        """Add one partition's edge keys, tagged with its ``part_id``."""
        records = np.empty(len(keys), dtype=_PART_RECORD)
        records["key"], records["part"] = keys, part_id
        self.add(records, keys=keys)

    def close(self) -> None:
        for fh in self.files:
            fh.close()

    def read(self, b: int) -> np.ndarray:
        return np.fromfile(self.paths[b], dtype=self.dtype)


def compare_bucket_files(in_sink: BucketSink, part_sink: BucketSink, num_nodes: int) -> list[tuple[str, str]]:
    """Sort and compare each pair of bucket files: ``(where, message)`` per differing edge
    (the first five) and a count of all of them."""
    found: list[tuple[str, str]] = []
    differing = 0
    for b in range(len(in_sink.paths)):
        a = np.sort(in_sink.read(b))
        records = part_sink.read(b)
        records = records[np.argsort(records["key"], kind="stable")]
        if np.array_equal(a, records["key"]):
            continue
        ua, ca = np.unique(a, return_counts=True)
        ub, cb = np.unique(records["key"], return_counts=True)
        keys = np.union1d(ua, ub)
        count_a = np.zeros(len(keys), np.int64)
        count_b = np.zeros(len(keys), np.int64)
        count_a[np.searchsorted(keys, ua)] = ca
        count_b[np.searchsorted(keys, ub)] = cb
        bad = np.flatnonzero(count_a != count_b)
        differing += len(bad)
        for i in bad[: max(0, 5 - len(found))]:
            key = int(keys[i])
            lo, hi = np.searchsorted(records["key"], [key, key + 1])
            parts = sorted(set(records["part"][lo:hi].tolist()))
            found.append((
                "edges",
                f"edge ({key // num_nodes}, {key % num_nodes}) appears {int(count_a[i])} time(s) in the input "
                f"and {int(count_b[i])} time(s) in the partitions" + (f" (partitions {parts})" if parts else ""),
            ))
    if differing > len(found):
        found.append(("edges", f"{differing:,} distinct edges differ in multiplicity between input and partitions"))
    return found


def exact_edge_problems(edge_shards, batch_rows: int, partitions: Iterable[tuple[int, np.ndarray, np.ndarray]],
                        num_nodes: int, num_edges: int, select: np.ndarray | None,
                        spill_dir: str | None) -> list[tuple[str, str]]:
    """Step 2: the edges whose source bucket is selected (all with ``select`` None), both
    sides hashed into bucket files under ``spill_dir``, each pair sorted and compared.

    ``partitions`` yields ``(part_id, src, key)`` of each partition's assigned edges.
    """
    spill = Path(tempfile.mkdtemp(prefix="asepr-verify-", dir=spill_dir))
    try:
        buckets = bucket_count(num_edges)
        in_sink = BucketSink(spill / "input", buckets, np.dtype("<i8"))
        for batch in iter_edge_batches(edge_shards, batch_rows):
            keys = batch.src * num_nodes + batch.dst
            in_sink.add(keys if select is None else keys[select[source_buckets(batch.src)]])
        in_sink.close()
        part_sink = BucketSink.for_partitions(spill / "parts", buckets)
        for part_id, src, keys in partitions:
            part_sink.add_partition_edges(part_id, keys if select is None else keys[select[source_buckets(src)]])
        part_sink.close()
        return compare_bucket_files(in_sink, part_sink, num_nodes)
    finally:
        shutil.rmtree(spill, ignore_errors=True)
