"""Exact inference over a vertex-cut partition equals the whole-graph model: Cora in 4
ASEP partitions on 4 gloo ranks (and on 2, two partitions each), and a small graph with
self-loops, repeated edges, isolated vertices, masters without edges and a vertex on
every rank."""

from __future__ import annotations

import os
import socket

import numpy as np
import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from asepr.storage.errors import StoreError
from asepr.training.centralized import load_input_graph
from asepr.training.group.comm import Comm
from asepr.training.config import TrainConfig
from asepr.training.graph.data import build_local_graph, load_local_graph, rank_partitions
from asepr.training.evaluation.inference import BUDGET_BYTES, ExactInference, evaluate_exact, exact_forward
from asepr.training.models import GNN, graph_operator
from asepr.training.tasks import LinkTask, NodeTask

CORA_NODES, CORA_DIM, CORA_CLASSES = 2708, 1433, 7
KINDS = ("sage", "gcn", "gat")
HIDDEN, LAYERS = 16, 3
LINK = TrainConfig(model="sage", task="link")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _init(rank: int, world: int, port: int) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=world)


def _fork_ranks(world: int, fn, *args) -> None:
    """Run ``fn(rank, world, port, *args)`` in ``world`` forked ranks (the models and the
    references built here are inherited, not pickled); a failed assertion is raised here."""
    mp.start_processes(fn, args=(world, _free_port(), *args), nprocs=world, join=True, start_method="fork")


def _models(in_dim: int, hidden: int, out_dim: int, layers: int) -> dict[str, GNN]:
    models = {}
    for kind in KINDS:
        torch.manual_seed(0)
        models[kind] = GNN(kind, in_dim, hidden, out_dim, num_layers=layers).eval()
    return models


@torch.no_grad()
def _references(models: dict[str, GNN], full) -> dict[str, torch.Tensor]:
    """The outputs ``--centralized`` computes: the model on the whole input graph."""
    return {kind: m(full.x, graph_operator(kind, full.edge_index, full.num_nodes)) for kind, m in models.items()}


def _layer_bytes(kind: str, dims: list[int], r_out: int, r_in: int) -> float:
    """The docstring's bytes sent per forward with every row a target: partials up, the
    next layer's rows (the output after the last) back."""
    total = 0
    layers = list(zip(dims, dims[1:]))
    for i, (d_in, d_out) in enumerate(layers):
        heads = 1 if i == len(layers) - 1 else 4
        p = d_out + 2 * heads if kind == "gat" else min(d_in, d_out)
        back = min(layers[i + 1]) if i + 1 < len(layers) else d_out
        total += 4 * (r_out * p + r_in * back)
    return total


def _check_exact(graph, comm, models, refs, dims, budget_bytes: int = BUDGET_BYTES) -> ExactInference:
    infer = ExactInference(graph, comm, budget_bytes=budget_bytes)
    infer.prepare(len(dims) - 1)  # the receptive field, once per depth
    for kind, model in models.items():
        sent = comm.bytes.sent.get("eval", 0.0)
        got = infer.forward(model)
        ref = refs[kind][graph.global_nid]
        err = float((got - ref).abs().max())
        assert err <= 1e-5, (kind, err)
        expected = _layer_bytes(kind, dims, infer.num_replica_rows, infer.num_served_rows)
        assert comm.bytes.sent["eval"] - sent == expected, kind
    # Bytes ∝ replication: the rows each rank sends and serves sum to Σ_v (r_v - 1).
    counts = torch.tensor([infer.num_replica_rows, infer.num_served_rows, graph.num_nodes, int(graph.is_master.sum())])
    dist.all_reduce(counts)
    r_out, r_in, rows, masters = counts.tolist()
    assert r_out == r_in == rows - masters
    return infer


