"""The fully-decentralized baseline on Cora: partitions, rank graphs, remote sampling and
fetching, exact layer-wise inference, and two gloo ranks trained through `asepr train`."""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import socket

import numpy as np
import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

import asepr.training.fds.trainer as fds_trainer
from asepr.training.centralized import load_input_graph
from asepr.training.rundir.checkpoint import RunDir
from asepr.training.group.comm import Comm
from asepr.training.config import TrainConfig
from asepr.training.graph.data import normalize_features
from asepr.training.loop.distributed import global_weights
from asepr.training.fds import (
    DistNeighborSampler,
    FeatureFetcher,
    LayerwiseInference,
    PartitionBook,
    cut_edges,
    load_fds_graph,
    metis_owner,
    run_fds,
)
from asepr.training.fds.partition import iter_input_edges
from asepr.training.models import GNN, build_model, graph_operator, unflatten_into
from asepr.training.tasks import NodeTask

CORA_NODES, CORA_DIM, CORA_CLASSES = 2708, 1433, 7
#: Two rounds of four epochs of 128 seeds per rank and step: 7 steps per epoch on Cora.
SMALL = TrainConfig(hidden=32, rounds=2, local_epochs=4, batch_size=128, fanouts=(10, 10), threads=1, seed=3)
SMALL_FLAGS = ["--hidden", "32", "--rounds", "2", "--local-epochs", "4", "--batch-size", "128", "--fanouts", "10,10",
               "--threads", "1", "--seed", "3"]
ASEPR_COLUMNS = {"round", "epoch", "generation", "seconds", "elapsed_s", "train_seconds", "eval_seconds",
                 "eval_elapsed_s", "loss", "kd_loss", "eval_mode", "metric", "val", "test", "best_val",
                 "test_at_best_val", "best_epoch", "bytes_sent_round", "bytes_sent_round_max",
                 "eval_bytes_sent_round", "eval_bytes_sent_round_max", "bytes_sent_cum", "bytes_sent_cum_max",
                 "messages_sent_round", "messages_sent_cum_max", "bytes_sent_total_max", "world_size", "peak_rss_mib"}


def _input_edges(path) -> tuple[np.ndarray, np.ndarray]:
    pairs = list(iter_input_edges(path))
    return np.concatenate([p[0] for p in pairs]), np.concatenate([p[1] for p in pairs])


def _metis_book(path, world: int) -> PartitionBook:
    owner, _ = metis_owner(path, world, num_nodes=CORA_NODES)
    return PartitionBook("metis", world, CORA_NODES, owner_array=owner)


@pytest.mark.parametrize("world", [2, 4])
def test_metis_is_a_vertex_partition_that_cuts_fewer_edges_than_hash(cora_input, world):
    book = _metis_book(cora_input, world)
    owner = book.owner(np.arange(CORA_NODES))
    assert owner.shape == (CORA_NODES,) and set(owner.tolist()) == set(range(world))  # each node owned once
    sizes = np.bincount(owner, minlength=world)
    assert sizes.max() <= 1.05 * CORA_NODES / world
    src, dst = _input_edges(cora_input)
    hashed = PartitionBook("hash", world, CORA_NODES, seed=0)
    assert set(hashed.owner(np.arange(CORA_NODES)).tolist()) == set(range(world))
    metis_cut, hash_cut = cut_edges(book, src, dst), cut_edges(hashed, src, dst)
    assert metis_cut < 0.5 * hash_cut, (metis_cut, hash_cut)


