"""Streaming synthetic attributed graphs: a degree-corrected SBM with class features.

The model
---------
Every node has a class (``label``) and a degree propensity ``theta``. ``theta`` is
Pareto-distributed (pdf ∝ theta^-exponent on ``[1, cutoff]``). The cutoff is chosen so
that the largest expected degree, ``2M·cutoff/W``, is about ``sqrt(2M)`` (the structural
cutoff of Chung-Lu graphs; ``W`` is the total propensity). Without it a few hubs would
draw thousands of parallel edges.

Each edge is drawn independently:

1. it is intra-class with probability ``homophily`` (the edge homophily H);
2. the source ``u`` is drawn ∝ theta over all nodes;
3. the destination is drawn ∝ theta within ``u``'s class (intra) or outside it (inter);
4. a self-loop (or a float rounding that crosses a class border) is redrawn, keeping
   the edge's intra/inter kind, so the expected share of intra-class edges is exactly H;
5. the edge gets a random orientation and is stored once (``meta.undirected`` is true).

Parallel edges are possible (as in any Chung-Lu or DC-SBM sample) but rare thanks to
the cutoff. Features are the class centroid (seeded, ``N(0, 1)`` per dimension) plus
``N(0, noise²)`` noise. The categorical column ``category`` equals the class with
probability ``category_purity``, else it is uniform over the classes. The split is
i.i.d. per node: 60 % train, 20 % validation, 20 % test by default (``split``; a
products-like graph takes 8 / 2 / 90, OGB's shares of ogbn-products).

How it is sampled, in O(N) memory
---------------------------------
Nodes are laid out in *class order* (class ``c`` holds the positions
``[c·N/C, (c+1)·N/C)``), with ``cs`` the cumulative sum of theta in that order. A draw
∝ theta inside a range of positions is a uniform number in the matching ``cs`` range,
located by a guide table (Chen's method: ``guide[g]`` is the first position whose
interval may hold a number of bucket ``g``), which takes O(1) expected steps where a
binary search would take ~23 cache misses. The draw outside a class is a uniform number
in ``[0, W - vol_c)``, shifted past the class's range. A seeded random permutation maps
positions to ``global_nid``, so the id says nothing about the class or the degree.

The state (theta cumsum, guide, class and permutation arrays) is O(N); edges are made
in blocks of :data:`EDGE_BLOCK` and node rows in blocks of about 32 MiB, each block with
its own generator derived from ``np.random.SeedSequence(seed)``. A seeded run is
therefore reproducible, and the graph does not depend on ``shard_rows`` (only the file
cut does).

On-disk layout: see :mod:`asepr.storage.inputs.writer` (``edges/``, ``nodes/`` with the extra
int64 column ``category``, ``meta.json``).
"""

from __future__ import annotations

import logging
import math
import numbers
import resource
import sys
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from asepr.storage.errors import InputError, format_problem
from asepr.storage.inputs.writer import InputWriter

__all__ = ["EDGE_BLOCK", "SPLIT_FRACTIONS", "SynthConfig", "generate"]

log = logging.getLogger(__name__)

#: Edges per generation block (one RNG stream each); independent of ``shard_rows``.
EDGE_BLOCK = 1 << 20
#: Uncompressed feature bytes per node block.
_NODE_BLOCK_BYTES = 32 << 20
#: Train / validation / test shares of the random split.
SPLIT_FRACTIONS = (0.6, 0.2, 0.2)
#: Guide-table buckets per node: more buckets, fewer steps per lookup.
_GUIDE_PER_NODE = 2
#: Bumped whenever the same config would produce a different graph.
GENERATOR_VERSION = 1

# RNG streams: SeedSequence(seed, spawn_key=(stream, block)).
_STREAM_NODES_STATE, _STREAM_CENTROIDS, _STREAM_EDGES, _STREAM_NODE_ROWS = 0, 1, 2, 3


def _rng(seed: int, stream: int, block: int = 0) -> np.random.Generator:
    return np.random.default_rng(np.random.SeedSequence(seed, spawn_key=(stream, block)))


