"""``scaffold`` with ``scaffold_control="global"`` on 2 gloo ranks: each rank's control
variate is its gradient at the synchronised global model, so with identical data the
correction is zero, and with different data it is the ranks' weighted gradient
difference at that point, as a hand computation on each rank's partition finds it."""

from __future__ import annotations

import dataclasses

import pytest
import torch
import torch.nn.functional as F

from tests.training.conftest import fork_ranks
from training.comm import Comm
from training.config import TrainConfig
from training.data import load_local_graph
from training.models import build_model, flatten, unflatten_into
from training.reconcile import Reconciler
from training.tasks import NodeTask

# No dropout, no clip: the gradients are deterministic and the correction is c − c_r itself.
CONFIG = TrainConfig(reconcile="avg+scaffold", scaffold_control="global", scaffold_batches=0, batch_size=0,
                     hidden=16, dropout=0.0, weight_decay=0.0, feature_norm="none", scaffold_clip=0.0, threads=1)




def _start(config: TrainConfig, in_dim: int) -> torch.Tensor:
    torch.manual_seed(0)
    return flatten(build_model(config, in_dim, 7))


def _sync(rank: int, world: int, out, parts, config: TrainConfig, result_dir) -> None:
    """One synchronisation of a rank holding ``parts[rank]``: its control variates and bytes."""
    comm = Comm()
    graph = load_local_graph(out, parts[rank])
    task = NodeTask(graph, 7, config)
    global_flat = _start(config, graph.x.shape[1])
    model = build_model(config, graph.x.shape[1], 7)
    reconciler = Reconciler(config, task, model, comm)
    # The local models differ (as after a segment of local steps); the average is the new point.
    local_flat = global_flat + 0.01 * torch.randn(global_flat.numel(), generator=torch.Generator().manual_seed(rank))
    new_flat, _ = reconciler(global_flat, local_flat, float(task.num_train), torch.Generator().manual_seed(5))
    drift = reconciler.drift
    torch.save({"new": new_flat, "local": local_flat, "c_local": drift.c_local, "c_global": drift.c_global,
                "weight": float(task.num_train), "bytes": comm.bytes.sent.get("model", 0.0)},
               result_dir / f"rank{rank}.pt")


def _hand_gradient(out, part_ids, config: TrainConfig, at: torch.Tensor, batches: int) -> torch.Tensor:
    """The gradient of a partition's training loss at ``at``: full-batch, or the mean over the
    first ``batches`` mini-batches drawn with the generator the reconciler was given."""
    graph = load_local_graph(out, part_ids)
    task = NodeTask(graph, 7, config)
    model = build_model(config, graph.x.shape[1], 7)
    unflatten_into(model, at)
    grads = []
    if not batches:
        idx = task.train_idx
        losses = [F.cross_entropy(model(graph.x, task.mp)[idx], graph.y[idx])]
    else:
        losses = []
        for batch in task.batches(torch.Generator().manual_seed(5)):
            losses.append(batch.loss(model(graph.x[batch.n_id], batch.graph)))
            if len(losses) == batches:
                break
    for loss in losses:
        model.zero_grad()
        loss.backward()
        grads.append(torch.cat([p.grad.reshape(-1) for p in model.parameters()]))
    return torch.stack(grads).mean(0)


def _run(out, parts, config: TrainConfig, tmp_path) -> list[dict]:
    fork_ranks(2, _sync, out, parts, config, tmp_path)
    return [torch.load(tmp_path / f"rank{r}.pt", weights_only=True) for r in range(2)]


def test_identical_data_gives_no_correction(cora_parts, tmp_path):
    out = cora_parts(2)
    ranks = _run(out, [[0], [0]], CONFIG, tmp_path)
    for r in ranks:
        assert float(r["c_local"].abs().max()) > 1e-4  # a real gradient ...
        assert torch.allclose(r["c_global"], r["c_local"], atol=1e-7)  # ... that the mean equals
    assert torch.allclose(ranks[0]["c_local"], ranks[1]["c_local"], atol=1e-7)


@pytest.mark.parametrize("batches, batch_size", [(0, 0), (3, 64)])
def test_skewed_data_corrects_by_the_ranks_gradient_difference_at_the_global_point(cora_parts, tmp_path, batches,
                                                                                   batch_size):
    out = cora_parts(2)
    config = dataclasses.replace(CONFIG, scaffold_batches=batches, batch_size=batch_size, fanouts=(5, 5))
    ranks = _run(out, [[0], [1]], config, tmp_path)
    w = [r["weight"] for r in ranks]
    # The global point: the weighted average of the local models, the same on both ranks.
    point = (w[0] * ranks[0]["local"] + w[1] * ranks[1]["local"]) / sum(w)
    assert torch.equal(ranks[0]["new"], ranks[1]["new"])
    assert torch.allclose(ranks[0]["new"], point, atol=1e-6)
    g = [_hand_gradient(out, [r], config, ranks[0]["new"], batches) for r in range(2)]
    assert float((g[0] - g[1]).norm()) > 1e-2  # the partitions' gradients really differ
    for r in range(2):
        assert torch.allclose(ranks[r]["c_local"], g[r], atol=1e-5)
        # c − c_r: the other rank's share of the gradient difference at the global point.
        other = 1 - r
        expected = w[other] / sum(w) * (g[other] - g[r])
        assert torch.allclose(ranks[r]["c_global"] - ranks[r]["c_local"], expected, atol=1e-5)
    # Two all_reduces of [n θ, n, 1] and [n c_r, n, 1]: on 2 ranks each sends its buffer once.
    size = point.numel()
    assert ranks[0]["bytes"] == 4 * 2 * (size + 2)


def test_scaffold_control_is_validated():
    with pytest.raises(ValueError, match='scaffold_control "mid"'):
        TrainConfig(scaffold_control="mid")
    with pytest.raises(ValueError, match="scaffold_batches"):
        TrainConfig(scaffold_batches=-1)
