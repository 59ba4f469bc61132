"""A partition store behind PyG's FeatureStore / GraphStore, sampled by the project's sampler."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch_geometric.loader import LinkLoader, NeighborLoader, NodeLoader
from torch_geometric.nn import SAGEConv
from torch_geometric.sampler import NegativeSampling

from asepr.pipeline.config import PartitionConfig
from asepr.pipeline.partition_run import partition_to_store
from asepr.storage.errors import StoreError
from tests.storage.helpers import write_input
from asepr.training.config import TrainConfig
from asepr.training.graph.data import load_local_graph
from asepr.training.graph.pyg_store import open_pyg_stores
from asepr.training.graph.sampler import NeighborSampler
from asepr.training.tasks import NodeTask


class SAGE(torch.nn.Module):
    def __init__(self, d: int, hidden: int, classes: int):
        super().__init__()
        self.conv1, self.conv2 = SAGEConv(d, hidden), SAGEConv(hidden, classes)

    def forward(self, x, edge_index):
        return self.conv2(F.relu(self.conv1(x, edge_index)), edge_index)


def test_a_users_neighbor_loader_loop_gets_the_trainers_batches(cora_parts):
    out = cora_parts(2, halo=1)
    fanouts, batch_size, seed = (5, 3), 64, 17
    # The project's trainer: its batches for a fixed generator seed (GAT keeps edge_index as the graph).
    config = TrainConfig(model="gat", batch_size=batch_size, fanouts=fanouts)
    task = NodeTask(load_local_graph(out, [0]), 7, config)
    trainer = list(task.batches(torch.Generator().manual_seed(seed)))

    # A PyG user's own loop over the stores, as in docs/guide/pyg.md.
    feature_store, graph_store = open_pyg_stores(out, 0)
    gen = torch.Generator().manual_seed(seed)
    train_idx = feature_store.get_tensor("train_mask").nonzero().view(-1)
    order = train_idx[torch.randperm(len(train_idx), generator=gen)]
    sampler = NeighborSampler.from_graph_store(graph_store, fanouts, generator=gen)
    loader = NeighborLoader((feature_store, graph_store), num_neighbors=list(fanouts), input_nodes=order,
                            batch_size=batch_size, neighbor_sampler=sampler)
    torch.manual_seed(0)
    model = SAGE(int(feature_store.get_tensor_size("x")[1]), 16, 7)
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
    losses, count = [], 0
    for batch, ref in zip(loader, trainer, strict=True):
        assert torch.equal(batch.n_id, ref.n_id) and torch.equal(batch.edge_index, ref.graph)
        assert torch.equal(batch.n_id[: batch.batch_size], order[count: count + batch.batch_size])
        assert torch.equal(batch.global_nid, task.graph.global_nid[batch.n_id])
        assert torch.equal(batch.x, task.graph.x[batch.n_id]) and bool(batch.train_mask[: batch.batch_size].all())
        count += batch.batch_size
        optimizer.zero_grad()
        logits = model(batch.x, batch.edge_index)[: batch.batch_size]
        loss = F.cross_entropy(logits, batch.y[: batch.batch_size])
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    assert count == len(train_idx) == task.num_train
    # A second epoch over the same stores learns (the loop trains a real model).
    for batch in NeighborLoader((feature_store, graph_store), num_neighbors=list(fanouts), input_nodes=train_idx,
                                batch_size=batch_size, shuffle=True, neighbor_sampler=sampler):
        optimizer.zero_grad()
        loss = F.cross_entropy(model(batch.x, batch.edge_index)[: batch.batch_size], batch.y[: batch.batch_size])
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    assert np.mean(losses[-5:]) < np.mean(losses[:5])


def _copy(out: Path, tmp_path: Path) -> Path:
    copy = tmp_path / "out"
    shutil.copytree(out, copy)
    return copy


def test_opening_a_partition_reads_no_other_partitions_files(cora_parts, tmp_path):
    out = _copy(cora_parts(2), tmp_path)
    reference = load_local_graph(out, [0])
    manifest = json.loads((out / "manifest.json").read_text())
    for entry in manifest["partitions"]:
        if int(entry["part_id"]) != 0:
            shutil.rmtree(out / entry["path"])
    (out / "node_map.parquet").unlink()
    with pytest.raises(StoreError):
        open_pyg_stores(out, 1)
    feature_store, graph_store = open_pyg_stores(out, 0)
    sampler = NeighborSampler.from_graph_store(graph_store, (4, 4), generator=torch.Generator().manual_seed(0))
    loader = NodeLoader((feature_store, graph_store), sampler, input_nodes=torch.arange(feature_store.num_nodes),
                        batch_size=500)
    seen = torch.cat([batch.n_id[: batch.batch_size] for batch in loader])
    assert torch.equal(seen, torch.arange(reference.num_nodes))
    assert torch.equal(feature_store.get_tensor("y"), reference.y)
    assert torch.equal(feature_store.get_tensor("val_mask"), reference.val_mask)


def test_rows_are_read_by_chunk_and_every_read_is_checked(cora_parts, tmp_path):
    out = _copy(cora_parts(2, halo=1), tmp_path)
    reference = load_local_graph(out, [0])
    feature_store, _ = open_pyg_stores(out, 0)
    x = feature_store.store.x
    per = x.chunks[0]
    assert len(x) > 2 * per  # Cora's 1,433-wide rows span three chunks here
    # Damage the middle chunk of x: rows of the chunks around it still read (only the
    # chunks that hold the rows are read), a row of the damaged chunk is refused by name.
    chunk_file = Path(feature_store.store.path) / "nodes" / "x" / "c" / "1" / "0"
    data = bytearray(chunk_file.read_bytes())
    data[len(data) // 2] ^= 0xFF
    chunk_file.write_bytes(bytes(data))
    rows = torch.tensor([3, 2 * per + 5, 0, len(x) - 1])
    assert torch.equal(feature_store.get_tensor("x", index=rows), reference.x[rows])
    with pytest.raises(StoreError, match="nodes/x, chunk c/1/0"):
        feature_store.get_tensor("x", index=torch.tensor([1, per + 1]))


def test_put_get_remove_and_ids(cora_parts):
    out = cora_parts(2)
    reference = load_local_graph(out, [1])
    fs, gs = open_pyg_stores(out, 1)
    n = fs.num_nodes
    names = {a.attr_name for a in fs.get_all_tensor_attrs()}
    assert names == {"x", "y", "split", "is_master", "global_nid", "train_mask", "val_mask", "test_mask"}
    emb = torch.randn(n, 3)
    fs.put_tensor(emb, "emb")
    assert torch.equal(fs.get_tensor("emb", index=torch.tensor([4, 2])), emb[[4, 2]])
    assert fs.get_tensor_size("emb") == (n, 3) and fs.get_tensor_size("x") == tuple(reference.x.shape)
    fs.put_tensor(torch.tensor([9, 9]), "y", index=torch.tensor([0, 1]))  # rows of a stored attribute: a copy
    assert fs.get_tensor("y")[:2].tolist() == [9, 9] and torch.equal(fs.get_tensor("y")[2:], reference.y[2:])
    assert fs.remove_tensor("split") and not fs.remove_tensor("split")
    assert "split" not in {a.attr_name for a in fs.get_all_tensor_attrs()}
    with pytest.raises(KeyError, match="split"):
        fs.get_tensor("split")
    with pytest.raises(ValueError, match=f"{n} rows"):
        fs.put_tensor(torch.zeros(n + 1), "bad")
    # Both id spaces: global ids of local rows and back (-1 for a node of another partition).
    local = torch.tensor([0, 7, n - 1])
    gid = fs.global_ids(local)
    assert torch.equal(gid, reference.global_nid[local]) and torch.equal(fs.local_ids(gid), local)
    absent = int(torch.tensor(sorted(set(range(int(gid.max()) + 2)) - set(reference.global_nid.tolist()))[0]))
    assert fs.local_ids(torch.tensor([absent])).tolist() == [-1]
    # Edges in every layout: the trainer's message-passing graph.
    row, col = gs.get_edge_index(layout="coo")
    assert torch.equal(torch.stack([row, col]), reference.edge_index)
    rowptr, dst = gs.get_edge_index(layout="csr")
    assert torch.equal(torch.repeat_interleave(torch.arange(n), rowptr.diff()), row.sort(stable=True).values)
    assert sorted(zip(torch.repeat_interleave(torch.arange(n), rowptr.diff()).tolist(), dst.tolist())) == \
        sorted(zip(row.tolist(), col.tolist()))
    assert gs.remove_edge_index(layout="csr") and "csr" not in {a.layout.value for a in gs.get_all_edge_attrs()}
    with pytest.raises(KeyError):
        gs.get_edge_index(layout="csr")


def test_a_directed_store_serves_its_stored_csr(tmp_path):
    write_input(tmp_path / "in", num_nodes=80, num_edges=600, meta={})
    out = tmp_path / "out"
    partition_to_store(tmp_path / "in", out, PartitionConfig(num_parts=2, algo="asep"))
    reference = load_local_graph(out, [0])
    assert not reference.undirected
    fs, gs = open_pyg_stores(out, 0)
    rowptr, col = gs.get_edge_index(layout="csr")
    assert np.array_equal(rowptr.numpy(), fs.store.indptr[...])
    assert np.array_equal(col.numpy(), fs.store.indices[...].astype(np.int64))
    row, colptr = gs.get_edge_index(layout="csc")
    ref = NeighborSampler(reference.edge_index, reference.num_nodes)
    assert np.array_equal(colptr.numpy(), ref.ptr) and np.array_equal(row.numpy(), ref.src_by_dst)


def test_link_loader_over_the_stores(cora_parts):
    fs, gs = open_pyg_stores(cora_parts(2), 0)
    row, col = gs.get_edge_index(layout="coo")
    pos = torch.stack([row, col])[:, :300]
    loader = LinkLoader((fs, gs), NeighborSampler.from_graph_store(gs, (4, 4), generator=torch.Generator().manual_seed(3)),
                        edge_label_index=(None, pos), batch_size=128, neg_sampling=NegativeSampling("binary", amount=2))
    seen = []
    for batch in loader:
        k = len(batch.input_id)
        assert batch.edge_label.tolist() == [1.0] * k + [0.0] * 2 * k
        seen.append(batch.n_id[batch.edge_label_index[:, :k]])
        assert torch.equal(batch.global_nid, fs.global_ids(batch.n_id))
    assert torch.equal(torch.cat(seen, dim=1), pos)
