"""Partition quality metrics, computed from O(N) state plus one edge pass.

* replication factor ``RF = Σ_p |V_p| / |V_non-isolated|``;
* edge balance ``max load / mean load`` and vertex balance ``max |V_p| / mean |V_p|``;
* attribute homogeneity: the mean over partitions of the share of the partition's
  vertices that lie in its dominant attribute cluster;
* label entropy (bits) of each partition's labelled vertices, and its mean;
* 1-hop locality: the share of (vertex, neighbour) incidences where the neighbour
  has a replica on the vertex's master partition (each edge row gives two
  incidences, one per endpoint; self-loops give none).
"""

from __future__ import annotations

import numba
import numpy as np

from pipeline.bitset import has_bit

__all__ = ["locality_batch", "partition_metrics", "vertex_part_counts"]


@numba.njit(cache=True, nogil=True)
def locality_batch(src, dst, replicas, master):
    """(local incidences, total incidences) of one edge batch."""
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
