"""Link prediction's evaluation ranks each held-out edge against vertices of the whole
graph, whatever the partition: on 2 gloo ranks of Cora the exact evaluation of a model
equals MRR/Hits computed by hand from the whole-graph model with the ranks' negatives,
and those negatives are drawn among every vertex, not only the rank's own (on an
attribute-driven partition those are all alike, and made ASEPR's held-out edges harder
to rank than the centralized run's)."""

from __future__ import annotations

import os

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from tests.training.conftest import free_port
from asepr.training.centralized import load_input_graph
from asepr.training.group.comm import Comm
from asepr.training.config import TrainConfig
from asepr.training.graph.data import load_local_graph
from asepr.training.evaluation.inference import ExactInference, evaluate_exact
from asepr.training.models import GNN
from asepr.training.tasks import HITS_K, LinkTask

LINK = TrainConfig(model="sage", task="link", hidden=16, seed=2)


def _model(in_dim: int) -> GNN:
    torch.manual_seed(0)
    return GNN("sage", in_dim, 16, 16, num_layers=2).eval()


def _rank(rank: int, world: int, port: int, out: str, result_dir: str) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    try:
        graph = load_local_graph(out, [rank])
        comm = Comm()
        task = LinkTask(graph, LINK)
        metrics = evaluate_exact(task, _model(graph.x.shape[1]), ExactInference.for_task(task, comm))
        ev = task.eval_negatives(comm)
        gid = graph.global_nid
        torch.save({"metrics": metrics, "size": ev.size, "gid": gid,
                    "pos": {s: gid[p] for s, p in (("val", task.val_pos), ("test", task.test_pos))},
                    "neg": ev.negatives}, os.path.join(result_dir, f"rank{rank}.pt"))
    finally:
        dist.destroy_process_group()


@pytest.fixture(scope="module")
def ranks(cora_parts, tmp_path_factory):
    result_dir = tmp_path_factory.mktemp("link-eval")
    mp.start_processes(_rank, args=(2, free_port(), str(cora_parts(2)), str(result_dir)), nprocs=2, join=True,
                       start_method="fork")
    return [torch.load(result_dir / f"rank{r}.pt") for r in range(2)]


def test_exact_link_metrics_rank_against_the_whole_graph(ranks, cora_input):
    full = load_input_graph(cora_input)
    with torch.no_grad():
        z = _model(full.x.shape[1])(full.x, LinkTask(full, LINK).mp)
    n = full.num_nodes
    for split in ("val", "test"):
        recip, hits, count = 0.0, 0, 0
        for res in ranks:
            assert res["size"] == n  # every vertex is a candidate (Cora is below EVAL_POOL)
            u, v = res["pos"][split]
            neg = res["neg"][split]  # candidate positions are global ids here
            p = (z[u] * z[v]).sum(-1, keepdim=True)
            q = (z[u].unsqueeze(1) * z[neg]).sum(-1)
            rank = 0.5 * ((q > p).sum(1) + (q >= p).sum(1)).double() + 1
            recip, hits, count = recip + float((1 / rank).sum()), hits + int((rank <= HITS_K).sum()), count + len(rank)
        for res in ranks:
            assert abs(res["metrics"][split] - recip / count) < 2e-3  # a near-tie may flip (exact to 1e-5)
            assert abs(res["metrics"][f"{split}_hits@{HITS_K}"] - hits / count) < 2e-3


def test_link_eval_negatives_are_drawn_among_every_vertex(ranks, cora_input):
    n = load_input_graph(cora_input).num_nodes
    for res in ranks:
        neg = torch.cat([res["neg"]["val"].reshape(-1), res["neg"]["test"].reshape(-1)])
        local = torch.isin(neg, res["gid"])
        share_local = len(res["gid"]) / n
        # Uniform over the whole graph: the rank's own vertices get about their share, no more.
        assert abs(float(local.float().mean()) - share_local) < 0.03
        assert int(neg.max()) < n and int(neg.min()) >= 0


def test_centralized_candidates_are_its_rows(cora_input):
    full = load_input_graph(cora_input)
    ev = LinkTask(full, LINK).eval_negatives(Comm())
    assert ev.size == full.num_nodes
    assert torch.equal(ev.rows, torch.arange(full.num_nodes)) and torch.equal(ev.positions, ev.rows)
