"""The partitioner state as the algorithms see it (docs/design.md#partitioner-state).

:mod:`asepr.storage.partitions.state` is the on-disk format; this module fills it and reads it back:

* :func:`assignment_state` turns a finished :class:`~asepr.pipeline.partition.Assignment`
  into the state's arrays and attributes (``asepr partition`` writes it);
* :class:`Continuation` is a loaded state, grown to the new node count, ready to
  continue the stream: it rebuilds the kernel's :class:`~asepr.pipeline.assign.AssignState`
  with the saved replica bitsets, loads and degrees, and writes itself back.

Everything is O(N); nothing here looks at an edge.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from asepr.pipeline.assign import AssignState, KernelSettings
from asepr.pipeline.config import PartitionConfig
from asepr.pipeline.planning.needs import STATE_TREE, STORE_RATIO, Need, RunShape, held_arrays
from asepr.storage.errors import StoreError, format_problem
from asepr.storage.partitions.state import PartitionerState, write_state
from asepr.storage.partitions.store import CHUNK_BYTES

__all__ = ["Continuation", "assignment_state", "shard_records", "state_needs", "write_assignment_state"]


def shard_records(input_info: dict[str, Any], generation: int) -> list[dict[str, Any]]:
    """The ``shards`` attribute entries of one input description (url, rows, sha256)."""
    return [
        {"generation": int(generation), "kind": kind, "url": s["url"], "rows": int(s["rows"]), "sha256": s["sha256"]}
        for kind in ("edges", "nodes")
        for s in input_info.get(kind, [])
    ]


def assignment_state(assignment, generation: int, input_info: dict[str, Any]) -> tuple[dict, dict]:
    """``(arrays, attrs)`` of the state of a finished partitioning run."""
    n = int(assignment.num_nodes)
    k = int(assignment.config.num_parts)
    attr = assignment.attr
    labels = assignment.labels if assignment.labels is not None else np.full(n, -1, np.int64)
    num_attr = max(int(attr.attr_cluster_id.max()) + 1 if n else 1, int(attr.num_clusters))
    arrays = {
        "vertices/degree": np.asarray(assignment.degree, dtype=np.int64),
        "vertices/attr_cluster_id": np.asarray(attr.attr_cluster_id, dtype=np.int32),
        "vertices/master": np.asarray(assignment.master, dtype=np.int32),
        "vertices/label": np.asarray(labels, dtype=np.int64),
        "vertices/replicas": np.asarray(assignment.replicas, dtype=np.uint64),
        "partitions/loads": np.asarray(assignment.loads, dtype=np.int64),
        "attributes/home": np.full(num_attr, -1, dtype=np.int32),
    }
    if assignment.mapping is not None:
        home = np.asarray(assignment.mapping.attr_home, dtype=np.int32)
        arrays["attributes/home"][: len(home)] = home
    if assignment.communities is not None and assignment.mapping is not None:
        arrays["vertices/community_id"] = np.asarray(assignment.communities.community_id, dtype=np.int64)
        arrays["communities/volume"] = np.asarray(assignment.communities.volume, dtype=np.int64)
        arrays["communities/part_id"] = np.asarray(assignment.mapping.community_part, dtype=np.int32)
    if attr.model is not None:
        arrays["attributes/centroids"] = np.asarray(attr.model.centroids, dtype=np.float32)
        if attr.model.projection is not None:
            arrays["attributes/projection"] = np.asarray(attr.model.projection, dtype=np.float32)
    attrs = {
        "generation": int(generation),
        "num_nodes": n,
        "num_parts": k,
        "num_edges": int(assignment.num_edges),
        "feat_dim": int(input_info.get("feat_dim", 0)),
        "algorithm": assignment.config.algo,
        "config": assignment.config.to_dict(),
        "kernel": assignment.kernel.to_dict(),
        "attr_source": attr.source,
        "locality": [int(assignment.locality[0]), int(assignment.locality[1])],
        "shards": shard_records(input_info, generation),
    }
    return arrays, attrs


def write_assignment_state(assignment, path: str | Path, generation: int, input_info: dict[str, Any]) -> str:
    """Write the state of a finished partitioning run to ``path``; return its checksum."""
    arrays, attrs = assignment_state(assignment, generation, input_info)
    return write_state(path, arrays, attrs)


def _grow(array: np.ndarray | None, n: int, fill) -> np.ndarray | None:
    if array is None:
        return None
    if len(array) >= n:
        return array
    out = np.full((n, *array.shape[1:]), fill, dtype=array.dtype)
    out[: len(array)] = array
    return out


@dataclass
class Continuation:
    """A loaded state, as mutable O(N) arrays, that a stream can continue from.

    ``num_nodes`` may grow (:meth:`grow`) for new nodes: their degree, replicas and
    label start empty, their master and attribute cluster at -1 until placed, and
    each is a singleton community of volume 0 with no partition.
    """

    num_nodes: int
    num_parts: int
    num_edges: int
    config: PartitionConfig
    kernel: KernelSettings
    degree: np.ndarray
    attr: np.ndarray
    master: np.ndarray
    label: np.ndarray
    replicas: np.ndarray
    loads: np.ndarray
    attr_home: np.ndarray
    community: np.ndarray | None
    volume: np.ndarray | None
    community_part: np.ndarray | None
    centroids: np.ndarray | None
    projection: np.ndarray | None
    attrs: dict[str, Any]

    @classmethod
    def from_state(cls, state: PartitionerState) -> Continuation:
        attrs = dict(state.attrs)
        config_dict = dict(attrs.get("config") or {})
        config_dict.pop("extra", None)
        try:
            config = PartitionConfig(**config_dict)
        except (TypeError, ValueError) as exc:
            raise StoreError(
                format_problem(f"state {state.path}, attrs config", "a PartitionConfig", f"{config_dict} ({exc})",
                               "rerun `asepr partition ... --overwrite` with this asepr version.")
            ) from exc

        def copy(name):
            # The loaded arrays are the state's own (read from disk for this object), so
            # they are taken over rather than copied: one O(N) copy less at the peak.
            array = state.get(name)
            return None if array is None else np.ascontiguousarray(array)

        return cls(
            num_nodes=state.num_nodes, num_parts=state.num_parts, num_edges=state.num_edges,
            config=config, kernel=KernelSettings.from_dict(attrs.get("kernel") or {}, config, state.num_edges),
            degree=copy("vertices/degree"), attr=copy("vertices/attr_cluster_id"),
            master=copy("vertices/master"), label=copy("vertices/label"),
            replicas=copy("vertices/replicas"), loads=copy("partitions/loads"),
            attr_home=copy("attributes/home"), community=copy("vertices/community_id"),
            volume=copy("communities/volume"), community_part=copy("communities/part_id"),
            centroids=copy("attributes/centroids"), projection=copy("attributes/projection"),
            attrs=attrs,
        )

    @property
    def has_communities(self) -> bool:
        return self.community is not None

    def grow(self, num_nodes: int) -> None:
        """Make room for nodes ``self.num_nodes .. num_nodes - 1`` (new nodes)."""
        old = self.num_nodes
        if num_nodes <= old:
            return
        self.degree = _grow(self.degree, num_nodes, 0)
        self.attr = _grow(self.attr, num_nodes, -1)
        self.master = _grow(self.master, num_nodes, -1)
        self.label = _grow(self.label, num_nodes, -1)
        self.replicas = _grow(self.replicas, num_nodes, 0)
        if self.community is not None:
            self.community = _grow(self.community, num_nodes, -1)
            self.community[old:] = np.arange(old, num_nodes)
            self.volume = _grow(self.volume, num_nodes, 0)
            self.community_part = _grow(self.community_part, num_nodes, -1)
        self.num_nodes = num_nodes

    def vertex_part(self) -> np.ndarray | None:
        """p(c(v)) per vertex (-1 without a community partition)."""
        if self.community is None:
            return None
        return self.community_part[self.community]

    def vertex_volume(self) -> np.ndarray | None:
        if self.community is None:
            return None
        return self.volume[self.community]

    def vertex_home(self) -> np.ndarray | None:
        if not self.config.uses_attributes or not len(self.attr_home):
            return None
        attr = np.clip(self.attr, 0, len(self.attr_home) - 1)
        return np.where(self.attr >= 0, self.attr_home[attr], -1).astype(np.int64)

    def assign_state(self, seen_degree: np.ndarray) -> AssignState:
        """The kernel state: exact degrees, saved replicas and loads, ``seen_degree`` as pdeg."""
        state = AssignState(self.num_parts, self.degree, self.vertex_part(), self.vertex_volume(),
                            self.vertex_home())
        state.vstate[:, : state.words] = self.replicas.view(np.int64)
        state.pdeg[:] = seen_degree
        state.loads[:] = self.loads
        return state

    def arrays(self) -> dict[str, np.ndarray]:
        arrays = {
            "vertices/degree": self.degree, "vertices/attr_cluster_id": self.attr,
            "vertices/master": self.master, "vertices/label": self.label,
            "vertices/replicas": self.replicas, "partitions/loads": self.loads,
            "attributes/home": self.attr_home,
        }
        if self.community is not None:
            arrays.update({"vertices/community_id": self.community, "communities/volume": self.volume,
                           "communities/part_id": self.community_part})
        if self.centroids is not None:
            arrays["attributes/centroids"] = self.centroids
        if self.projection is not None:
            arrays["attributes/projection"] = self.projection
        return arrays

    def write(self, path: str | Path, generation: int, *, shards: list[dict], locality: tuple[int, int],
              extra: dict[str, Any] | None = None) -> str:
        """Write this state as generation ``generation``; return its checksum."""
        attrs = {
            **{k: v for k, v in self.attrs.items()
               if k not in ("format", "format_version", "array_checksums", "checksum", "replica_words")},
            **(extra or {}),
            "generation": int(generation),
            "num_nodes": int(self.num_nodes),
            "num_parts": int(self.num_parts),
            "num_edges": int(self.num_edges),
            "kernel": self.kernel.to_dict(),
            "locality": [int(locality[0]), int(locality[1])],
            "shards": shards,
        }
        return write_state(path, self.arrays(), attrs)


def state_needs(run: PartitionConfig, s: RunShape) -> Need:
    """Memory and disk of :func:`write_assignment_state`: the finished assignment
    (``replicas``, ``master``, ``labels``) written to ``state.zarr`` chunk by chunk, and
    ``master.npy``. The attribute clusters' centroids (and the random projection
    before them, ``d x d'``, when the features were projected) are stored with them:
    random floats, stored raw, and on a small graph of wide features most of the state."""
    arrays = held_arrays(run, s) + 8 * s.words * s.n + 12 * s.n
    attributes = 0 if run.attr_column else 4 * s.d_emb * (run.attr_clusters + (s.d if s.d_emb != s.d else 0))
    state = arrays / STORE_RATIO["state"] + attributes + STATE_TREE
    return Need(driver=arrays + 4 * CHUNK_BYTES, written=state + 4 * s.n, kept=state)
