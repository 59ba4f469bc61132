"""One partition store behind PyG's remote-backend interface: a ``FeatureStore`` and a ``GraphStore``.

PyG reads graphs that it does not hold in memory through ``torch_geometric.data.FeatureStore``
(node attributes, fetched by row) and ``torch_geometric.data.GraphStore`` (edge indices in
``coo``, ``csr`` or ``csc`` layout); its ``NodeLoader``, ``LinkLoader`` and
``NeighborLoader(data=(feature_store, graph_store), neighbor_sampler=...)`` sample over the
graph store and gather the sampled rows from the feature store. :func:`open_pyg_stores`
gives both over partition ``p`` of an ``asepr partition`` output, opened with
:func:`asepr.storage.open_partition`: the manifest and that partition's store only, never another
partition's files (local or on an object store).

Node attributes (``DataTensorAttr``, no group name), part-local rows:

* ``x``, ``y``, ``split``, ``is_master``, ``global_nid``: the store's ``nodes/*`` arrays;
* ``train_mask``, ``val_mask``, ``test_mask``: master rows of each split (as the trainers
  count them: a replicated node counts once, on its master's partition).

Rows are read lazily: a request reads (and checks against its CRC-32C, as every store
read is) only the chunks that hold the requested rows, through a small cache of decoded
chunks, so a mini-batch touches a few chunks rather than the whole array. Tensors that a
user puts are kept in memory beside the store (the store itself is never written);
removing a stored attribute hides it from this feature store.

Edges (``DataEdgeAttr``, no edge type): the graph the trainers pass messages over,
part-local ids: every stored edge, halo copies included, and for an undirected input the
reverse of each as well. ``csr`` is the stored CSR when the input is directed; ``csc`` is
the CSR by destination that :class:`asepr.training.graph.sampler.NeighborSampler` samples, built in the
trainer's edge order, so that the sampler draws the same neighbours from the stores as in
the trainer. Edges are read on the first request.

Both ids are at hand: batches carry ``n_id`` (part-local) and ``global_nid``;
:meth:`PartitionFeatureStore.global_ids` and :meth:`PartitionFeatureStore.local_ids`
convert between them.
"""

from __future__ import annotations

from collections import OrderedDict
from pathlib import Path

import numpy as np
import torch
from torch_geometric.data import FeatureStore, GraphStore
from torch_geometric.data.data import DataEdgeAttr, DataTensorAttr
from torch_geometric.data.feature_store import TensorAttr
from torch_geometric.data.graph_store import EdgeAttr, EdgeLayout

from asepr.storage import SPLIT_TEST, SPLIT_TRAIN, SPLIT_VAL, PartitionStore, open_partition
from asepr.training.graph.sampler import csc_by_destination

__all__ = ["PartitionFeatureStore", "PartitionGraphStore", "open_pyg_stores"]

#: The stored node attributes and their arrays.
STORED = {"x": "nodes/x", "y": "nodes/y", "split": "nodes/split", "is_master": "nodes/is_master",
          "global_nid": "nodes/global_nid"}
#: The derived masks: master rows of one split.
MASKS = {"train_mask": SPLIT_TRAIN, "val_mask": SPLIT_VAL, "test_mask": SPLIT_TEST}
#: Decoded chunks kept per feature store (bytes); a chunk is about 4 MiB.
CACHE_BYTES = 64 << 20


def open_pyg_stores(out: str | Path, part_id: int, *, storage_options: dict | None = None,
                    cache_bytes: int = CACHE_BYTES) -> tuple[PartitionFeatureStore, PartitionGraphStore]:
    """``(feature_store, graph_store)`` over partition ``part_id`` of the output ``out``.

    Reads the manifest and that partition's store only (:func:`asepr.storage.open_partition`,
    which checks the store against its manifest entry).

    Raises
    ------
    StoreError
        No manifest, no such partition, or a store that does not match the manifest; later
        reads raise it for a missing, undecodable or altered chunk.
    """
    store = open_partition(out, part_id, storage_options=storage_options)
    return PartitionFeatureStore(store, cache_bytes=cache_bytes), PartitionGraphStore(store)


def _as_rows(index, n: int) -> np.ndarray | slice | None:
    """A row selection as a slice, an int64 array, or None for all rows."""
    if index is None:
        return None
    if isinstance(index, slice):
        return index
    if isinstance(index, (int, np.integer)):
        return np.asarray([int(index)], dtype=np.int64)
    rows = index.numpy() if isinstance(index, torch.Tensor) else np.asarray(index)
    if rows.dtype == np.bool_:
        rows = np.flatnonzero(rows)
    rows = rows.astype(np.int64, copy=False).reshape(-1)
    if len(rows) and (rows.min() < 0 or rows.max() >= n):
        raise IndexError(f"row ids must lie in [0, {n}), got [{int(rows.min())}, {int(rows.max())}]")
    return rows