def _check_setup_bytes(graph, comm) -> None:
    """The one-time setup sends what the docstring says: 8 bytes per row to its directory
    rank, 8 per (replica, master) pair from the directory to each side, and 8 per pair each
    way for the degrees (bytes to oneself are not sent)."""
    rank, w = comm.rank, comm.world_size
    everyone = [None] * w
    dist.all_gather_object(everyone, (graph.global_nid.tolist(), graph.is_master.tolist()))
    master_of = {g: r for r, (gids, ms) in enumerate(everyone) for g, m in zip(gids, ms) if m}
    pairs = [(g, r, master_of[g]) for r, (gids, ms) in enumerate(everyone) for g, m in zip(gids, ms) if not m]
    expected = 8 * sum(g % w != rank for g in graph.global_nid.tolist())
    expected += 8 * sum((a != rank) + (b != rank) for g, a, b in pairs if g % w == rank)
    expected += 8 * sum((a == rank) + (b == rank) for g, a, b in pairs)
    before = comm.bytes.sent.get("eval", 0.0)
    ExactInference(graph, comm)
    assert comm.bytes.sent["eval"] - before == expected


def _check_targets(graph, comm, models, refs, everything: ExactInference) -> None:
    """The validation and test masters alone, in blocks of a few rows and edges: the same
    rows, for fewer bytes than every row."""
    targets = graph.val_mask | graph.test_mask
    small = ExactInference(graph, comm, targets=targets, budget_bytes=1 << 20)
    for kind, model in models.items():
        everything.prepare(LAYERS)
        small.prepare(LAYERS)
        before = comm.bytes.sent.get("eval", 0.0)
        got = small.forward(model)
        mine = comm.bytes.sent["eval"] - before
        assert float((got[targets] - refs[kind][graph.global_nid[targets]]).abs().max()) <= 1e-5, kind
        before = comm.bytes.sent["eval"]
        everything.forward(model)
        every = torch.tensor([mine, comm.bytes.sent["eval"] - before], dtype=torch.float64)
        dist.all_reduce(every)
        assert every[0] < every[1], kind


def _cora_rank(rank: int, world: int, port: int, out: str, num_parts: int, models, refs, central) -> None:
    _init(rank, world, port)
    try:
        comm = Comm()
        graph = load_local_graph(out, rank_partitions(num_parts, rank, world))
        masters = torch.tensor([int(graph.is_master.sum())])
        dist.all_reduce(masters)
        assert int(masters) == CORA_NODES  # every vertex, isolated or not, has one master
        infer = _check_exact(graph, comm, models, refs, [CORA_DIM, HIDDEN, HIDDEN, CORA_CLASSES])
        _check_setup_bytes(graph, comm)
        _check_targets(graph, comm, models, refs, infer)
        for kind, model in models.items():
            metrics = evaluate_exact(NodeTask(graph, CORA_CLASSES, TrainConfig(model=kind)), model, infer)
            assert abs(metrics["val"] - central[kind]["val"]) <= 1 / 500, kind  # at most one near-tie flips
            assert abs(metrics["test"] - central[kind]["test"]) <= 1 / 1000, kind
        # A link task passes messages over its training edges only, here as on the whole graph,
        # and needs the embeddings of its held-out edges' ends and its ranking candidates.
        task = LinkTask(graph, LINK)
        link = ExactInference.for_task(task, comm)
        ends = torch.cat([task.val_pos.reshape(-1), task.test_pos.reshape(-1), task.eval_negatives(comm).rows])
        assert bool(link.targets[ends].all())
        got = link.forward(models["sage"])[link.targets]
        assert float((got - refs["link"][graph.global_nid[link.targets]]).abs().max()) <= 1e-5
    finally:
        dist.destroy_process_group()


@pytest.fixture(scope="module")
def cora_case(cora_input):
    full = load_input_graph(cora_input)
    models = _models(CORA_DIM, HIDDEN, CORA_CLASSES, LAYERS)
    central = {kind: NodeTask(full, CORA_CLASSES, TrainConfig(model=kind)).evaluate(m, Comm())
               for kind, m in models.items()}
    refs = _references(models, full)
    with torch.no_grad():
        refs["link"] = models["sage"](full.x, LinkTask(full, LINK).mp)
    assert LinkTask(full, LINK).edge_index.shape[1] < full.edge_index.shape[1]
    return models, refs, central


