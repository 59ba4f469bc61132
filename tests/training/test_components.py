"""Models, the sampler, the losses and the metrics, each against a hand-checked reference."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from hypothesis import example, given, settings
from hypothesis import strategies as st

from asepr.training.group.comm import Comm
from asepr.training.config import TrainConfig, parse_reconcile
from asepr.training.graph.data import build_local_graph
from asepr.training.models import GNN, flatten, graph_operator, num_parameters, unflatten_into
from asepr.training.reconcile import contrastive_loss, weighted_average
from asepr.training.graph.sampler import NeighborSampler
from asepr.training.tasks import AUC_BINS, LinkTask, NodeTask, _histogram, auc_from_histograms


def _ring_graph(n=40, d=6, classes=3, seed=0):
    rng = np.random.default_rng(seed)
    src = np.arange(n)
    dst = (src + 1) % n
    extra_src = rng.integers(0, n, 60)
    extra_dst = (extra_src + rng.integers(2, n - 1, 60)) % n
    src = np.concatenate([src, extra_src])
    dst = np.concatenate([dst, extra_dst])
    y = rng.integers(0, classes, n)
    split = rng.choice(np.array([0, 1, 2], dtype=np.int8), n)
    x = rng.normal(size=(n, d)).astype(np.float32)
    return build_local_graph(np.arange(n), x, y, split, np.ones(n, bool), src, dst, None, undirected=True)


@pytest.mark.parametrize("kind", ["sage", "gcn", "gat"])
@pytest.mark.parametrize("layers", [1, 3])
def test_models_return_every_layer(kind, layers):
    g = _ring_graph()
    model = GNN(kind, 6, 16, 5, num_layers=layers, dropout=0.0, heads=4)
    out, embs = model(g.x, g.edge_index, return_embeddings=True)
    assert out.shape == (g.num_nodes, 5) and len(embs) == layers
    assert [e.shape[1] for e in embs] == [16] * (layers - 1) + [5]
    assert torch.equal(embs[-1], out) and torch.equal(model(g.x, g.edge_index), out)
    flat = flatten(model)
    assert flat.numel() == num_parameters(model)
    other = GNN(kind, 6, 16, 5, num_layers=layers, dropout=0.0, heads=4)
    unflatten_into(other, flat)
    assert torch.equal(other(g.x, g.edge_index), out)


def test_config_validation_names_the_field():
    assert parse_reconcile("con+avg") == ("avg", "con")
    with pytest.raises(ValueError, match='Valid parts are "avg", "kd", "con"'):
        TrainConfig(reconcile="avg+foo")
    with pytest.raises(ValueError, match='has no "avg"'):
        TrainConfig(reconcile="kd")
    with pytest.raises(ValueError, match="TrainConfig.lr"):
        TrainConfig(lr=0)
    with pytest.raises(ValueError, match="one fanout per layer"):
        TrainConfig(batch_size=8, fanouts=(5,))
    assert TrainConfig(rounds=3).resume_conflicts(TrainConfig(rounds=9).to_dict()) == []
    assert TrainConfig(lr=0.1).resume_conflicts(TrainConfig().to_dict()) == ["lr"]
    # task-dependent defaults
    assert (TrainConfig().lr, TrainConfig().dropout) == (0.01, 0.5)
    assert (TrainConfig(task="link").lr, TrainConfig(task="link").dropout) == (0.001, 0.0)
    assert (TrainConfig().sync_every, TrainConfig(task="link").sync_every) == (10, 0)
    assert (TrainConfig(server_opt="fedadam").server_lr, TrainConfig(server_opt="fedavgm").server_lr) == (0.01, 1.0)
    with pytest.raises(ValueError, match='Unsupported server_opt "sgd"'):
        TrainConfig(server_opt="sgd")
    with pytest.raises(ValueError, match="TrainConfig.server_momentum"):
        TrainConfig(server_momentum=1.0)
    assert (TrainConfig(task="link").lr, TrainConfig(task="link").dropout) == (0.001, 0.0)


@settings(deadline=None, max_examples=30)
@given(st.integers(5, 60), st.integers(0, 200), st.lists(st.integers(1, 4), min_size=1, max_size=3),
       st.integers(0, 2**31))
def test_sampler_respects_fanouts_and_only_samples_real_edges(n, m, fanouts, seed):
    rng = np.random.default_rng(seed)
    ei = torch.from_numpy(rng.integers(0, n, (2, m)))
    sampler = NeighborSampler(ei, n)
    seeds = torch.from_numpy(rng.choice(n, min(n, 4), replace=False))
    n_id, sub = sampler.sample(seeds, tuple(fanouts), torch.Generator().manual_seed(seed))
    assert torch.equal(n_id[: len(seeds)], seeds)
    assert len(torch.unique(n_id)) == len(n_id)
    real = {}
    for s, d in zip(ei[0].tolist(), ei[1].tolist()):
        real[(s, d)] = real.get((s, d), 0) + 1
    got = {}
    for s, d in zip(n_id[sub[0]].tolist(), n_id[sub[1]].tolist()):
        got[(s, d)] = got.get((s, d), 0) + 1
    # Every sampled edge is a real edge, never more often than it exists per hop.
    assert all(pair in real for pair in got)
    # Each node is expanded once, keeping at most its hop's fanout of in-edges.
    per_dst = torch.bincount(sub[1], minlength=len(n_id))
    assert not len(per_dst) or int(per_dst.max()) <= max(fanouts)
    # Seeds with few in-edges keep all of them (fanout >= in-degree).
    indeg = torch.bincount(ei[1], minlength=n)
    for i, s in enumerate(seeds.tolist()):
        if indeg[s] <= fanouts[0]:
            assert int((sub[1] == i).sum()) >= int(indeg[s])


def test_contrastive_loss_matches_the_formula():
    z = torch.tensor([[1.0, 0.0], [0.0, 2.0]])
    zg = z.clone()
    zp = torch.tensor([[0.0, 1.0], [1.0, 0.0]])  # orthogonal to z
    tau = 0.5
    # cos(z, zg) = 1, cos(z, zp) = 0 → −log(e^{2} / (e^{2} + e^{0}))
    expected = -math.log(math.exp(1 / tau) / (math.exp(1 / tau) + 1))
    got = contrastive_loss([z], [zg], [zp], torch.arange(2), tau)
    assert got.item() == pytest.approx(expected, rel=1e-6)
    # Two layers average; anchors select rows.
    got2 = contrastive_loss([z, zp], [zg, zp], [zp, z], torch.tensor([0]), tau)
    assert got2.item() == pytest.approx(expected, rel=1e-6)


def test_weighted_average_single_rank_is_identity():
    comm = Comm()
    v = torch.arange(6, dtype=torch.float32)
    assert torch.equal(weighted_average(v, 3.0, comm), v)
    assert torch.equal(weighted_average(v, 0.0, comm), v)
    assert comm.bytes.total_sent == 0


@settings(deadline=None, max_examples=50)
@given(st.lists(st.floats(-50, 50), min_size=1, max_size=40), st.lists(st.floats(-50, 50), min_size=1, max_size=40))
@example(pos=[-44.9375], neg=[-44.96875])  # 0.03 apart, one bin: a tie (CI found it)
def test_histogram_auc_equals_the_pairwise_definition(pos, neg):
    p = torch.tensor(pos, dtype=torch.float64)
    q = torch.tensor(neg, dtype=torch.float64)
    exact = float(((p[:, None] > q[None, :]).double() + 0.5 * (p[:, None] == q[None, :]).double()).mean())
    approx = auc_from_histograms(_histogram(p), _histogram(q))
    # Exact but for pairs that share a bin (counted as ties). The bins are uniform in
    # atan(x / 4), so they are ~0.1 wide at |x| = 45: -44.94 and -44.97 share one.
    def index(x):
        return ((0.5 + torch.atan(x / 4) / torch.pi) * (AUC_BINS - 1)).round()

    shared = float((index(p)[:, None] == index(q)[None, :]).double().mean())
    assert abs(approx - exact) <= 0.5 * shared + 1e-12


def test_node_task_metrics_count_masters_only():
    g = _ring_graph()
    g.is_master[::2] = False
    task = NodeTask(g, 3, TrainConfig())
    torch.manual_seed(0)
    model = GNN("sage", 6, 8, 3, dropout=0.0)
    res = task.evaluate(model, Comm())
    # The same graph operator as the task (a sparse sum can differ from the edge-wise one
    # in the last bit, enough to flip a near-tie between two classes).
    out = model(g.x, task.mp).argmax(-1)
    m = g.is_master & (g.split == 1)
    assert res["val"] == pytest.approx(float((out[m] == g.y[m]).double().mean()))


def test_link_task_holds_out_the_same_edges_everywhere_and_hides_them():
    g = _ring_graph(n=200)
    config = TrainConfig(task="link", link_val_fraction=0.1, link_test_fraction=0.2)
    task = LinkTask(g, config)
    total = g.own_edges.shape[1]
    assert task.train_pos.shape[1] + task.val_pos.shape[1] + task.test_pos.shape[1] == total
    held = {tuple(sorted(e)) for e in torch.cat([task.val_pos, task.test_pos], 1).t().tolist()}
    seen = {tuple(sorted(e)) for e in task.edge_index.t().tolist()}
    assert not held & seen  # held-out edges never carry messages, in either direction
    # The split is a function of the global pair: a relabelled copy holds out the same pairs.
    perm = torch.randperm(g.num_nodes, generator=torch.Generator().manual_seed(1))
    inv = torch.argsort(perm)  # local row of each global id in the copy
    g2 = build_local_graph(perm.numpy(), g.x[perm].numpy(), g.y[perm].numpy(), g.split[perm].numpy(),
                           np.ones(g.num_nodes, bool), inv[g.own_edges[0]].numpy(), inv[g.own_edges[1]].numpy(),
                           None, undirected=True)
    t2 = LinkTask(g2, config)
    for a, b in ((task.val_pos, t2.val_pos), (task.test_pos, t2.test_pos)):
        assert {tuple(sorted(e)) for e in a.t().tolist()} == {tuple(sorted(e)) for e in perm[b].t().tolist()}
    model = GNN("sage", 6, config.hidden, config.hidden, dropout=0.0)
    res = task.evaluate(model, Comm())
    assert 0 < res["val"] <= 1 and 0 <= res["val_hits@50"] <= 1 and 0 <= res["test_auc"] <= 1


@pytest.mark.parametrize("kind", ["sage", "gcn", "gat"])
def test_graph_operator_gives_the_edge_wise_outputs(kind):
    """The sparse path equals PyG's edge-wise one, also with repeated edges and self-loops."""
    torch.manual_seed(0)
    n = 30
    x = torch.randn(n, 5)
    model = GNN(kind, 5, 8, 3, dropout=0.0)
    raw = torch.randint(0, n, (2, 200))
    simple = torch.unique(raw[:, raw[0] != raw[1]], dim=1)
    for ei in (raw, simple):
        assert torch.allclose(model(x, ei), model(x, graph_operator(kind, ei, n)), atol=1e-5)


