"""What a stage of a partition run holds and writes, for the run's plan (:mod:`asepr.pipeline.planning.plan`).

Each stage declares its own needs next to its code, as a function of the run's
configuration and its :class:`RunShape` returning a :class:`Need`: the arrays its code
holds at its high-water mark (``itemsize × |V|`` per O(|V|) array, ``batch_rows`` times
the bytes per row for per-batch buffers) and the bytes it writes. :mod:`asepr.pipeline.planning.plan`
adds them up, stage by stage, with the process baselines.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from asepr.pipeline.config import PartitionConfig

__all__ = ["EDGE_ROW", "MIB", "STATE_TREE", "STORE_RATIO", "STORE_TREE", "STREAM_BATCHES", "Need", "RunShape",
           "held_arrays"]

MIB = 1 << 20

#: Edge batches resident in a stream: 2 queued (``prefetch``), the kernel's, the decoder's,
#: and the row group the Parquet reader decoded.
STREAM_BATCHES = 5
#: Bytes of one decoded edge row: ``src`` and ``dst``, int64.
EDGE_ROW = 16

#: Compression ratios (raw / stored) of the store codecs, from asepr.storage.partitions.store's
#: measurement; arrays it does not list take the ratio of the closest listed one. The
#: features' ratio depends on the graph (1.0 for dense random floats, which blosc cannot
#: shrink by asepr.storage.partitions.store.MIN_SAVING, 20-200 for sparse binary ones): the
#: plan measures it on a sample (``RunShape.x_ratio``); "x" is its default, the most
#: disk they can take.
STORE_RATIO = {"x": 1.0, "global_nid": 7.1, "indptr": 7.1, "indices": 1.53, "y": 19.6, "flags": 8.0,
               "state": 2.0}

#: Disk a Zarr tree takes besides its arrays' bytes, as ``du`` counts it: every
#: directory is a 4 KiB block and every file rounds up to whole blocks. A partition store
#: (3 groups and 7 arrays: 18 directories, 17 files while each array is one chunk) takes
#: about 130 KiB more than its bytes, ``state.zarr`` about 210 KiB; on a small graph
#: that is most of the output (measured on the outputs of docs/results/plan-accuracy).
STORE_TREE = 130 * 1024
STATE_TREE = 210 * 1024


@dataclass(frozen=True)
class Need:
    """What a stage holds and writes.

    ``driver``: the driver's arrays; ``task``: one task's arrays, for ``tasks`` tasks;
    ``written``: bytes written, of which ``kept`` stay after the commit; ``removed``:
    bytes (written by it or before) that the stage deletes when it ends.
    """

    driver: float = 0.0
    task: float = 0.0
    tasks: int = 0
    written: float = 0.0
    kept: float = 0.0
    removed: float = 0.0


@dataclass(frozen=True)
class RunShape:
    """The quantities the stages' formulas use (all counts, not bytes)."""

    n: int          # |V|
    e: int          # |E|
    k: int
    epsilon: float
    d: int          # feature width
    d_emb: int      # d' = k-means width (projected or not)
    b: int          # edge batch rows (capped by the largest edge shard)
    rf: float
    halo_copies: float  # halo copies per edge, at most (0, 1, or 2 for undirected inputs)
    n_s: int        # rows of the largest node shard
    e_s: int        # rows of the largest edge shard
    node_shards: int
    edge_shards: int
    node_read: float  # peak bytes of reading the largest node shard with its features
    label_threads: int = 1  # threads labelling the decoded node table (asepr.pipeline.stages.attr_rows)
    sweeps: int = 1  # node-table sweeps at once (one per worker; local threads share one)
    ways: int = 1  # threads of an order-free edge pass (asepr.pipeline.stream.map_shard_ranges)
    x_ratio: float = 1.0  # raw / stored bytes of the features (asepr.pipeline.planning.plan_inputs.feature_store_ratio)
    top_share: float = 0.0  # the largest partition's share with capacities (asepr.pipeline.capacity); 0: 1/k each

    @property
    def words(self) -> int:
        """W = ceil(k / 64) replica words per vertex."""
        return (self.k + 63) // 64

    @property
    def n_p(self) -> float:
        """Nodes of the largest partition: RF·|V|/k (with capacities RF·|V|·top share), at most |V|."""
        if self.top_share:
            return min(self.n, self.rf * self.n * self.top_share)
        return min(self.n, self.rf * self.n / self.k)

    @property
    def e_p(self) -> float:
        """Edge rows of the largest partition: the cap ``(1 + eps)|E|/k`` (with capacities
        ``(1 + eps)·top share·|E|``) plus its halo copies."""
        if self.top_share:
            return math.ceil((1.0 + self.epsilon) * self.top_share * self.e) * (1.0 + self.halo_copies)
        return math.ceil((1.0 + self.epsilon) * self.e / self.k) * (1.0 + self.halo_copies)

    @property
    def n_all(self) -> float:
        """Nodes of all partitions: k·:attr:`n_p` for equal shares, else RF·|V| (at most k·|V|)."""
        if self.top_share:
            return min(self.k * self.n, self.rf * self.n)
        return self.k * self.n_p

    @property
    def e_all(self) -> float:
        """Edge rows of all partitions at their caps: k·:attr:`e_p` for equal shares, else
        ``(1 + eps)|E|`` and a row of rounding per partition, with the halo copies."""
        if self.top_share:
            return (math.ceil((1.0 + self.epsilon) * self.e) + self.k) * (1.0 + self.halo_copies)
        return self.k * self.e_p

    @property
    def stream(self) -> float:
        """One edge stream's batches (:data:`STREAM_BATCHES` of ``b`` rows)."""
        return STREAM_BATCHES * EDGE_ROW * self.b


def held_arrays(run: PartitionConfig, s: RunShape) -> float:
    """O(|V|) arrays the driver keeps from ② on: ``degree`` int64 and ``attr_cluster_id``
    int32; with communities (asep, 2ps-*) also ``community_id`` and ``volume`` int64 and
    the mapping's ``community_part`` int32."""
    return 12 * s.n + (20 * s.n if run.uses_communities else 0)