@pytest.mark.parametrize("world", [4, 2], ids=["one-partition-per-rank", "two-partitions-per-rank"])
def test_exact_inference_on_cora_partitions_equals_the_whole_graph_model(cora_parts, cora_case, world):
    _fork_ranks(world, _cora_rank, str(cora_parts(4)), 4, *cora_case)


# -- a small graph with every hard case ---------------------------------------------------
SMALL_N, SMALL_DIM, SMALL_CLASSES, SMALL_WORLD = 40, 6, 3, 3


def _small_graph(undirected: bool):
    """Edges with self-loops (one repeated), a repeated edge, a hub on every rank, isolated
    vertices 30..34; each edge on a random rank; masters random, some on a rank without
    the vertex's edges. Returns the full graph and each rank's local graph."""
    rng = np.random.default_rng(7)
    src = rng.integers(0, 30, 70)
    dst = rng.integers(0, 30, 70)
    src = np.concatenate([src, [3, 5, 5, 1, 1], np.zeros(12, np.int64)])
    dst = np.concatenate([dst, [3, 5, 5, 2, 2], rng.integers(1, 30, 12)])
    edge_rank = rng.integers(0, SMALL_WORLD, len(src))
    edge_rank[-12:] = np.arange(12) % SMALL_WORLD  # the hub 0 on every rank
    x = rng.standard_normal((SMALL_N, SMALL_DIM)).astype(np.float32)
    y = rng.integers(0, SMALL_CLASSES, SMALL_N)
    split = np.zeros(SMALL_N, np.int8)
    holders = [set() for _ in range(SMALL_N)]
    for s, d, r in zip(src, dst, edge_rank):
        holders[s].add(int(r))
        holders[d].add(int(r))
    master = np.array([rng.choice(sorted(h)) if h and v % 5 else rng.integers(SMALL_WORLD)
                       for v, h in enumerate(holders)])
    assert any(master[v] not in holders[v] for v in range(30))  # a master without edges
    full = build_local_graph(np.arange(SMALL_N), x, y, split, np.ones(SMALL_N, bool), src, dst, None,
                             undirected=undirected)
    locals_ = []
    for r in range(SMALL_WORLD):
        gid = np.array(sorted({v for v in range(SMALL_N) if r in holders[v] or master[v] == r}), np.int64)
        mine = edge_rank == r
        locals_.append(build_local_graph(gid, x[gid], y[gid], split[gid], master[gid] == r,
                                         np.searchsorted(gid, src[mine]), np.searchsorted(gid, dst[mine]), None,
                                         undirected=undirected, part_ids=(r,)))
    return full, locals_


def _small_rank(rank: int, world: int, port: int, cases) -> None:
    _init(rank, world, port)
    try:
        for locals_, models, refs in cases:
            _check_exact(locals_[rank], Comm(), models, refs, [SMALL_DIM, 8, SMALL_CLASSES])
            # In blocks of one row (and its edges) and ranges of a row or two: the same outputs.
            _check_exact(locals_[rank], Comm(), models, refs, [SMALL_DIM, 8, SMALL_CLASSES], budget_bytes=64)
        # Two ranks claiming the master of vertex 0: every rank refuses (none hangs).
        graph = cases[0][0][rank]
        graph.is_master = graph.is_master | (graph.global_nid == 0)
        with pytest.raises(StoreError, match="exactly one master"):
            ExactInference(graph, Comm())
    finally:
        dist.destroy_process_group()


def test_exact_inference_handles_self_loops_repeats_isolated_vertices_and_hubs():
    cases = []
    for undirected in (True, False):
        full, locals_ = _small_graph(undirected)
        models = _models(SMALL_DIM, 8, SMALL_CLASSES, 2)
        refs = _references(models, full)
        # One process over the whole graph: the same outputs, nothing sent.
        for kind, model in models.items():
            assert torch.allclose(exact_forward(model, full, Comm()), refs[kind], atol=1e-5), kind
        cases.append((locals_, models, refs))
    _fork_ranks(SMALL_WORLD, _small_rank, cases)