def test_contrastive_training_on_the_full_graph_reuses_frozen_outputs_exactly():
    """The frozen models' full-graph outputs are computed once per call; the weights
    must equal those of recomputing them every step (the per-batch path, taken here by
    naming every row as the batch)."""
    from asepr.training.loop.local import train_local
    from asepr.training.tasks import Batch

    g = _ring_graph()
    config = TrainConfig(reconcile="avg+con", local_epochs=4, hidden=8, dropout=0.0, batch_size=0)
    task = NodeTask(g, 3, config)
    torch.manual_seed(0)
    global_model = GNN("sage", 6, 8, 3, dropout=0.0)
    previous = GNN("sage", 6, 8, 3, dropout=0.0)
    full = list(task.batches(torch.Generator()))
    assert len(full) == 1 and full[0].n_id is None
    calls = {"n": 0}
    forward = global_model.forward

    def counting(*args, **kwargs):
        calls["n"] += 1
        return forward(*args, **kwargs)

    results = []
    for as_rows in (False, True):
        torch.manual_seed(1)
        model = GNN("sage", 6, 8, 3, dropout=0.0)
        opt = torch.optim.Adam(model.parameters(), lr=0.05)
        batch = full[0] if not as_rows else Batch(torch.arange(g.num_nodes), full[0].graph, full[0].loss,
                                                  full[0].anchors)
        task.batches = lambda generator, batch=batch: iter([batch])
        calls["n"] = 0
        global_model.forward = counting
        train_local(model, opt, task, config, torch.Generator(), global_model=global_model,
                    previous_model=previous)
        results.append((flatten(model), calls["n"]))
    (cached, cached_calls), (recomputed, recomputed_calls) = results
    assert cached_calls == 1 and recomputed_calls == config.local_epochs
    assert torch.equal(cached, recomputed)


