"""Remote negatives (training.negatives): on 2 gloo ranks of Cora, each rank's pool holds
vertices whose master is on the other rank, with the structure the other rank sampled
for them over its training edges; the pool never carries positives; its bytes follow the
module docstring's formula; a share of the training negatives comes from it; and link
training with the pool still learns (loss well below chance)."""

from __future__ import annotations

import dataclasses
import math
import os

import numpy as np
import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from tests.training.conftest import free_port, run_ranks
from training.checkpoint import RunDir
from training.comm import Comm
from training.config import TrainConfig
from training.data import load_local_graph
from training.negatives import NEGATIVES, NegativePool, pool_block
from training.tasks import LinkTask

CONFIG = TrainConfig(task="link", negative_pool=300, remote_negatives=0.5, hidden=32, seed=5)
CHANCE = 2 * math.log(2)



def _rank(rank: int, world: int, port: int, out: str, result_dir: str) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    try:
        graph = load_local_graph(out, [rank])
        comm = Comm()
        task = LinkTask(graph, CONFIG, comm)
        pool = task.pool
        negatives = task.negatives(20_000, torch.Generator().manual_seed(1))
        torch.save({"pool_gid": pool.global_nid, "pool_roots": pool.roots, "pool_edges": pool.edge_index,
                    "pool_x": pool.x, "sent": pool.bytes_sent, "counted": comm.bytes.sent[NEGATIVES],
                    "num_nodes": task.num_nodes, "train_pos_max": int(task.train_pos.max()),
                    "features_rows": int(task.features.shape[0]), "negatives": negatives,
                    "train_edges": task.edge_index, "gid": graph.global_nid},
                   os.path.join(result_dir, f"rank{rank}.pt"))
    finally:
        dist.destroy_process_group()


@pytest.fixture(scope="module")
def pools(cora_parts, tmp_path_factory):
    out = cora_parts(2)
    result_dir = tmp_path_factory.mktemp("pools")
    mp.start_processes(_rank, args=(2, free_port(), str(out), str(result_dir)), nprocs=2, join=True,
                       start_method="fork")
    graphs = [load_local_graph(out, [r]) for r in range(2)]
    return graphs, [torch.load(result_dir / f"rank{r}.pt") for r in range(2)]


def test_pool_roots_are_the_other_ranks_masters_with_their_sampled_structure(pools):
    graphs, results = pools
    for rank in range(2):
        mine, other, res = graphs[rank], graphs[1 - rank], results[rank]
        roots = res["pool_gid"][res["pool_roots"]]
        assert len(roots) == CONFIG.negative_pool  # ceil(300 / (W - 1)) from the one other rank
        assert len(torch.unique(roots)) == len(roots)
        other_masters = set(other.global_nid[other.is_master].tolist())
        assert set(roots.tolist()) <= other_masters
        assert not set(roots.tolist()) & set(mine.global_nid[mine.is_master].tolist())  # remote: never mine
        # Every pool row is a vertex of the other partition, with its (prepared) features.
        rows = torch.searchsorted(other.global_nid, res["pool_gid"])
        assert torch.equal(other.global_nid[rows], res["pool_gid"])
        assert torch.allclose(res["pool_x"], other.x[rows])
        # Every pool edge is a training edge of the other rank (no held-out edge travels).
        other_train = {tuple(e) for e in other.global_nid[results[1 - rank]["train_edges"]].t().tolist()}
        pool_edges = res["pool_gid"][res["pool_edges"]].t().tolist()
        assert pool_edges and all(tuple(e) in other_train for e in pool_edges)


def test_pool_rows_are_never_positives_and_bytes_follow_the_formula(pools):
    graphs, results = pools
    d = graphs[0].x.shape[1]
    for rank in range(2):
        res = results[rank]
        assert res["train_pos_max"] < res["num_nodes"]  # positives index local rows only
        assert res["features_rows"] == res["num_nodes"] + len(res["pool_gid"])
        # What the other rank sent this one: rows (id + features), edges, the root count.
        sent_by_other = results[1 - rank]
        block_rows, block_edges = len(res["pool_gid"]), res["pool_edges"].shape[1]
        assert sent_by_other["sent"] == block_rows * (8 + 4 * d) + 16 * block_edges + 8
        assert sent_by_other["counted"] == sent_by_other["sent"]


def test_a_share_of_the_negatives_are_pool_roots(pools):
    _, results = pools
    for res in results:
        n, w = res["num_nodes"], res["negatives"]
        remote = w >= n
        assert abs(float(remote.float().mean()) - CONFIG.remote_negatives) < 0.02
        assert set((w[remote] - n).tolist()) <= set(res["pool_roots"].tolist())  # only roots, not their neighbours
        assert int(w[~remote].min()) >= 0


def test_pool_block_without_masters_is_empty():
    x = torch.randn(5, 3)
    block = pool_block(x, torch.arange(5), torch.zeros(5, dtype=torch.bool), torch.tensor([[0, 1], [1, 2]]),
                       4, (2, 2), torch.Generator().manual_seed(0))
    assert block.num_rows == 0 and len(block.roots) == 0


def test_single_rank_has_no_pool_and_draws_as_before(cora_parts):
    graph = load_local_graph(cora_parts(2), [0])
    task = LinkTask(graph, CONFIG, Comm())
    assert task.pool.num_rows == 0 and task.features is graph.x
    plain = LinkTask(graph, dataclasses.replace(CONFIG, negative_pool=0))
    got = task.negatives(100, torch.Generator().manual_seed(3))
    assert torch.equal(got, plain.negatives(100, torch.Generator().manual_seed(3)))
    assert isinstance(plain.pool, NegativePool) and np.all(got.numpy() < graph.num_nodes)


def test_link_training_with_remote_negatives_learns(cora_parts, tmp_path):
    config = dataclasses.replace(CONFIG, rounds=3, local_epochs=10, threads=1, hidden=64)
    run_dir = tmp_path / "run"
    run_ranks(2, [str(cora_parts(2)), "--config", str(RunDir(run_dir).write_config(config)), "--run-dir",
                  str(run_dir), "-q"])
    rows = RunDir(run_dir).read_metrics()
    losses = [r["loss"] for r in rows]
    assert losses[-1] < CHANCE - 0.15 and losses[-1] < losses[0], losses
    assert rows[-1]["val"] > 0.15
    info = RunDir(run_dir).read_run_info()
    assert info["negative_pool_bytes_sent_mean"] > 0 and info["negative_pool_rows_mean"] > 0
