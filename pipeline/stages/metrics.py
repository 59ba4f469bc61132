"""Partition quality metrics, computed from O(N) state plus one edge pass.

* replication factor ``RF = Σ_p |V_p| / |V_non-isolated|``;
* edge balance ``max load / mean load`` and vertex balance ``max |V_p| / mean |V_p|``;
* attribute homogeneity: the mean over partitions of the share of the partition's
  vertices that lie in its dominant attribute cluster;
* label entropy (bits) of each partition's labelled vertices, and its mean;
* 1-hop locality: the share of (vertex, neighbour) incidences where the neighbour
  has a replica on the vertex's master partition (each edge row gives two
  incidences, one per endpoint; self-loops give none);
* drift (:func:`drift_metrics`): how far the edge loads and the community volumes
  mapped to each partition are from their caps, and whether ``asepr rebalance`` is
  advised;
* with shares (:mod:`asepr.pipeline.capacity`, :func:`share_metrics`): each partition's
  share of the edges and of the masters beside its target share, and the balances
  relative to the shares.
"""

from __future__ import annotations

import numba
import numpy as np

from asepr.pipeline.kernels.bitset import has_bit
from asepr.pipeline.capacity import edge_caps, volume_limits
from asepr.pipeline.config import PartitionConfig
from asepr.pipeline.planning.needs import Need, RunShape, held_arrays

__all__ = ["drift_metrics", "locality_batch", "metrics_needs", "partition_metrics", "share_metrics",
           "vertex_part_counts"]


@numba.njit(cache=True, nogil=True)
def locality_batch(src, dst, replicas, master):
    """(local incidences, total incidences) of one edge batch (``replicas`` may be the
    rows of :func:`asepr.pipeline.stages.masters.replica_rows` with ``master`` their last
    column: one random read per endpoint instead of two)."""
    local = 0
    total = 0
    for i in range(src.shape[0]):
        u = src[i]
        v = dst[i]
        if u == v:
            continue
        total += 2
        if has_bit(replicas, v, master[u]):
            local += 1
        if has_bit(replicas, u, master[v]):
            local += 1
    return local, total


@numba.njit(cache=True)
def vertex_part_counts(replicas, attr, num_attr, labels, num_labels, num_parts):
    """Per partition: vertex count, attribute-cluster counts, label counts."""
    n_vertices = np.zeros(num_parts, dtype=np.int64)
    attr_counts = np.zeros((num_parts, num_attr), dtype=np.int64)
    label_counts = np.zeros((num_parts, max(num_labels, 1)), dtype=np.int64)
    for v in range(replicas.shape[0]):
        for w in range(replicas.shape[1]):
            bits = replicas[v, w]
            p = w * 64
            while bits != np.uint64(0):
                if bits & np.uint64(1):
                    n_vertices[p] += 1
                    attr_counts[p, attr[v]] += 1
                    if labels[v] >= 0:
                        label_counts[p, labels[v]] += 1
                bits >>= np.uint64(1)
                p += 1
    return n_vertices, attr_counts, label_counts


def _entropy_bits(counts: np.ndarray) -> float:
    total = counts.sum()
    if total == 0:
        return 0.0
    q = counts[counts > 0] / total
    return float(-(q * np.log2(q)).sum())


def partition_metrics(
    replicas: np.ndarray,
    loads: np.ndarray,
    master: np.ndarray,
    attr_cluster_id: np.ndarray,
    labels: np.ndarray,
    locality: tuple[int, int],
) -> dict:
    """All metrics as a JSON-ready dict."""
    num_parts = len(loads)
    attr = np.ascontiguousarray(attr_cluster_id, dtype=np.int64)
    labels = np.ascontiguousarray(labels, dtype=np.int64)
    num_attr = int(attr.max()) + 1 if len(attr) else 1
    num_labels = int(labels.max()) + 1 if len(labels) and labels.max() >= 0 else 0
    n_vertices, attr_counts, label_counts = vertex_part_counts(
        replicas, attr, num_attr, labels, num_labels, num_parts
    )
    non_isolated = int(np.count_nonzero(replicas.any(axis=1)))
    mean_load = loads.mean() if num_parts else 0.0
    mean_vertices = n_vertices.mean() if num_parts else 0.0
    populated = n_vertices > 0
    homogeneity = (
        float((attr_counts.max(axis=1)[populated] / n_vertices[populated]).mean())
        if populated.any()
        else 0.0
    )
    entropies = [_entropy_bits(label_counts[p]) for p in range(num_parts)]
    local, total = locality
    masters = np.bincount(master, minlength=num_parts)
    return {
        "replication_factor": float(n_vertices.sum() / non_isolated) if non_isolated else 1.0,
        "edge_balance": float(loads.max() / mean_load) if mean_load > 0 else 1.0,
        "vertex_balance": float(n_vertices.max() / mean_vertices) if mean_vertices > 0 else 1.0,
        "attribute_homogeneity": homogeneity,
        "label_entropy_mean": float(np.mean(entropies)) if entropies else 0.0,
        "label_entropy": entropies,
        "one_hop_locality": float(local / total) if total else 1.0,
        "loads": loads.tolist(),
        "vertices": n_vertices.tolist(),
        "masters": masters.tolist(),
        "non_isolated_vertices": non_isolated,
    }