@settings(deadline=None, max_examples=60)
@given(st.integers(1, 50), st.integers(1, 12))
def test_sync_segments_cover_the_round_in_segments_of_sync_every(total, every):
    from asepr.training.loop.local import sync_segments

    segments = sync_segments(total, every)
    assert sum(segments) == total
    assert all(s == every for s in segments[:-1]) and 1 <= segments[-1] <= every


def test_control_variates_correct_each_gradient_by_the_global_minus_the_local_variate():
    from asepr.training.reconcile import ControlVariates

    torch.manual_seed(0)
    model = torch.nn.Linear(3, 2)
    cv = ControlVariates(model)
    size = num_parameters(model)
    c_local, c_global = torch.randn(size), torch.randn(size)
    cv.update(c_local, c_global)
    cv.begin()
    grads = []
    for _ in range(2):
        model.zero_grad()
        model(torch.randn(4, 3)).pow(2).sum().backward()
        raw = torch.cat([p.grad.reshape(-1) for p in model.parameters()]).clone()
        cv.correct()
        corrected = torch.cat([p.grad.reshape(-1) for p in model.parameters()])
        assert torch.allclose(corrected, raw + c_global - c_local)
        grads.append(raw)
    # The segment's new local variate: the mean raw gradient of its steps.
    assert torch.allclose(cv.estimate(), (grads[0] + grads[1]) / 2)
    state = cv.state_dict()
    other = ControlVariates(model)
    other.load_state_dict(state, "x.pt")
    assert torch.equal(other.c_local, c_local) and torch.equal(other.c_global, c_global)


