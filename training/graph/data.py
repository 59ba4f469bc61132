"""A trainer's local graph: its own partition store(s) as a PyG ``Data``.

Rank ``r`` of ``W`` trains on partitions ``r, r + W, r + 2W, ...`` (one when
``W == num_parts``) and opens them through :func:`asepr.storage.open_partition`, which reads
the manifest and those stores only: never another rank's store nor
``node_map.parquet``. There are no remote neighbour fetches.

ID spaces: ``global_nid`` is the input's node id; ``local_nid`` is the row in this
rank's graph (the partition's ``part_local_nid`` when the rank has one partition, and
the row of the sorted union of ``global_nid`` when it has several).

* ``edge_index`` (message passing) holds every stored edge of the partition(s), halo
  copies included; for an undirected input (each edge stored once) the reverse
  edges are added, so messages flow both ways.
* ``own_edges`` are the non-halo edges as stored: each input edge belongs to exactly
  one partition, so link-prediction positives are never counted twice across ranks.
* Masks (``train_mask`` / ``val_mask`` / ``test_mask``) select **master** nodes of
  each split: a node replicated on several partitions counts once, on its master's rank.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from torch_geometric.data import Data

from asepr.storage import SPLIT_TEST, SPLIT_TRAIN, SPLIT_VAL, open_partition, read_manifest
from asepr.storage.errors import StoreError, format_problem
from asepr.storage.partitions.reader import read_committed

__all__ = ["LocalGraph", "build_local_graph", "load_local_graph", "normalize_features", "prepare_features",
           "project_features", "rank_partitions"]

log = logging.getLogger(__name__)


@dataclass
class LocalGraph:
    """One rank's training graph (all tensors on CPU)."""

    x: torch.Tensor  # float32 [n, d]
    y: torch.Tensor  # int64 [n], -1 unknown
    split: torch.Tensor  # int8 [n]
    is_master: torch.Tensor  # bool [n]
    global_nid: torch.Tensor  # int64 [n], sorted
    edge_index: torch.Tensor  # int64 [2, m'] message passing (halo and reverse edges included)
    own_edges: torch.Tensor  # int64 [2, m_own] this rank's non-halo edges, as stored
    undirected: bool
    part_ids: tuple[int, ...] = ()
    generation: int = 0

    @property
    def num_nodes(self) -> int:
        return int(self.x.shape[0])

    def mask(self, split: int) -> torch.Tensor:
        return self.is_master & (self.split == split)

    @property
    def train_mask(self) -> torch.Tensor:
        return self.mask(SPLIT_TRAIN)

    @property
    def val_mask(self) -> torch.Tensor:
        return self.mask(SPLIT_VAL)

    @property
    def test_mask(self) -> torch.Tensor:
        return self.mask(SPLIT_TEST)

    def to_data(self) -> Data:
        """A PyG ``Data`` with ``x``, ``edge_index``, ``y``, the masks and ``is_master``."""
        return Data(
            x=self.x, edge_index=self.edge_index, y=self.y, train_mask=self.train_mask,
            val_mask=self.val_mask, test_mask=self.test_mask, is_master=self.is_master,
            global_nid=self.global_nid, num_nodes=self.num_nodes,
        )


def rank_partitions(num_parts: int, rank: int, world_size: int) -> list[int]:
    """The partitions rank ``rank`` of ``world_size`` trains on: ``rank, rank + W, ...``."""
    if world_size > num_parts:
        raise StoreError(
            format_problem(
                "trainer launch", f"at most {num_parts} ranks (one partition each at least)",
                f"{world_size} ranks", f"launch at most {num_parts} trainers, or repartition with a larger -k.",
            )
        )
    return list(range(rank, num_parts, world_size))


def build_local_graph(
    global_nid: np.ndarray,
    x: np.ndarray,
    y: np.ndarray,
    split: np.ndarray,
    is_master: np.ndarray,
    src_local_nid: np.ndarray,
    dst_local_nid: np.ndarray,
    is_halo: np.ndarray | None,
    *,
    undirected: bool,
    part_ids: tuple[int, ...] = (),
    generation: int = 0,
) -> LocalGraph:
    """Assemble a :class:`LocalGraph` from node rows and edges over ``local_nid``."""
    src = torch.from_numpy(np.ascontiguousarray(src_local_nid, dtype=np.int64))
    dst = torch.from_numpy(np.ascontiguousarray(dst_local_nid, dtype=np.int64))
    own = torch.ones(len(src), dtype=torch.bool) if is_halo is None else ~torch.from_numpy(np.asarray(is_halo, dtype=bool))
    edge_index = torch.stack([src, dst])
    if undirected:
        edge_index = torch.cat([edge_index, edge_index.flip(0)], dim=1)
    return LocalGraph(
        x=torch.from_numpy(np.ascontiguousarray(x, dtype=np.float32)),
        y=torch.from_numpy(np.ascontiguousarray(y, dtype=np.int64)),
        split=torch.from_numpy(np.ascontiguousarray(split, dtype=np.int8)),
        is_master=torch.from_numpy(np.ascontiguousarray(is_master, dtype=bool)),
        global_nid=torch.from_numpy(np.ascontiguousarray(global_nid, dtype=np.int64)),
        edge_index=edge_index,
        own_edges=torch.stack([src[own], dst[own]]),
        undirected=bool(undirected),
        part_ids=tuple(int(p) for p in part_ids),
        generation=int(generation),
    )