class _ChunkCache:
    """Decoded chunks of checked arrays, least recently used first out, up to ``max_bytes``."""

    def __init__(self, max_bytes: int):
        self.max_bytes = int(max_bytes)
        self._chunks: OrderedDict[tuple[str, int], np.ndarray] = OrderedDict()
        self._bytes = 0

    def chunk(self, name: str, array, c: int) -> np.ndarray:
        key = (name, c)
        block = self._chunks.get(key)
        if block is not None:
            self._chunks.move_to_end(key)
            return block
        rows = array.chunks[0]
        block = array.read_rows(c * rows, min(len(array), (c + 1) * rows))
        self._chunks[key] = block
        self._bytes += block.nbytes
        while self._bytes > self.max_bytes and len(self._chunks) > 1:
            _, old = self._chunks.popitem(last=False)
            self._bytes -= old.nbytes
        return block

    def gather(self, name: str, array, rows: np.ndarray) -> np.ndarray:
        """``array[rows]``, reading only the chunks that hold ``rows``."""
        out = np.empty((len(rows), *array.shape[1:]), dtype=array.dtype)
        if not len(rows):
            return out
        per = array.chunks[0]
        cid = rows // per
        order = np.argsort(cid, kind="stable")
        sorted_cid = cid[order]
        cuts = np.flatnonzero(np.diff(sorted_cid)) + 1
        for group in np.split(order, cuts):
            c = int(cid[group[0]])
            out[group] = self.chunk(name, array, c)[rows[group] - c * per]
        return out


class PartitionFeatureStore(FeatureStore):
    """The node attributes of one partition store (see the module docstring)."""

    def __init__(self, store: PartitionStore, *, cache_bytes: int = CACHE_BYTES):
        super().__init__(tensor_attr_cls=DataTensorAttr)
        self.store = store
        self.num_nodes = store.num_nodes
        self._cache = _ChunkCache(cache_bytes)
        self._extra: dict[str, torch.Tensor] = {}
        self._hidden: set[str] = set()
        self._sorted_gid: np.ndarray | None = None

    # -- ids ------------------------------------------------------------------------------
    def global_ids(self, local: torch.Tensor) -> torch.Tensor:
        """The input's node ids of part-local rows ``local``."""
        return self._read("global_nid", _as_rows(local, self.num_nodes))

    def local_ids(self, global_ids: torch.Tensor) -> torch.Tensor:
        """The part-local rows of the input's node ids ``global_ids``; -1 where a node is
        not in this partition."""
        if self._sorted_gid is None:
            self._sorted_gid = np.asarray(self.store.global_nid[...], dtype=np.int64)
        gid = self._sorted_gid
        query = np.asarray(global_ids, dtype=np.int64).reshape(-1)
        at = np.searchsorted(gid, query).clip(max=max(len(gid) - 1, 0))
        hit = gid[at] == query if len(gid) else np.zeros(len(query), dtype=bool)
        return torch.from_numpy(np.where(hit, at, -1).astype(np.int64))

    # -- reads ----------------------------------------------------------------------------
    def _read(self, name: str, rows) -> torch.Tensor:
        if name in MASKS:
            split = self._read("split", rows).numpy()
            master = self._read("is_master", rows).numpy()
            return torch.from_numpy(master & (split == MASKS[name]))
        array = self.store[STORED[name]]
        if rows is None:
            data = array[...]
        elif isinstance(rows, slice):
            data = array[rows]
        else:
            data = self._cache.gather(name, array, rows)
        return torch.from_numpy(np.ascontiguousarray(data))

    def _visible(self) -> list[str]:
        names = [n for n in (*STORED, *MASKS) if n not in self._hidden and n not in self._extra]
        return names + list(self._extra)

    @staticmethod
    def _check_group(attr: TensorAttr) -> None:
        if attr.group_name is not None:
            raise KeyError(f"a partition's feature store has one node type (group_name None), "
                           f"got group_name {attr.group_name!r}")

    # -- torch_geometric.data.FeatureStore ------------------------------------------------
    def _get_tensor(self, attr: TensorAttr) -> torch.Tensor:
        self._check_group(attr)
        name = attr.attr_name
        if name in self._extra:
            tensor = self._extra[name]
            return tensor if attr.index is None else tensor[attr.index]
        if name in self._hidden or name not in STORED and name not in MASKS:
            raise KeyError(f"no node attribute {name!r} in {self.store.path}; "
                           f"it holds {', '.join(self._visible())}")
        return self._read(name, _as_rows(attr.index, self.num_nodes))

    def _put_tensor(self, tensor, attr: TensorAttr) -> bool:
        """Keep ``tensor`` (one row per node) in memory as attribute ``attr.attr_name``; with
        an index, write those rows of it (a stored attribute is copied first)."""
        self._check_group(attr)
        name = attr.attr_name
        tensor = torch.as_tensor(tensor)
        if attr.index is None:
            if tensor.shape[0] != self.num_nodes:
                raise ValueError(f"node attribute {name!r} needs {self.num_nodes} rows (one per node "
                                 f"of {self.store.path}), got {tensor.shape[0]}")
            self._extra[name] = tensor
        else:
            if name not in self._extra:
                self._extra[name] = self._get_tensor(DataTensorAttr(name)).clone()
            self._extra[name][attr.index] = tensor
        self._hidden.discard(name)
        return True

    def _remove_tensor(self, attr: TensorAttr) -> bool:
        self._check_group(attr)
        name = attr.attr_name
        if name in self._extra:
            del self._extra[name]
            if name in STORED or name in MASKS:
                self._hidden.add(name)
            return True
        if name in (*STORED, *MASKS) and name not in self._hidden:
            self._hidden.add(name)
            return True
        return False

    def _get_tensor_size(self, attr: TensorAttr) -> tuple[int, ...] | None:
        name = attr.attr_name
        if name in self._extra:
            return tuple(self._extra[name].shape)
        if name in self._hidden:
            return None
        if name in MASKS:
            return (self.num_nodes,)
        return tuple(self.store[STORED[name]].shape) if name in STORED else None

    def get_all_tensor_attrs(self) -> list[TensorAttr]:
        return [DataTensorAttr(name) for name in self._visible()]