def test_a_clipped_correction_is_at_most_clip_times_the_gradient_norm():
    from asepr.training.reconcile import ControlVariates

    torch.manual_seed(1)
    model = torch.nn.Linear(3, 2)
    cv = ControlVariates(model, clip=0.5)
    size = num_parameters(model)
    cv.update(torch.zeros(size), 1000 * torch.randn(size))  # a correction far larger than any gradient
    cv.begin()
    model(torch.randn(4, 3)).pow(2).sum().backward()
    raw = torch.cat([p.grad.reshape(-1) for p in model.parameters()]).clone()
    cv.correct()
    added = torch.cat([p.grad.reshape(-1) for p in model.parameters()]) - raw
    assert torch.isclose(added.norm(), 0.5 * raw.norm(), rtol=1e-4)
    # Same direction as the unclipped correction, and the estimate is the raw gradient.
    assert torch.allclose(added / added.norm(), cv.c_global / cv.c_global.norm(), atol=1e-5)
    assert torch.allclose(cv.estimate(), raw)


def test_a_short_segment_moves_the_control_variate_by_its_share_of_a_full_one():
    from asepr.training.reconcile import ControlVariates

    torch.manual_seed(4)
    model = torch.nn.Linear(3, 2)
    size = num_parameters(model)

    def segment(cv, steps):
        cv.begin()
        grads = []
        for _ in range(steps):
            model.zero_grad()
            model(torch.randn(4, 3)).pow(2).sum().backward()
            grads.append(torch.cat([p.grad.reshape(-1) for p in model.parameters()]).clone())
            cv.correct()
        return torch.stack(grads).mean(0)

    old = torch.randn(size)
    for weigh, expected_share in ((10, 0.2), (0, 1.0)):
        cv = ControlVariates(model, segment_steps=weigh)
        cv.update(old, torch.zeros(size))
        mean = segment(cv, 2)  # a 2-step tail of 10-step segments
        assert torch.allclose(cv.estimate(), old + expected_share * (mean - old), atol=1e-6)
    cv = ControlVariates(model, segment_steps=10)
    cv.update(old, torch.zeros(size))
    mean = segment(cv, 10)  # a full segment replaces it
    assert torch.allclose(cv.estimate(), mean, atol=1e-6)


def test_a_saved_config_with_removed_fields_is_read_at_their_built_in_values_and_refused_otherwise():
    old = TrainConfig().to_dict() | {"kd_steps": 10, "kd_lr": 0.001, "mu": 1.0, "tau": 0.5, "corr_lr": 0.01,
                                     "scaffold_shrink": False, "scaffold_weigh_segments": True, "sync_warmup": 0.0,
                                     "negative_pool": 0, "remote_negatives": 0.5, "link_eval_pool": 1 << 14}
    assert TrainConfig.from_dict(old) == TrainConfig()
    assert TrainConfig().resume_conflicts(old) == []
    for field, value in (("scaffold_shrink", True), ("kd_steps", 5), ("mu", 0.5), ("scaffold_weigh_segments", False)):
        changed = old | {field: value}
        with pytest.raises(ValueError, match=f"{field}={value!r}"):
            TrainConfig.from_dict(changed, source="RUN/config.json")
        assert TrainConfig().resume_conflicts(changed) == [field]
    # the link defaults that followed the task and the learning rate
    link = TrainConfig(task="link")
    assert TrainConfig.from_dict(link.to_dict() | {"mu": 0.01, "kd_lr": 0.0001, "corr_lr": 0.001}) == link


def test_a_setting_round_trips_through_the_run_config_and_a_wrong_type_is_named():
    config = TrainConfig(eval_mode="local")
    assert TrainConfig.from_dict(config.to_dict()) == config
    bad = config.to_dict() | {"patience": True}
    with pytest.raises(Exception, match="patience.*JSON integer"):
        TrainConfig.from_dict(bad)