def _read_part(store) -> dict[str, np.ndarray]:
    arrays = store.to_numpy()
    indptr = arrays["edges/indptr"]
    src = np.repeat(np.arange(store.num_nodes, dtype=np.int64), np.diff(indptr))
    return {
        "global_nid": arrays["nodes/global_nid"], "x": arrays["nodes/x"], "y": arrays["nodes/y"],
        "split": arrays["nodes/split"], "is_master": arrays["nodes/is_master"],
        "src": src, "dst": arrays["edges/indices"].astype(np.int64),
        "is_halo": arrays.get("edges/is_halo", np.zeros(len(src), dtype=bool)),
    }


def load_local_graph(
    out: str | Path, part_ids: list[int], *, storage_options: dict | None = None
) -> LocalGraph:
    """Load partitions ``part_ids`` of the output ``out`` as one local graph.

    Reads the manifest and those partitions' stores only. With several partitions, a
    node stored in more than one becomes one row (master if it is master in any). A
    commit (ingest, rebalance) that swaps the stores during the load makes the load
    start again on the new generation (:func:`asepr.storage.partitions.reader.read_committed`).

    Raises
    ------
    StoreError
        No manifest, an unknown partition, a store that does not match the manifest, or
        one whose arrays cannot be read (named).
    """
    return read_committed(out, lambda: _load_local_graph(out, part_ids, storage_options=storage_options),
                          storage_options=storage_options)


def _load_local_graph(out: str | Path, part_ids: list[int], *, storage_options: dict | None) -> LocalGraph:
    if not part_ids:
        raise StoreError(format_problem(f"output {out}", "at least one partition to load",
                                        "an empty list", "pass the rank's partition ids."))
    manifest = read_manifest(out, storage_options=storage_options)
    parts = []
    undirected = None
    for part_id in part_ids:
        # open_partition checks the store against its manifest entry; after an ingest a
        # partition the ingest did not change keeps its older store (and entry generation).
        store = open_partition(out, part_id, storage_options=storage_options)
        undirected = store.undirected if undirected is None else undirected
        try:
            parts.append(_read_part(store))
        except (OSError, RuntimeError, ValueError, KeyError) as exc:
            # A chunk that does not decompress (blosc), a missing array or a damaged file.
            raise StoreError(format_problem(
                f"partition store {store.path}", "arrays that read back as written",
                f"{type(exc).__name__}: {exc}",
                f"run `asepr verify {out}`; repartition, or restore the store from a copy.")) from exc
    if len(parts) == 1:
        p = parts[0]
        graph = build_local_graph(
            p["global_nid"], p["x"], p["y"], p["split"], p["is_master"], p["src"], p["dst"], p["is_halo"],
            undirected=bool(undirected), part_ids=tuple(part_ids), generation=int(manifest["generation"]),
        )
    else:
        all_gid = np.concatenate([p["global_nid"] for p in parts])
        global_nid, first, inverse = np.unique(all_gid, return_index=True, return_inverse=True)
        is_master = np.zeros(len(global_nid), dtype=bool)
        np.logical_or.at(is_master, inverse, np.concatenate([p["is_master"] for p in parts]))
        offsets = np.cumsum([0] + [len(p["global_nid"]) for p in parts])
        src = np.concatenate([inverse[o + p["src"]] for o, p in zip(offsets, parts)])
        dst = np.concatenate([inverse[o + p["dst"]] for o, p in zip(offsets, parts)])

        def rows(name: str) -> np.ndarray:
            return np.concatenate([p[name] for p in parts])[first]

        graph = build_local_graph(
            global_nid, rows("x"), rows("y"), rows("split"), is_master, src, dst,
            np.concatenate([p["is_halo"] for p in parts]), undirected=bool(undirected),
            part_ids=tuple(part_ids), generation=int(manifest["generation"]),
        )
    log.info(
        "loaded partition(s) %s of generation %d: %d nodes (%d masters), %d edges (%d own)",
        list(part_ids), graph.generation, graph.num_nodes, int(graph.is_master.sum()),
        graph.edge_index.shape[1], graph.own_edges.shape[1],
    )
    return graph


def normalize_features(x: torch.Tensor, norm: str) -> torch.Tensor:
    """Row-normalise features: ``"l1"``, ``"l2"`` or ``"none"`` (zero rows stay zero)."""
    if norm == "none" or not x.numel():
        return x
    p = 1 if norm == "l1" else 2
    return x / x.norm(p=p, dim=1, keepdim=True).clamp(min=1e-12)


def project_features(x: torch.Tensor, dim: int, seed: int) -> torch.Tensor:
    """``x @ R`` with R a seeded d × ``dim`` Gaussian matrix scaled by 1/√dim.

    R depends only on (d, dim, seed), so every rank and the centralized run project
    identically. Sparse rows (bag-of-words) are multiplied as a sparse matrix.
    """
    d = int(x.shape[1])
    if dim <= 0 or d <= dim:
        return x
    g = torch.Generator().manual_seed(int(seed) * 1_000_003 + d)
    r = torch.randn(d, dim, generator=g) / dim**0.5
    density = float((x != 0).float().mean()) if x.numel() else 1.0
    if density < 0.1:
        return torch.sparse.mm(x.to_sparse(), r)
    return x @ r


def prepare_features(x: torch.Tensor, config) -> torch.Tensor:
    """The features a model trains on: ``x`` row-normalised by ``config.feature_norm``,
    then projected to ``config.feature_projection`` dimensions when that is set.

    Per row and seeded by ``config.seed`` only, so every rank, every strategy and the
    centralized run prepare a node's features identically.
    """
    x = normalize_features(x, config.feature_norm)
    if config.feature_projection:
        x = project_features(x, config.feature_projection, config.seed)
    return x