def test_rank_graphs_hold_their_own_rows_and_in_edges_and_cover_the_input(cora_input):
    full = load_input_graph(cora_input)
    book = _metis_book(cora_input, 2)
    graphs = [load_fds_graph(cora_input, book, r) for r in (0, 1)]
    owned = torch.cat([g.global_nid for g in graphs])
    assert torch.equal(torch.sort(owned).values, torch.arange(CORA_NODES))  # every node exactly once
    full_edges = {}
    for s, d in full.edge_index.t().tolist():
        full_edges[(s, d)] = full_edges.get((s, d), 0) + 1
    got = {}
    for r, g in enumerate(graphs):
        assert (book.owner(g.global_nid) == r).all()
        assert torch.equal(g.x, full.x[g.global_nid]) and torch.equal(g.y, full.y[g.global_nid])
        assert torch.equal(g.split, full.split[g.global_nid])
        dst = g.global_nid[torch.repeat_interleave(torch.arange(g.num_owned), g.in_ptr[1:] - g.in_ptr[:-1])]
        for s, d in zip(g.in_src.tolist(), dst.tolist()):
            got[(s, d)] = got.get((s, d), 0) + 1
    assert got == full_edges  # the in-edges of all ranks are the message-passing edges, each once


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _rank_checks(rank: int, world: int, port: int, input_dir: str) -> None:
    """One rank of the in-process checks of remote fetching, sampling and inference."""
    _init(rank, world, port)
    try:
        comm = Comm()
        full = load_input_graph(input_dir)
        book = _metis_book(input_dir, world)
        graph = load_fds_graph(input_dir, book, rank)
        gen = torch.Generator().manual_seed(rank)

        # Fetching: the rows of any vertices are the input's rows, the bytes exactly the remote rows.
        wanted = torch.randperm(CORA_NODES, generator=gen)[:300]
        fetcher = FeatureFetcher(graph, comm)
        rows = fetcher.fetch(wanted)
        assert torch.equal(rows, full.x[wanted])
        remote = int((book.owner(wanted) != rank).sum())
        assert fetcher.rows_fetched == remote > 0
        assert comm.bytes.received["features"] == remote * CORA_DIM * 4
        assert comm.bytes.sent["feature_requests"] == remote * 8

        # Sampling over the whole graph: real in-edges only, min(in-degree, fanout) per expanded vertex.
        seeds = graph.global_nid[graph.train_idx[:64]]
        n_id, sub = DistNeighborSampler(graph, comm).sample(seeds, (3, 2), gen)
        assert torch.equal(n_id[:64], seeds) and len(torch.unique(n_id)) == len(n_id)
        real = set(map(tuple, full.edge_index.t().tolist()))
        pairs = list(zip(n_id[sub[0]].tolist(), n_id[sub[1]].tolist()))
        assert all(p in real for p in pairs) and len(set(pairs)) == len(pairs)
        indeg = torch.bincount(full.edge_index[1], minlength=CORA_NODES)
        per_dst = torch.bincount(sub[1], minlength=len(n_id))
        hop1 = n_id[64:][torch.isin(n_id[64:], n_id[sub[0][sub[1] < 64]])]
        assert torch.equal(per_dst[:64], indeg[seeds].clamp(max=3))
        expanded = torch.isin(n_id, hop1)
        assert torch.equal(per_dst[expanded], indeg[n_id[expanded]].clamp(max=2))
        assert int(per_dst[64:][~expanded[64:]].sum()) == 0

        # Layer-wise inference equals the full-graph model on the owned rows, for every model.
        for kind in ("sage", "gcn", "gat"):
            torch.manual_seed(0)
            model = GNN(kind, CORA_DIM, 16, CORA_CLASSES, num_layers=2, dropout=0.5).eval()
            before = comm.bytes.sent.get("eval", 0)
            got = LayerwiseInference(graph, comm, kind).logits(model)
            every = comm.bytes.sent["eval"] - before
            with torch.no_grad():
                ref = model(full.x, graph_operator(kind, full.edge_index, CORA_NODES))[graph.global_nid]
            assert torch.allclose(got, ref, atol=1e-5, rtol=1e-4), (kind, float((got - ref).abs().max()))
            # A few targets: their receptive field only, the same rows, fewer bytes.
            targets = torch.rand(graph.num_owned, generator=gen) < 0.05
            before = comm.bytes.sent["eval"]
            got = LayerwiseInference(graph, comm, kind, targets=targets).logits(model)
            few = comm.bytes.sent["eval"] - before
            assert torch.allclose(got[targets], ref[targets], atol=1e-5, rtol=1e-4), kind
            assert few < every, kind
            # Three layers, targets on rank 0 only (rank 1 still serves its rows).
            torch.manual_seed(1)
            deep = GNN(kind, CORA_DIM, 8, CORA_CLASSES, num_layers=3).eval()
            targets = (torch.rand(graph.num_owned, generator=gen) < 0.1) & (rank == 0)
            got = LayerwiseInference(graph, comm, kind, targets=targets).logits(deep)
            with torch.no_grad():
                ref = deep(full.x, graph_operator(kind, full.edge_index, CORA_NODES))[graph.global_nid]
            assert torch.allclose(got[targets], ref[targets], atol=1e-5, rtol=1e-4), kind
        assert comm.bytes.sent.get("eval", 0) > 0
    finally:
        dist.destroy_process_group()