def _relative_balance(amounts: np.ndarray, shares) -> float:
    """``max_p amount_p / (share_p * total)``: max over mean for equal shares (None)."""
    total = float(amounts.sum())
    if total <= 0:
        return 1.0
    if shares is None:
        return float(amounts.max() / (total / len(amounts)))
    return float((amounts / (np.asarray(shares, dtype=np.float64) * total)).max())


def share_metrics(loads: np.ndarray, masters: np.ndarray, shares) -> dict:
    """Each partition's target share, its share of the edges and of the masters, and
    the largest of each relative to its target (1.0: exactly in proportion)."""
    loads = np.asarray(loads, dtype=np.float64)
    masters = np.asarray(masters, dtype=np.float64)
    return {
        "shares": [float(s) for s in shares],
        "edge_shares": (loads / max(loads.sum(), 1.0)).tolist(),
        "master_shares": (masters / max(masters.sum(), 1.0)).tolist(),
        "edge_balance": _relative_balance(loads, shares),
        "master_balance": _relative_balance(masters, shares),
    }


def drift_metrics(
    loads: np.ndarray,
    epsilon: float,
    community_part: np.ndarray | None = None,
    volume: np.ndarray | None = None,
    shares: tuple[float, ...] | None = None,
) -> dict:
    """Balance drift of an assignment, from O(N) state.

    The kernel never fills a partition past the edge cap ``ceil((1+eps)|E|/k)``, so the
    edge balance stays within ``1 + eps``. With ``shares`` each partition has its own
    caps (``ceil((1+eps) share_p |E|)`` edges; the volume of
    :func:`asepr.pipeline.capacity.volume_limits`), the balances are relative to them
    (``max_p load_p / (share_p |E|)``, and the volumes' largest ratio to their caps
    times ``1 + eps``), and ``edge_caps`` and ``volume_caps`` list the caps. What drifts
    as a graph grows is the
    structure the kernel steers by: the *community volume* of a partition (the summed
    volume of the communities mapped to it). Once a partition's community volume
    passes the volume cap ``(1+eps)·2|E|/k``, more of its communities' edges than fit
    are steered there, and the kernel must place them elsewhere (raising the
    replication factor). A rebalance is advised then, or when an edge load passes its
    cap (only possible after a change of ``epsilon``).
    """
    loads = np.asarray(loads, dtype=np.int64)
    k = len(loads)
    num_edges = int(loads.sum())
    caps = edge_caps(num_edges, k, epsilon, shares) if k else np.zeros(0, np.int64)
    out: dict = {
        "epsilon": float(epsilon),
        "edge_balance": _relative_balance(loads, shares) if k else 1.0,
        "edge_cap": int(caps.max(initial=0)),
        "edge_over_cap": [int(p) for p in np.flatnonzero(loads > caps)],
    }
    if shares is not None:
        out["edge_caps"] = [int(c) for c in caps]
    over = list(out["edge_over_cap"])
    if community_part is not None and volume is not None:
        live = (volume > 0) & (community_part >= 0)
        part_volume = np.bincount(community_part[live], weights=volume[live], minlength=k)[:k]
        total = float(part_volume.sum())
        vcaps = volume_limits(total, k, epsilon, shares) if k else np.zeros(0)
        balance = _relative_balance(part_volume, None) if shares is None or not total else \
            float((part_volume / vcaps).max() * (1.0 + epsilon))
        out.update(
            community_volume=[int(v) for v in part_volume],
            community_balance=balance if k else 1.0,
            volume_cap=float(vcaps.max(initial=0.0)),
            volume_over_cap=[int(p) for p in np.flatnonzero(part_volume > vcaps + 1e-9)],
        )
        if shares is not None:
            out["volume_caps"] = [float(c) for c in vcaps]
        over = sorted(set(over) | set(out["volume_over_cap"]))
    out["overloaded"] = over
    out["rebalance_advised"] = bool(over)
    return out


def metrics_needs(run: PartitionConfig, s: RunShape) -> Need:
    """Memory of :func:`partition_metrics`: ``replicas``, ``master`` int32, the masters
    stage's packed rows int64[N, W + 1], the locality pass's streams (one per range
    thread), then ``labels`` int64[N] read from the node shards, the ``attr`` int64 copy
    and the ``any`` masks."""
    held = held_arrays(run, s) + 8 * s.words * s.n + 4 * s.n + 8 * (s.words + 1) * s.n
    return Need(driver=held + max(s.ways * s.stream, 8 * s.n + 8 * s.n + (s.words + 1) * s.n))