def _bad(flag: str, expected: str, found: Any, fix: str | None = None) -> InputError:
    return InputError(format_problem(f"synthetic graph option {flag}", expected, repr(found), fix))


def _check_int(flag: str, value: Any, minimum: int) -> None:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < minimum:
        raise _bad(flag, f"an integer >= {minimum}", value)


def _check_real(flag: str, value: Any, expected: str, ok: Callable[[float], bool]) -> None:
    if (
        isinstance(value, bool)
        or not isinstance(value, numbers.Real)
        or not math.isfinite(value)
        or not ok(value)
    ):
        raise _bad(flag, f"a finite number {expected}", value)


@dataclass(frozen=True)
class SynthConfig:
    """Parameters of a synthetic graph (see the module docstring for the model).

    Parameters
    ----------
    num_nodes
        N, the number of nodes (``--nodes``).
    num_edges
        M, the number of undirected edges, each stored once (``--edges``).
    num_classes
        C, the number of classes (``--classes``); every class gets ``N/C`` nodes, so
        ``N >= 2C`` (an intra-class edge needs two nodes).
    dim
        Feature width d (``--dim``).
    homophily
        Expected share of intra-class edges, in ``[0, 1]`` (``--homophily``). With one
        class every edge is intra-class.
    seed
        Seed of every random draw (``--seed``), a non-negative integer.
    exponent
        Power-law exponent of the degree distribution, > 1 (``--exponent``).
    noise
        Standard deviation of the feature noise around the class centroid (``--noise``).
    category_purity
        Probability that ``category`` equals the class (``--category-purity``).
    split
        Train, validation and test shares of the i.i.d. split (``--split``): three
        non-negative numbers summing to 1, the training share positive.
    """

    num_nodes: int
    num_edges: int
    num_classes: int
    dim: int
    homophily: float = 0.8
    seed: int = 0
    exponent: float = 2.1
    noise: float = 1.0
    category_purity: float = 0.8
    split: tuple[float, float, float] = SPLIT_FRACTIONS

    def __post_init__(self) -> None:
        _check_int("--nodes", self.num_nodes, 2)
        _check_int("--edges", self.num_edges, 1)
        _check_int("--classes", self.num_classes, 1)
        _check_int("--dim", self.dim, 1)
        _check_int("--seed", self.seed, 0)
        if self.num_classes * 2 > self.num_nodes:
            raise _bad(
                "--classes",
                f"at most --nodes/2 = {self.num_nodes // 2} (every class needs two nodes)",
                self.num_classes,
                "use fewer classes or more nodes.",
            )
        _check_real("--homophily", self.homophily, "in [0, 1]", lambda x: 0 <= x <= 1)
        _check_real("--exponent", self.exponent, "> 1 (e.g. 2.1)", lambda x: x > 1)
        _check_real("--noise", self.noise, ">= 0", lambda x: x >= 0)
        _check_real(
            "--category-purity", self.category_purity, "in [0, 1]", lambda x: 0 <= x <= 1
        )
        _check_split(self.split)


def _check_split(split: Any) -> None:
    def share(x: Any) -> bool:
        return isinstance(x, numbers.Real) and not isinstance(x, bool) and math.isfinite(x) and 0 <= x <= 1

    if (
        not isinstance(split, tuple)
        or len(split) != 3
        or not all(share(x) for x in split)
        or split[0] <= 0
        or abs(sum(split) - 1.0) > 1e-6
    ):
        raise _bad(
            "--split",
            "three shares TRAIN,VAL,TEST in [0, 1], TRAIN > 0, summing to 1",
            split,
            "give three shares that add up to 1, e.g. --split 0.08,0.02,0.9.",
        )


# -- the O(N) model state ---------------------------------------------------------------