def _fork_ranks(fn, *args) -> None:
    """Run ``fn(rank, 2, port, *args)`` in two forked ranks (forked: no second import of torch,
    which costs more than the checks); a failed assertion is raised here with its traceback."""
    mp.start_processes(fn, args=(2, _free_port(), *args), nprocs=2, join=True, start_method="fork")


def _init(rank: int, world: int, port: int) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=world)


def test_two_ranks_fetch_sample_and_infer_exactly(cora_input):
    _fork_ranks(_rank_checks, str(cora_input))


def _resume_rank(rank: int, world: int, port: int, input_dir: str, run_dir: str) -> None:
    _init(rank, world, port)
    try:
        run_fds(input_dir, run_dir, SMALL, partition="metis", resume=True)
    finally:
        dist.destroy_process_group()


@pytest.fixture(scope="module")
def fds_run(cora_input, tmp_path_factory):
    """``asepr train INPUT --strategy fds --nproc 2`` (METIS), through the torchrun launcher."""
    from asepr.workflows.cli import main

    run_dir = tmp_path_factory.mktemp("fds") / "run"
    code = main(["train", str(cora_input), "--strategy", "fds", "--fds-partition", "metis", "--nproc", "2",
                 *SMALL_FLAGS, "--run-dir", str(run_dir), "-q"])
    assert code == 0
    assert TrainConfig.from_dict(json.loads((run_dir / "config.json").read_text())) == fds_trainer.fds_config(SMALL)
    return run_dir


def test_asepr_train_fds_two_ranks_learns_and_evaluates_like_the_centralized_model(cora_input, fds_run):
    runs = RunDir(fds_run)
    rows, info = runs.read_metrics(), runs.read_run_info()
    assert info["strategy"] == "fds" and info["partition"] == "metis" and info["world_size"] == 2
    assert [r["round"] for r in rows] == [1, 2] and ASEPR_COLUMNS <= set(rows[-1])
    assert [(r["epoch"], r["eval_mode"]) for r in rows] == [(4, "exact"), (8, "exact")]
    assert info["placement_bytes_max"] >= info["placement_bytes_mean"] == CORA_NODES / 2 * CORA_DIM * 4
    assert rows[-1]["val"] >= 0.70 and rows[-1]["test"] >= 0.70  # majority class is 0.30 on Cora
    # The reported metric is the centralized evaluation of the same weights (exact inference).
    model = build_model(SMALL, CORA_DIM, CORA_CLASSES)
    unflatten_into(model, global_weights(fds_run))
    full = load_input_graph(cora_input)
    full.x = normalize_features(full.x, SMALL.feature_norm)
    ref = NodeTask(full, CORA_CLASSES, SMALL).evaluate(model, Comm())
    assert abs(ref["val"] - rows[-1]["val"]) <= 1 / 539 and abs(ref["test"] - rows[-1]["test"]) <= 1 / 548


def test_fds_run_directory_matches_the_documented_layout(fds_run):
    """The tree of asepr.training.fds.trainer's docstring: the METIS book beside RunDir's files."""
    assert (fds_run / "fds-partition.npy").is_file() and (fds_run / "run.json").is_file()
    assert (fds_run / "metrics.csv").is_file() and (fds_run / "checkpoints" / "latest.json").is_file()
    for round_dir in ("round-00000", "round-00001"):
        names = sorted(p.name for p in (fds_run / "checkpoints" / round_dir).iterdir())
        assert names == ["global.pt", "rank-00000.pt", "rank-00001.pt"]
    assert "fds-partition.npy" in fds_trainer.__doc__
    owner = np.load(fds_run / "fds-partition.npy", allow_pickle=False)
    assert owner.dtype == np.int32 and owner.shape == (CORA_NODES,)


