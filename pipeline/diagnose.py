"""Why the local models differ: per-partition diagnostics of a committed output
(docs/design.md#diagnostics).

Each trainer rank trains on its own partition(s), and the local models differ as much as
their data does. For every partition p, over its *seeds* (its master nodes of the
training split with a label: the nodes rank p's loss is computed on; when no node of
the output has the training split, every labelled master):

* ``seeds``: how many there are;
* ``jsd``: the Jensen–Shannon divergence (base 2, in [0, 1]) between the label
  distribution of p's seeds and that of all partitions' seeds together (every node has
  one master, so that is the whole graph's);
* ``coverage``: the mean over p's seeds v of the receptive-field coverage
  ``cov_L(v) = walks_p(v) / walks(v)``, where ``walks(v)`` counts the length-L in-walks
  ending at v (``w_L → … → w_1 → v``) in the whole graph and ``walks_p(v)`` those whose
  every edge is stored in p, in the direction messages pass in training (an
  undirected input passes them both ways). ``cov_L(v)`` is 1 when ``walks(v)`` is 0.

The in-walk counts satisfy ``c_0 = 1``, ``c_{l+1}(v) = Σ_{(w→v)} c_l(w)``: the whole
graph's take L streaming passes over every partition's own (non-halo) edges, which
are the input's edge rows, each exactly once, with two float64 arrays of |V| entries
held; a partition's count is the same recurrence over what its store holds (halo
copies included: the trainer passes messages over them), in one more pass. No pass
holds more than one partition's edges.
"""

from __future__ import annotations

import logging
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numba
import numpy as np

from asepr.storage import SPLIT_TRAIN, read_manifest
from asepr.storage.partitions.output_stores import open_entry_store
from asepr.storage.partitions.reader import read_committed
from asepr.storage.resources import stage

