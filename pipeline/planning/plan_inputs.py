"""What the plan of a partition run is computed from (:mod:`asepr.pipeline.planning.plan`).

Two kinds of facts about the input:

* its **sizes**, from metadata only (``meta.json`` and the Parquet footers):
  :func:`input_sizes`;
* two **estimates from samples**, read before anything is written: how small the
  features will be once stored (:func:`feature_store_ratio`: the store codec applied to
  a sample of node rows, as the store writer will apply it), and the replication factor
  (:func:`estimate_rf`: a streaming partitioner run on a sample of the edge stream).

Both estimates exist because the sizes alone mislead by orders of magnitude: sparse
binary features of a few thousand columns shrink 20–200× under the store's codec, and
random hashing's replication factor (the only one the sizes give) is 2–4× what the
streaming algorithms reach. Both stay on the safe side: the ratio is the codec's own on
real rows, and the RF is that of a streaming algorithm that replicates at least as much
as the one that will run (:data:`ESTIMATOR`), at most hashing's bound.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from asepr.pipeline.config import PartitionConfig
from asepr.storage.inputs.directory import InputDir, open_input, open_parquet
from asepr.storage.inputs.schema import check_node_schema, feature_matrix
from asepr.storage.partitions.store import CHUNK_BYTES, stored_ratio

__all__ = [
    "ESTIMATOR",
    "SAMPLE_EDGES",
    "InputSizes",
    "RFEstimate",
    "estimate_rf",
    "feature_store_ratio",
    "input_sizes",
    "planning_rf",
    "sample_edges",
]

#: Edge rows the RF estimate reads at most: the whole stream up to this size, else
#: :data:`SAMPLE_SLICES` evenly spaced runs of rows adding up to it (32 MiB decoded).
SAMPLE_EDGES = 1 << 21
SAMPLE_SLICES = 64
#: Node rows of the feature sample: up to one store chunk of them, from up to this many
#: node shards spread over the input.
FEATURE_SAMPLE_SHARDS = 4
#: The algorithm whose RF on the sample stands for each algorithm's. ASEP and 2PS-HDRF
#: replicate less than HDRF on every measured graph (``docs/results/partition-quality``),
#: as do METIS and the hybrid; 2PS-L can replicate more than HDRF, DBH and greedy,
#: but less than hashing.
ESTIMATOR = {"asep": "hdrf", "2ps-hdrf": "hdrf", "metis": "hdrf", "hdrf": "hdrf", "greedy": "greedy",
             "dbh": "dbh", "hash": "hash", "2ps-l": "hash"}
#: Bounds of the exponent of the RF's growth with the sampled share (see
#: :func:`estimate_rf`). Between a sample and its half the exponent measured 0.54-0.64 on
#: the synthetic graphs, but the whole stream's RF lay above that extrapolation from a
#: twentieth of it (HDRF 2.36 against 2.15 at 5M edges): the growth steepens towards the
#: whole stream, so the exponent is held at 0.65 or more.
_GROWTH = (0.65, 1.0)


@dataclass(frozen=True)
class InputSizes:
    """The sizes of an input, read from its ``meta.json`` and its Parquet footers.

    Attributes
    ----------
    num_nodes, num_edges
        |V| and |E| (edge rows).
    feat_dim
        d, the feature width.
    edge_shards, node_shards
        Shard counts.
    max_edge_shard_rows, max_node_shard_rows
        Rows of the largest shard of each kind (a task holds at most one shard).
    max_node_shard_bytes
        File bytes of the largest node shard (default: its rows at 4d + 17 bytes).
    undirected
        ``meta.json``'s ``undirected``.
    """

    num_nodes: int
    num_edges: int
    feat_dim: int
    edge_shards: int = 1
    node_shards: int = 1
    max_edge_shard_rows: int = 0
    max_node_shard_rows: int = 0
    max_node_shard_bytes: int = 0
    undirected: bool = False

    def __post_init__(self) -> None:
        # Unknown shard sizes: one shard holds everything (the most a task can hold).
        if self.max_edge_shard_rows <= 0:
            object.__setattr__(self, "max_edge_shard_rows", self.num_edges)
        if self.max_node_shard_rows <= 0:
            object.__setattr__(self, "max_node_shard_rows", self.num_nodes)
        if self.max_node_shard_bytes <= 0:
            object.__setattr__(self, "max_node_shard_bytes", self.max_node_shard_rows * (4 * self.feat_dim + 17))


def _feat_dim_from_schema(source: InputDir) -> int:
    """d from the first node shard whose schema (or first row, for ``list``) tells it."""
    for shard in source.node_shards:
        pf = open_parquet(shard)
        layout, _, _ = check_node_schema(pf.schema_arrow, shard.url)
        if layout.dim is not None:
            return int(layout.dim)
        for batch in pf.iter_batches(batch_size=1, columns=list(layout.columns)):
            if batch.num_rows:
                return int(feature_matrix(batch, layout).shape[1])
    return 0


def input_sizes(source: str | Path | InputDir, storage_options: dict | None = None) -> InputSizes:
    """|V|, |E|, d and the shard sizes of an input, from metadata only.

    The row counts come from the Parquet footers (one small read per shard), |V| from
    ``meta.json`` when it records it, d from ``meta.json`` or the node schema. No edge
    or feature row is read.

    Parameters
    ----------
    source
        The input directory, or one already opened (:func:`asepr.storage.inputs.directory.open_input`).
    storage_options
        Passed to fsspec.

    Returns
    -------
    InputSizes
    """
    source = open_input(source, storage_options)
    edge_rows = [open_parquet(s).metadata.num_rows for s in source.edge_shards]
    node_rows = [open_parquet(s).metadata.num_rows for s in source.node_shards]
    num_nodes = source.num_nodes if source.num_nodes is not None else sum(node_rows)
    feat_dim = source.meta.get("feat_dim") or _feat_dim_from_schema(source)
    return InputSizes(
        num_nodes=int(num_nodes), num_edges=int(sum(edge_rows)), feat_dim=int(feat_dim),
        edge_shards=len(edge_rows), node_shards=len(node_rows),
        max_edge_shard_rows=max(edge_rows, default=0), max_node_shard_rows=max(node_rows, default=0),
        max_node_shard_bytes=max((s.size for s in source.node_shards), default=0), undirected=source.undirected,
    )


def planning_rf(num_nodes: int, num_edges: int, num_parts: int) -> float:
    """Random edge hashing's RF at the mean degree ``2|E|/|V|``: the plan's ceiling.

    ``k (1 - (1 - 1/k) ** mean_degree)``, at least 1. Hashing's expected RF is concave
    in the degree, so this bounds its RF over any degree sequence of that mean; the
    streaming algorithms replicate less than hashing.
    """
    if num_nodes <= 0 or num_parts <= 1:
        return 1.0
    mean_degree = 2.0 * num_edges / num_nodes
    return max(1.0, num_parts * (1.0 - (1.0 - 1.0 / num_parts) ** mean_degree))


# --- the feature sample -------------------------------------------------------------------------


def feature_store_ratio(source: InputDir, feat_dim: int) -> tuple[float, int]:
    """``(ratio, rows)``: how many times smaller than float32 the stores will hold the
    features, measured with the store's own codec decision
    (:func:`asepr.storage.partitions.store.stored_ratio`) on ``rows`` node rows: about one
    chunk of them, the first rows of up to :data:`FEATURE_SAMPLE_SHARDS` node shards
    spread over the input. 1.0 without features or rows."""
    shards = source.node_shards
    if feat_dim <= 0 or not shards:
        return 1.0, 0
    picks = sorted({round(i * (len(shards) - 1) / max(1, FEATURE_SAMPLE_SHARDS - 1))
                    for i in range(min(FEATURE_SAMPLE_SHARDS, len(shards)))})
    want = max(1, CHUNK_BYTES // (4 * feat_dim))
    per_shard = max(1, math.ceil(want / len(picks)))
    blocks = []
    for index in picks:
        pf = open_parquet(shards[index])
        layout, _, _ = check_node_schema(pf.schema_arrow, shards[index].url)
        columns = ["feat"] if layout.kind != "columns" else list(layout.columns)
        for batch in pf.iter_batches(batch_size=per_shard, columns=columns):
            blocks.append(np.asarray(feature_matrix(batch, layout), dtype=np.float32))
            break
    sample = np.concatenate(blocks) if blocks else np.zeros((0, feat_dim), np.float32)
    return stored_ratio("nodes/x", sample[:want]), int(min(len(sample), want))


# --- the edge sample and the RF -----------------------------------------------------------------


def sample_edges(source: InputDir, max_rows: int = SAMPLE_EDGES) -> tuple[np.ndarray, np.ndarray, float]:
    """``(src, dst, share)``: the whole edge stream when it has at most ``max_rows`` rows
    (``share`` 1), else :data:`SAMPLE_SLICES` runs of consecutive rows at evenly spaced
    stream positions (``share`` = rows read / |E|). Runs keep the stream's local order,
    as the partitioner meets it; each Parquet row group is decoded at most once."""
    rows = [open_parquet(s).metadata.num_rows for s in source.edge_shards]
    total = int(sum(rows))
    if total == 0:
        return np.zeros(0, np.int64), np.zeros(0, np.int64), 1.0
    if total <= max_rows:
        wanted = [(0, total)]
    else:
        run = max(1, max_rows // SAMPLE_SLICES)
        starts = np.linspace(0, total - run, SAMPLE_SLICES).astype(np.int64)
        wanted = [(int(a), int(a) + run) for a in starts]
    src, dst = [], []
    offset = 0
    for shard, count in zip(source.edge_shards, rows):
        overlaps = [(max(a, offset) - offset, min(b, offset + count) - offset) for a, b in wanted
                    if a < offset + count and b > offset]
        if overlaps:
            src_part, dst_part = _read_runs(shard, overlaps)
            src += src_part
            dst += dst_part
        offset += count
    s, d = np.concatenate(src), np.concatenate(dst)
    return s, d, len(s) / total


def _read_runs(shard, runs: list[tuple[int, int]]) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """Rows ``[a, b)`` of one edge shard for each run, reading only the row groups they touch."""
    pf = open_parquet(shard)
    meta = pf.metadata
    bounds = np.cumsum([0] + [meta.row_group(g).num_rows for g in range(meta.num_row_groups)])
    src, dst = [], []
    cache: dict[int, tuple[np.ndarray, np.ndarray]] = {}
    for a, b in runs:
        for g in range(int(np.searchsorted(bounds, a, side="right")) - 1, meta.num_row_groups):
            if bounds[g] >= b:
                break
            if g not in cache:
                cache.clear()  # runs are in order: an earlier group is never needed again
                table = pf.read_row_group(g, columns=["src", "dst"])
                cache[g] = (table.column("src").to_numpy(), table.column("dst").to_numpy())
            lo, hi = max(a, bounds[g]) - bounds[g], min(b, bounds[g + 1]) - bounds[g]
            src.append(cache[g][0][lo:hi])
            dst.append(cache[g][1][lo:hi])
    return src, dst


@dataclass(frozen=True)
class RFEstimate:
    """An estimated replication factor and how it was reached (printed with the plan)."""

    value: float
    source: str


def _compact_ids(src: np.ndarray, dst: np.ndarray) -> tuple[np.ndarray, np.ndarray, int]:
    """The sample's endpoints renumbered ``0 .. count - 1`` (the kernel's state is one row
    per vertex): through a presence mask when the ids span at most 16 times the sample's
    rows (one linear pass), else by sorting them."""
    if not len(src):
        return src, dst, 0
    span = int(max(src.max(), dst.max())) + 1
    if span <= 16 * len(src):
        present = np.zeros(span, dtype=bool)
        present[src] = True
        present[dst] = True
        renumber = np.cumsum(present, dtype=np.int64) - 1
        return renumber[src], renumber[dst], int(renumber[-1]) + 1  # the largest id is present
    ids = np.unique(np.concatenate([src, dst]))
    return np.searchsorted(ids, src), np.searchsorted(ids, dst), len(ids)


def _sample_rf(src: np.ndarray, dst: np.ndarray, num_parts: int, algo: str, epsilon: float, seed: int) -> float:
    """The RF that streaming ``algo`` (hdrf, greedy, dbh or hash) reaches on these edges,
    over the vertices they touch, with the balance cap of their count."""
    from asepr.pipeline.assign.kernel import MODES, KernelArgs, assign_batch
    from asepr.pipeline.assign.settings import edge_cap
    from asepr.pipeline.assign.state import AssignState

    u, v, count = _compact_ids(src, dst)
    degree = np.bincount(u, minlength=count) + np.bincount(v, minlength=count)
    state = AssignState(num_parts, degree.astype(np.int64))
    out = np.empty(len(u), dtype=np.int16)
    mode = MODES["all" if algo == "hdrf" else algo]  # HDRF: every partition scored, with partial degrees
    args = KernelArgs(mode, algo == "hdrf", 0.0, 1.0, edge_cap(len(u), num_parts, epsilon), seed)
    assign_batch(u, v, out, state.vstate, state.words, state.loads, args)
    replicas = np.unpackbits(state.replicas.view(np.uint8), axis=1).sum(axis=1)
    return float(replicas.mean()) if len(replicas) else 1.0


def estimate_rf(source: InputDir, config: PartitionConfig, sizes: InputSizes,
                max_rows: int = SAMPLE_EDGES) -> RFEstimate:
    """The replication factor to plan with, from a sample of the edge stream.

    Streams the sample (:func:`sample_edges`) through the kernel of the algorithm that
    stands for ``config.algo`` (:data:`ESTIMATOR`). On the whole stream that is its RF
    on this graph. On a share ``p < 1`` of it the RF is lower (each vertex has fewer
    edges to spread), so it is extrapolated: with ``r(p) - 1`` growing as ``p ** a``
    (measured on the sample and on every second run of it, ``a`` held to [0.65, 1]:
    :data:`_GROWTH`), ``r(1) = 1 + (r(p) - 1) p ** -a``. The result is at most random
    hashing's bound at the mean degree (:func:`planning_rf`) and at most k. ``max_rows``
    bounds the sample.
    """
    run = config.effective()
    k = run.num_parts
    ceiling = planning_rf(sizes.num_nodes, sizes.num_edges, k)
    if k <= 1 or sizes.num_edges == 0:
        return RFEstimate(1.0, "one partition" if k <= 1 else "no edges")
    # Scoring every partition costs k per edge: fewer rows for a large k.
    src, dst, share = sample_edges(source, max_rows=min(max_rows, max(SAMPLE_SLICES * 1024, (1 << 27) // k)))
    algo = ESTIMATOR.get(run.algo, "hash")
    measured = _sample_rf(src, dst, k, algo, run.epsilon, run.seed)
    if share >= 1.0:
        value = measured
        how = f"{algo} streamed over all {len(src):,} edge rows"
    else:
        run_rows = len(src) // SAMPLE_SLICES
        half = np.concatenate([np.arange(i * run_rows, (i + 1) * run_rows) for i in range(0, SAMPLE_SLICES, 2)])
        fewer = _sample_rf(src[half], dst[half], k, algo, run.epsilon, run.seed)
        growth = math.log2((measured - 1.0) / (fewer - 1.0)) if fewer > 1.0 and measured > fewer else _GROWTH[1]
        growth = min(max(growth, _GROWTH[0]), _GROWTH[1])
        value = 1.0 + (measured - 1.0) * share ** -growth
        how = (f"{algo} streamed over a {share:.1%} sample of the edge rows ({measured:.2f} there), "
               f"extrapolated as share^{growth:.2f}")
    if algo != run.algo:
        how += f"; {algo} replicates at least as much as {run.algo}"
    if value >= ceiling:
        return RFEstimate(ceiling, how + "; capped at random hashing's bound at the mean degree")
    return RFEstimate(max(1.0, value), how)