def test_fds_bytes_are_counted_exactly(fds_run):
    runs = RunDir(fds_run)
    info, rows = runs.read_run_info(), runs.read_metrics()
    world, params = 2, info["num_parameters"]
    steps = SMALL.rounds * SMALL.local_epochs * info["steps_per_epoch"]
    assert info["steps_per_epoch"] == 7 and sum(r["steps"] for r in rows) == steps
    states = [runs.load_rank(SMALL.rounds - 1, r) for r in range(world)]
    fetched = [s["rows_fetched"] for s in states]
    assert all(f > 0 for f in fetched) and sum(fetched) == sum(s["rows_served"] for s in states)
    for s in states:
        sent, received = s["bytes"]["sent"], s["bytes"]["received"]
        # Feature rows fetched from the owners: exactly rows × d float32.
        assert received["features"] == s["rows_fetched"] * CORA_DIM * 4
        assert sent["features"] == s["rows_served"] * CORA_DIM * 4
        # One ring all_reduce of [gradients, loss, seeds] per step; the model synced once.
        assert sent["gradients"] == steps * 2 * (world - 1) / world * 4 * (params + 2)
        assert sent["model"] == 2 * (world - 1) / world * 4 * params
        assert sent["sampling"] > 0 and sent["eval"] > 0
    assert sum(s["bytes"]["sent"]["features"] for s in states) == sum(fetched) * CORA_DIM * 4
    last = rows[-1]
    assert last["cluster_bytes_round_gradients"] == world * SMALL.local_epochs * 7 * 4 * (params + 2)
    assert rows[0]["cluster_bytes_round_model"] == world * 4 * params and last["cluster_bytes_round_model"] == 0
    assert last["cluster_bytes_round"] == pytest.approx(sum(last[f"cluster_bytes_round_{c}"] for c in
                                                            ("features", "feature_requests", "sampling", "gradients",
                                                             "model", "eval", "control")))
    # Bytes per rank: the mean and the largest rank over all ranks, evaluation traffic apart.
    for row in rows:
        training_bytes = row["cluster_bytes_round"] - row["cluster_bytes_round_eval"]
        assert row["bytes_sent_round"] == pytest.approx(training_bytes / world)
        assert row["eval_bytes_sent_round"] == pytest.approx(row["cluster_bytes_round_eval"] / world)
        assert row["eval_bytes_sent_round"] > 0
        assert row["bytes_sent_round"] <= row["bytes_sent_round_max"] <= training_bytes
        assert row["eval_bytes_sent_round"] <= row["eval_bytes_sent_round_max"]


def test_fds_resume_reproduces_the_uninterrupted_run(cora_input, fds_run, tmp_path):
    """A copy of the run as a crash in round 2 leaves it (round 1 the latest complete one) resumes
    to the same weights and metrics."""
    shutil.copytree(fds_run, tmp_path / "b")
    (tmp_path / "b" / "checkpoints" / "latest.json").write_text(json.dumps({"round": 0, "path": "round-00000"}))
    assert RunDir(tmp_path / "b").latest_round() == 0
    _fork_ranks(_resume_rank, str(cora_input), str(tmp_path / "b"))
    assert RunDir(tmp_path / "b").latest_round() == 1
    assert torch.equal(global_weights(tmp_path / "b"), global_weights(fds_run))
    assert [r["val"] for r in RunDir(tmp_path / "b").read_metrics()] == [r["val"] for r in
                                                                         RunDir(fds_run).read_metrics()]


def _schedule_rank(rank: int, world: int, port: int, input_dir: str, run_dir: str, config: TrainConfig) -> None:
    _init(rank, world, port)
    try:
        run_fds(input_dir, run_dir, config, partition="hash")
    finally:
        dist.destroy_process_group()