__all__ = ["Diagnostics", "PartitionDiagnostics", "diagnose_output", "js_divergence", "walk_step"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class PartitionDiagnostics:
    """One partition's figures (``jsd`` and ``coverage`` None without seeds)."""

    part_id: int
    seeds: int
    jsd: float | None
    coverage: float | None
    label_counts: list[int] = field(repr=False)


@dataclass(frozen=True)
class Diagnostics:
    """Every partition's figures and their summary over partitions.

    Attributes
    ----------
    hops
        L, the depth of the receptive field (the model's layers).
    basis
        ``"train"`` (seeds: masters of the training split) or ``"labelled"`` (every
        labelled master: the output has no training split).
    undirected
        Whether messages pass both ways (an undirected input).
    label_counts
        The labels of all seeds together, by class.
    partitions
        One :class:`PartitionDiagnostics` per partition, by ``part_id``.
    """

    hops: int
    basis: str
    undirected: bool
    label_counts: list[int]
    partitions: list[PartitionDiagnostics]

    def summary(self) -> dict[str, Any]:
        """Mean and max of ``jsd`` and mean, min and max of ``coverage`` over the
        partitions with seeds (with the partition of the largest divergence and of the
        lowest coverage), and the seeds' min, mean and max over all partitions."""
        jsd = [p.jsd for p in self.partitions if p.jsd is not None]
        cov = [p.coverage for p in self.partitions if p.coverage is not None]
        seeds = [p.seeds for p in self.partitions]

        def agg(values: list[float], fn) -> float | None:
            return float(fn(values)) if values else None

        with_seeds = [p for p in self.partitions if p.seeds]
        return {"hops": self.hops, "basis": self.basis, "partitions": len(self.partitions),
                "jsd_mean": agg(jsd, np.mean), "jsd_max": agg(jsd, np.max),
                "jsd_max_part": max(with_seeds, key=lambda p: p.jsd).part_id if with_seeds else None,
                "coverage_mean": agg(cov, np.mean), "coverage_min": agg(cov, np.min),
                "coverage_max": agg(cov, np.max),
                "coverage_min_part": min(with_seeds, key=lambda p: p.coverage).part_id if with_seeds else None,
                "seeds_min": agg(seeds, np.min), "seeds_mean": agg(seeds, np.mean), "seeds_max": agg(seeds, np.max)}

    def to_dict(self) -> dict[str, Any]:
        """The summary and the per-partition figures, JSON-ready."""
        return {**self.summary(), "undirected": self.undirected, "label_counts": self.label_counts,
                "per_partition": [asdict(p) for p in self.partitions]}


def js_divergence(p_counts: np.ndarray, q_counts: np.ndarray) -> float:
    """Jensen–Shannon divergence in bits of two count vectors (normalised here), in [0, 1]."""
    p = np.asarray(p_counts, dtype=np.float64)
    q = np.asarray(q_counts, dtype=np.float64)
    width = max(len(p), len(q))
    p, q = np.pad(p, (0, width - len(p))), np.pad(q, (0, width - len(q)))
    p, q = p / p.sum(), q / q.sum()
    m = (p + q) / 2

    def kl(a: np.ndarray) -> float:
        nz = a > 0
        return float((a[nz] * np.log2(a[nz] / m[nz])).sum())

    return min(1.0, max(0.0, (kl(p) + kl(q)) / 2))


@numba.njit(cache=True, nogil=True)
def walk_step(indptr, indices, ids, skip, prev, nxt, both):
    """One step of the in-walk recurrence over a CSR: for every row u → ``indices[j]``
    (unless ``skip[j]``; ``skip`` empty: none), ``nxt[ids[v]] += prev[ids[u]]``, and with
    ``both`` also ``nxt[ids[u]] += prev[ids[v]]``."""
    check = skip.shape[0] > 0
    for u in range(indptr.shape[0] - 1):
        gu = ids[u]
        for j in range(indptr[u], indptr[u + 1]):
            if check and skip[j]:
                continue
            gv = ids[indices[j]]
            nxt[gv] += prev[gu]
            if both:
                nxt[gu] += prev[gv]


def _edges(store, owned_only: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A store's CSR and, with ``owned_only`` and a halo, its halo flags (rows to skip)."""
    names = ["edges/indptr", "edges/indices"]
    if owned_only and store.is_halo is not None:
        names.append("edges/is_halo")
    arrays = store.to_numpy(names)
    skip = arrays.get("edges/is_halo", np.zeros(0, dtype=bool))
    return arrays["edges/indptr"], arrays["edges/indices"], skip


def _seeds(store, train_only: bool) -> tuple[np.ndarray, np.ndarray]:
    """The rows of a partition's seeds and their labels."""
    nodes = store.to_numpy(["nodes/y", "nodes/split", "nodes/is_master"])
    keep = nodes["nodes/is_master"] & (nodes["nodes/y"] >= 0)
    if train_only:
        keep &= nodes["nodes/split"] == SPLIT_TRAIN
    rows = np.flatnonzero(keep)
    return rows, nodes["nodes/y"][rows]


def _local_walks(store, hops: int, both: bool) -> np.ndarray:
    """``c_L`` of every row of one store, over every edge it holds."""
    indptr, indices, skip = _edges(store, owned_only=False)
    ids = np.arange(store.num_nodes, dtype=np.int64)
    counts = np.ones(store.num_nodes, dtype=np.float64)
    for _ in range(hops):
        nxt = np.zeros_like(counts)
        walk_step(indptr, indices, ids, skip, counts, nxt, both)
        counts = nxt
    return counts


def _whole_walks(stores: list, num_nodes: int, hops: int, both: bool) -> np.ndarray:
    """``c_L`` of every node of the whole graph, over the stores' own edges."""
    walks = np.ones(num_nodes, dtype=np.float64)
    for _ in range(hops):
        nxt = np.zeros(num_nodes, dtype=np.float64)
        for store in stores:
            indptr, indices, skip = _edges(store, owned_only=True)
            walk_step(indptr, indices, store.global_nid[...], skip, walks, nxt, both)
        walks = nxt
    return walks


def _diagnose(out: str | Path, hops: int, storage_options: dict | None) -> Diagnostics:
    manifest = read_manifest(out, storage_options=storage_options)
    entries = sorted(manifest["partitions"], key=lambda e: int(e["part_id"]))
    stores = [open_entry_store(out, manifest, e, storage_options=storage_options) for e in entries]
    both = bool(manifest.get("undirected", False))
    with stage("diagnose seeds", log):
        basis = "train"
        seeds = [_seeds(s, train_only=True) for s in stores]
        if not any(len(rows) for rows, _ in seeds):
            basis = "labelled"
            seeds = [_seeds(s, train_only=False) for s in stores]
    width = max([int(y.max()) + 1 for _, y in seeds if len(y)] + [1])
    counts = [np.bincount(y, minlength=width) for _, y in seeds]
    total = np.sum(counts, axis=0)
    with stage("diagnose walks", log):
        walks = _whole_walks(stores, int(manifest["num_nodes"]), hops, both)
    parts = []
    with stage("diagnose partitions", log):
        for entry, store, (rows, _), c in zip(entries, stores, seeds, counts):
            jsd = coverage = None
            if len(rows):
                local = _local_walks(store, hops, both)[rows]
                whole = walks[store.global_nid[...][rows]]
                coverage = float(np.where(whole > 0, local / np.where(whole > 0, whole, 1.0), 1.0).mean())
                jsd = js_divergence(c, total)
            parts.append(PartitionDiagnostics(int(entry["part_id"]), len(rows), jsd, coverage,
                                              [int(v) for v in c]))
    return Diagnostics(hops=int(hops), basis=basis, undirected=both, label_counts=[int(v) for v in total],
                       partitions=parts)


def diagnose_output(out: str | Path, *, hops: int = 2, storage_options: dict | None = None) -> Diagnostics:
    """The diagnostics of the committed output ``out`` (see the module docstring).

    Reads the manifest and every store's ``global_nid``, ``y``, ``split``, ``is_master``
    (never the features) and its edges ``hops + 1`` times; holds two float64 arrays of
    |V| entries and one partition's arrays. A commit replacing the output meanwhile
    makes the read start again on the new generation.

    Parameters
    ----------
    hops
        L, the receptive field's depth: the model's number of layers (default 2).
    """
    if hops < 1:
        raise ValueError(f"hops must be at least 1, got {hops}")
    return read_committed(out, lambda: _diagnose(out, hops, storage_options), storage_options=storage_options)