def _theta_cutoff(num_nodes: int, num_edges: int, exponent: float) -> float:
    """The cutoff c with ``2M·c / (N·E[theta | c]) = sqrt(2M)``, or 1 for dense graphs."""
    a = exponent - 1.0  # the tail index of the Pareto CCDF
    target = math.sqrt(2.0 * num_edges)

    def mean_theta(c: float) -> float:
        log_c = max(math.log(c), 1e-12)
        if abs(a - 1.0) < 1e-9:
            numerator = log_c
        else:
            numerator = -math.expm1((1.0 - a) * log_c) * a / (a - 1.0)
        return numerator / -math.expm1(-a * log_c)

    def excess(log_c: float) -> float:  # > 0 while c is below the fixed point
        c = math.exp(log_c)
        return math.log(num_nodes * mean_theta(c) / target) - log_c

    if num_nodes <= target:
        return 1.0
    # Bisection on log c. The cap (c <= e^256) only binds for exponents within ~0.01
    # of 1, where nearly all the volume sits on a few nodes anyway; it keeps the
    # cumulative sum finite.
    lo, hi = 0.0, 1.0
    while excess(hi) > 0 and hi < 256.0:
        lo, hi = hi, hi * 2
    for _ in range(100):
        mid = 0.5 * (lo + hi)
        if excess(mid) > 0:
            lo = mid
        else:
            hi = mid
    return math.exp(hi)


@dataclass
class _Model:
    """Everything an edge or node block needs: O(N) arrays, read-only once built."""

    config: SynthConfig
    cutoff: float
    cs: np.ndarray          # float64 [N+1], cumsum of theta in class order
    guide: np.ndarray       # int [G], first class-order position of bucket g
    bucket_scale: float     # G / W
    class_of_pos: np.ndarray  # int32 [N], class of each class-order position
    class_lo: np.ndarray    # float64 [C], cs at the class start
    class_vol: np.ndarray   # float64 [C], total theta of the class
    global_nid_of_pos: np.ndarray  # int64 [N], the random id permutation
    label_of_nid: np.ndarray  # int32 [N], class by global_nid
    centroids: np.ndarray   # float32 [C, d]

    @property
    def total(self) -> float:
        return float(self.cs[-1])


def _build_model(config: SynthConfig) -> _Model:
    n, c = config.num_nodes, config.num_classes
    rng = _rng(config.seed, _STREAM_NODES_STATE)
    cutoff = _theta_cutoff(n, config.num_edges, config.exponent)
    a = config.exponent - 1.0
    # Inverse CDF of the Pareto law truncated to [1, cutoff].
    theta = rng.random(n)
    theta *= -math.expm1(-a * math.log(cutoff))
    np.negative(theta, out=theta)
    np.log1p(theta, out=theta)
    theta *= -1.0 / a
    np.exp(theta, out=theta)
    cs = np.empty(n + 1, dtype=np.float64)
    cs[0] = 0.0
    np.cumsum(theta, out=cs[1:])
    del theta
    total = float(cs[-1])

    # Guide table: guide[g] = #{boundaries cs[1..N-1] whose bucket is < g}. Bucketing
    # uses the very same float formula as the lookup, so guide[g] never overshoots.
    buckets = _GUIDE_PER_NODE * n
    scale = buckets / total
    bucket_of_boundary = np.minimum((cs[1:n] * scale).astype(np.int64), buckets - 1)
    guide_dtype = np.int32 if n < 2**31 else np.int64
    guide = np.searchsorted(bucket_of_boundary, np.arange(buckets), side="left").astype(guide_dtype)
    del bucket_of_boundary

    starts = (np.arange(c + 1, dtype=np.int64) * n) // c
    class_of_pos = np.repeat(np.arange(c, dtype=np.int32), np.diff(starts))
    class_lo = cs[starts[:-1]].copy()
    class_vol = cs[starts[1:]] - class_lo

    global_nid_of_pos = rng.permutation(n).astype(np.int64, copy=False)
    label_of_nid = np.empty(n, dtype=np.int32)
    label_of_nid[global_nid_of_pos] = class_of_pos

    centroids = _rng(config.seed, _STREAM_CENTROIDS).standard_normal(
        (c, config.dim), dtype=np.float32
    )
    return _Model(
        config=config,
        cutoff=cutoff,
        cs=cs,
        guide=guide,
        bucket_scale=scale,
        class_of_pos=class_of_pos,
        class_lo=class_lo,
        class_vol=class_vol,
        global_nid_of_pos=global_nid_of_pos,
        label_of_nid=label_of_nid,
        centroids=centroids,
    )