class PartitionGraphStore(GraphStore):
    """The message-passing edges of one partition store (see the module docstring)."""

    LAYOUTS = (EdgeLayout.COO, EdgeLayout.CSR, EdgeLayout.CSC)

    def __init__(self, store: PartitionStore):
        super().__init__(edge_attr_cls=DataEdgeAttr)
        self.store = store
        self.num_nodes = store.num_nodes
        self._layouts: dict[EdgeLayout, tuple[torch.Tensor, torch.Tensor]] = {}
        self._extra: dict[tuple, tuple[torch.Tensor, torch.Tensor]] = {}
        self._hidden: set[EdgeLayout] = set()

    def _stored_csr(self) -> tuple[np.ndarray, np.ndarray]:
        indptr = np.asarray(self.store.indptr[...], dtype=np.int64)
        indices = np.asarray(self.store.indices[...], dtype=np.int64)
        return indptr, indices

    def _coo(self) -> tuple[torch.Tensor, torch.Tensor]:
        indptr, indices = self._stored_csr()
        src = np.repeat(np.arange(self.num_nodes, dtype=np.int64), np.diff(indptr))
        row, col = torch.from_numpy(src), torch.from_numpy(indices)
        if self.store.undirected:
            row, col = torch.cat([row, col]), torch.cat([col, row])
        return row, col

    def _build(self, layout: EdgeLayout) -> tuple[torch.Tensor, torch.Tensor]:
        if layout == EdgeLayout.CSR and not self.store.undirected:
            indptr, indices = self._stored_csr()
            return torch.from_numpy(indptr), torch.from_numpy(indices)
        row, col = self._layouts[EdgeLayout.COO] if EdgeLayout.COO in self._layouts else self._coo()
        if layout == EdgeLayout.COO:
            return row, col
        if layout == EdgeLayout.CSC:
            ptr, src_by_dst = csc_by_destination(torch.stack([row, col]), self.num_nodes)
            return torch.from_numpy(src_by_dst), torch.from_numpy(ptr)
        ptr, dst_by_src = csc_by_destination(torch.stack([col, row]), self.num_nodes)
        return torch.from_numpy(ptr), torch.from_numpy(dst_by_src)

    @staticmethod
    def _key(edge_attr: EdgeAttr) -> tuple:
        return edge_attr.edge_type, EdgeLayout(edge_attr.layout)

    # -- torch_geometric.data.GraphStore --------------------------------------------------
    def _get_edge_index(self, edge_attr: EdgeAttr) -> tuple[torch.Tensor, torch.Tensor] | None:
        key = self._key(edge_attr)
        if key in self._extra:
            return self._extra[key]
        edge_type, layout = key
        if edge_type is not None or layout in self._hidden:
            return None
        if layout not in self._layouts:
            self._layouts[layout] = self._build(layout)
        return self._layouts[layout]

    def _put_edge_index(self, edge_index, edge_attr: EdgeAttr) -> bool:
        """Keep ``edge_index`` in memory under ``edge_attr`` (the store is never written)."""
        self._extra[self._key(edge_attr)] = edge_index
        return True

    def _remove_edge_index(self, edge_attr: EdgeAttr) -> bool:
        key = self._key(edge_attr)
        if key in self._extra:
            del self._extra[key]
            return True
        edge_type, layout = key
        if edge_type is None and layout not in self._hidden:
            self._hidden.add(layout)
            self._layouts.pop(layout, None)
            return True
        return False

    def get_all_edge_attrs(self) -> list[EdgeAttr]:
        n = (self.num_nodes, self.num_nodes)
        attrs = [DataEdgeAttr(layout, size=n) for layout in self.LAYOUTS if layout not in self._hidden]
        extra = [EdgeAttr(edge_type, layout, size=None) for edge_type, layout in self._extra
                 if edge_type is not None or layout in self._hidden]
        return attrs + extra