def test_fds_is_evaluated_every_n_epochs_inside_its_rounds(cora_input, tmp_path):
    config = dataclasses.replace(SMALL, rounds=1, local_epochs=3, eval_every=2)
    _fork_ranks(_schedule_rank, str(cora_input), str(tmp_path / "run"), config)
    runs = RunDir(tmp_path / "run")
    rows, info = runs.read_metrics(), runs.read_run_info()
    assert [(r["round"], r["epoch"]) for r in rows] == [(1, 2), (1, 3)]
    assert [r["steps"] for r in rows] == [2 * info["steps_per_epoch"], info["steps_per_epoch"]]
    assert rows[1]["bytes_sent_round"] > rows[0]["bytes_sent_round"]  # both since the round started
    assert rows[1]["bytes_sent_cum"] >= rows[1]["bytes_sent_round"]  # and the setup's control bytes
    assert rows[1]["eval_elapsed_s"] == pytest.approx(rows[0]["eval_seconds"] + rows[1]["eval_seconds"], abs=1e-3)


def test_fds_refuses_link_prediction_and_a_missing_nproc(cora_input, tmp_path, capsys):
    from asepr.workflows.cli import main

    assert main(["train", str(cora_input), "--strategy", "fds", "--task", "link", "--nproc", "2",
                 "--run-dir", str(tmp_path / "run")]) == 2
    assert "--task node" in capsys.readouterr().err
    assert main(["train", str(cora_input), "--strategy", "fds", "--run-dir", str(tmp_path / "run")]) != 0
    assert "--nproc K" in capsys.readouterr().err


def _multigraph_rank(rank: int, world: int, port: int, input_dir: str) -> None:
    _init(rank, world, port)
    try:
        comm = Comm()
        full = load_input_graph(input_dir)
        graph = load_fds_graph(input_dir, PartitionBook("hash", world, full.num_nodes, seed=3), rank)
        targets = torch.rand(graph.num_owned, generator=torch.Generator().manual_seed(rank)) < 0.3
        for layers in (2, 3):
            torch.manual_seed(layers)
            model = GNN("sage", full.x.shape[1], 8, 3, num_layers=layers).eval()
            got = LayerwiseInference(graph, comm, "sage", targets=targets).logits(model)
            with torch.no_grad():  # PyG's own layer over every stored edge, repeated ones included
                ref = model(full.x, full.edge_index)[graph.global_nid]
            assert torch.allclose(got[targets], ref[targets], atol=1e-5, rtol=1e-4), layers
    finally:
        dist.destroy_process_group()


def test_layerwise_sage_is_exact_on_a_multigraph_with_self_loops(tmp_path):
    """Repeated edges count as often as they are stored in SAGE's mean, as in PyG's edge-wise
    mean; stored self-loops are neighbours too."""
    from tests.storage.helpers import write_input

    arrays = write_input(tmp_path / "in", num_nodes=40, num_edges=400, dim=5, meta={"undirected": False})
    keys = arrays["src"] * 40 + arrays["dst"]
    assert len(np.unique(keys)) < len(keys) and (arrays["src"] == arrays["dst"]).any()
    _fork_ranks(_multigraph_rank, str(tmp_path / "in"))


def test_fds_without_pymetis_names_the_extra_and_the_hash_partition(cora_input, tmp_path, monkeypatch):
    """METIS is an extra: without it every rank stops before any collective with the fix."""
    import sys

    from asepr.training.rundir.checkpoint import TrainerError

    monkeypatch.setitem(sys.modules, "pymetis", None)  # as if not installed
    _init(0, 1, _free_port())
    try:
        with pytest.raises(TrainerError, match=r"no pymetis in this environment\. Fix: pip install "
                                               r"'asepr\[metis\]', or pass --fds-partition hash"):
            run_fds(str(cora_input), tmp_path / "run", SMALL, partition="auto")
        assert not (tmp_path / "run" / "metrics.csv").exists()
    finally:
        dist.destroy_process_group()