def _locate(model: _Model, r: np.ndarray) -> np.ndarray:
    """Class-order positions ``i`` with ``cs[i] <= r < cs[i+1]`` (``r`` is clipped to [0, W))."""
    cs = model.cs
    np.clip(r, 0.0, np.nextafter(model.total, 0.0), out=r)
    g = (r * model.bucket_scale).astype(np.int64)
    np.minimum(g, len(model.guide) - 1, out=g)
    pos = model.guide[g].astype(np.int64)
    todo = np.flatnonzero(cs[pos + 1] <= r)
    while todo.size:
        pos[todo] += 1
        todo = todo[cs[pos[todo] + 1] <= r[todo]]
    return pos


# -- edge and node blocks -----------------------------------------------------------------


def _edge_block(model: _Model, block: int, size: int) -> tuple[np.ndarray, np.ndarray, int]:
    """One block of edges as ``(src, dst)`` global ids, plus its intra-class count."""
    config = model.config
    rng = _rng(config.seed, _STREAM_EDGES, block)
    if config.num_classes == 1:
        intra = np.ones(size, dtype=bool)
    else:
        intra = rng.random(size) < config.homophily
    u = np.empty(size, dtype=np.int64)
    v = np.empty(size, dtype=np.int64)
    todo = np.arange(size)
    while todo.size:
        is_intra = intra[todo]
        u_t = _locate(model, rng.random(todo.size) * model.total)
        cls = model.class_of_pos[u_t]
        lo, vol = model.class_lo[cls], model.class_vol[cls]
        r = rng.random(todo.size)
        r = np.where(is_intra, lo + r * vol, r * (model.total - vol))
        past = ~is_intra & (r >= lo)
        r[past] += vol[past]
        v_t = _locate(model, r)
        ok = (u_t != v_t) & ((model.class_of_pos[v_t] == cls) == is_intra)
        u[todo[ok]] = u_t[ok]
        v[todo[ok]] = v_t[ok]
        todo = todo[~ok]
    flip = rng.random(size) < 0.5
    src = model.global_nid_of_pos[np.where(flip, v, u)]
    dst = model.global_nid_of_pos[np.where(flip, u, v)]
    return src, dst, int(np.count_nonzero(intra))


def _node_block_rows(dim: int) -> int:
    return max(1, _NODE_BLOCK_BYTES // (4 * dim))


def _node_block(model: _Model, block: int, lo: int, hi: int) -> dict[str, np.ndarray]:
    """Node rows ``global_nid in [lo, hi)``."""
    config = model.config
    rng = _rng(config.seed, _STREAM_NODE_ROWS, block)
    n = hi - lo
    label = model.label_of_nid[lo:hi].astype(np.int64)
    feat = rng.standard_normal((n, config.dim), dtype=np.float32)
    if config.noise != 1.0:
        feat *= np.float32(config.noise)
    feat += model.centroids[label]
    keep = rng.random(n) < config.category_purity
    category = np.where(keep, label, rng.integers(0, config.num_classes, n, dtype=np.int64))
    u = rng.random(n)
    train, val, _ = config.split
    split = (u >= train).astype(np.int8)
    split += u >= train + val
    return {
        "global_nid": np.arange(lo, hi, dtype=np.int64),
        "feat": feat,
        "label": label,
        "split": split,
        "category": category,
    }


def _prefetched(make: Callable[[Any], Any], items: list) -> Iterator[Any]:
    """``make(item)`` for each item, in order, computing the next one in a thread.

    numpy and the Parquet writer release the GIL, so generating block b+1 overlaps with
    compressing block b; at most two blocks are alive at once.
    """
    if not items:
        return
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="synth") as pool:
        pending = pool.submit(make, items[0])
        for item in items[1:]:
            ready = pending.result()
            pending = pool.submit(make, item)
            yield ready
            del ready
        yield pending.result()


def _peak_rss_mib() -> float:
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak / 2**20 if sys.platform == "darwin" else peak / 2**10


# -- public entry point -------------------------------------------------------------------


def generate(
    out: str | Path,
    config: SynthConfig,
    *,
    shard_rows: int = 1_000_000,
    overwrite: bool = False,
    storage_options: dict | None = None,
) -> dict[str, Any]:
    """Write a synthetic attributed graph as an asepr input directory, streaming.

    Parameters
    ----------
    out
        Output directory (path or fsspec URL); it appears atomically when complete.
    config
        The model parameters.
    shard_rows
        Maximum rows per Parquet shard. It changes the file cut only, not the graph.
    overwrite
        Replace an existing output directory.
    storage_options
        Passed to fsspec.

    Returns
    -------
    dict
        The committed ``meta.json`` content.

    Raises
    ------
    InputError
        ``config`` is not a :class:`SynthConfig`, or ``shard_rows`` is not positive.
    StoreError
        ``out`` exists and ``overwrite`` is false.
    """
    if not isinstance(config, SynthConfig):
        raise InputError(
            format_problem("generate(config=...)", "a SynthConfig", type(config).__name__)
        )
    if (
        isinstance(shard_rows, bool)
        or not isinstance(shard_rows, numbers.Integral)
        or shard_rows < 1
    ):
        raise InputError(format_problem("--shard-rows", "a positive row count", repr(shard_rows)))
    return _generate(out, config, int(shard_rows), overwrite, storage_options)


def _generate(
    out: str | Path,
    config: SynthConfig,
    shard_rows: int,
    overwrite: bool,
    storage_options: dict | None,
) -> dict[str, Any]:
    start = time.perf_counter()
    model = _build_model(config)
    log.info(
        "synth model: %d nodes, %d classes, theta cutoff %.1f (max expected degree %.0f); "
        "%.2f s, peak RSS %.0f MiB",
        config.num_nodes,
        config.num_classes,
        model.cutoff,
        2 * config.num_edges * model.cutoff / model.total,
        time.perf_counter() - start,
        _peak_rss_mib(),
    )
    writer = InputWriter(
        out,
        feat_dim=config.dim,
        shard_rows=shard_rows,
        node_extra=[("category", pa.int64())],
        overwrite=overwrite,
        storage_options=storage_options,
    )
    with writer:
        stage = time.perf_counter()
        intra_total = 0
        edge_blocks = [
            (block, min(EDGE_BLOCK, config.num_edges - lo))
            for block, lo in enumerate(range(0, config.num_edges, EDGE_BLOCK))
        ]
        for src, dst, intra in _prefetched(lambda b: _edge_block(model, *b), edge_blocks):
            writer.write_edges(src, dst)
            intra_total += intra
        log.info(
            "synth edges: %d edges, intra-class share %.4f; %.2f s, peak RSS %.0f MiB",
            config.num_edges,
            intra_total / config.num_edges,
            time.perf_counter() - stage,
            _peak_rss_mib(),
        )
        stage = time.perf_counter()
        rows = _node_block_rows(config.dim)
        node_blocks = [
            (block, lo, min(config.num_nodes, lo + rows))
            for block, lo in enumerate(range(0, config.num_nodes, rows))
        ]
        for part in _prefetched(lambda b: _node_block(model, *b), node_blocks):
            writer.write_nodes(
                part["global_nid"], part["feat"], part["label"], part["split"],
                category=part["category"],
            )
        log.info(
            "synth nodes: %d rows; %.2f s, peak RSS %.0f MiB",
            config.num_nodes,
            time.perf_counter() - stage,
            _peak_rss_mib(),
        )
        meta = writer.commit(
            {
                "name": "synth",
                "undirected": True,
                "num_classes": config.num_classes,
                "source": {
                    "format": "synth",
                    "generator_version": GENERATOR_VERSION,
                    **asdict(config),
                },
                "split": {
                    "kind": "random",
                    "fractions": list(config.split),
                    "seed": config.seed,
                },
            }
        )
    log.info("synth: wrote %s in %.2f s", writer.url, time.perf_counter() - start)
    return meta
