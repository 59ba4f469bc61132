"""The server optimisers of asepr.training.reconcile.server against hand-computed references."""

from __future__ import annotations

import math

import pytest
import torch

from asepr.training.reconcile.server import SERVER_OPTIMIZERS, ServerOptimizer


def _reference(kind: str, lr: float, beta1: float, beta2: float, tau: float,
               rounds: list[tuple[list[float], list[float]]]) -> list[list[float]]:
    """Reddi et al.'s update, element by element in plain Python floats."""
    out = []
    m = [0.0] * len(rounds[0][0])
    v = [tau * tau] * len(m)
    for theta, avg in rounds:
        new = []
        for i, (t, a) in enumerate(zip(theta, avg)):
            d = t - a
            if kind == "fedavgm":
                m[i] = beta1 * m[i] + d
                new.append(t - lr * m[i])
            else:
                m[i] = beta1 * m[i] + (1 - beta1) * d
                v[i] = beta2 * v[i] + (1 - beta2) * d * d
                new.append(t - lr * m[i] / (math.sqrt(v[i]) + tau))
        out.append(new)
    return out


def _run(opt: ServerOptimizer, theta0: list[float], avgs: list[list[float]]) -> list[torch.Tensor]:
    theta = torch.tensor(theta0, dtype=torch.float64)
    out = []
    for avg in avgs:
        theta = opt.step(theta, torch.tensor(avg, dtype=torch.float64))
        out.append(theta)
    return out


def test_fedavg_with_lr_one_is_plain_averaging_bit_for_bit():
    gen = torch.Generator().manual_seed(0)
    opt = ServerOptimizer("fedavg", lr=1.0)
    theta = torch.randn(1000, generator=gen)
    for _ in range(3):
        avg = torch.randn(1000, generator=gen)
        before = (theta.clone(), avg.clone())
        new = opt.step(theta, avg)
        assert torch.equal(new, avg) and new.data_ptr() != avg.data_ptr()
        assert torch.equal(theta, before[0]) and torch.equal(avg, before[1])
        theta = new
    assert opt.state_dict()["steps"] == 3


def test_fedavg_server_lr_interpolates():
    new = ServerOptimizer("fedavg", lr=0.5).step(torch.tensor([2.0, -4.0]), torch.tensor([1.0, 0.0]))
    assert torch.equal(new, torch.tensor([1.5, -2.0]))


def test_fedavgm_two_steps_by_hand():
    # θ0 = (1, -2, 0.5), β = 0.9, η = 0.1.
    # Round 1: θ_avg = (0.5, -1, 0.5): Δ = (0.5, -1, 0), m = Δ, θ1 = θ0 - 0.1 m = (0.95, -1.9, 0.5).
    # Round 2: θ_avg = (0.85, -1.9, 0.7): Δ = (0.1, 0, -0.2), m = 0.9 (0.5, -1, 0) + Δ = (0.55, -0.9, -0.2),
    #          θ2 = θ1 - 0.1 m = (0.895, -1.81, 0.52).
    opt = ServerOptimizer("fedavgm", lr=0.1, momentum=0.9)
    got = _run(opt, [1.0, -2.0, 0.5], [[0.5, -1.0, 0.5], [0.85, -1.9, 0.7]])
    assert torch.allclose(got[0], torch.tensor([0.95, -1.9, 0.5], dtype=torch.float64), rtol=0, atol=1e-12)
    assert torch.allclose(got[1], torch.tensor([0.895, -1.81, 0.52], dtype=torch.float64), rtol=0, atol=1e-12)
    assert torch.allclose(opt.state_dict()["m"], torch.tensor([0.55, -0.9, -0.2], dtype=torch.float64),
                          rtol=0, atol=1e-12)


def test_fedadam_two_steps_by_hand():
    lr, b1, b2, tau = 0.1, 0.9, 0.99, 1e-3
    # Round 1, first coordinate: Δ = 0.5, m = 0.05, v = 0.99e-6 + 0.0025,
    # θ = 1 - 0.1 * 0.05 / (sqrt(0.00250099) + 0.001) = 0.90197...; the second has Δ = 0 and stays.
    opt = ServerOptimizer("fedadam", lr=lr, momentum=b1, beta2=b2, tau=tau)
    avgs = [[0.5, -2.0, 3.0], [0.7, -1.5, 3.25]]
    got = _run(opt, [1.0, -2.0, 3.0], avgs)
    first = 1 - 0.1 * 0.05 / (math.sqrt(0.99e-6 + 0.0025) + 0.001)
    assert abs(float(got[0][0]) - first) < 1e-12 and abs(first - 0.9019798) < 1e-6
    assert float(got[0][1]) == -2.0 and float(got[0][2]) == 3.0
    ref = _reference("fedadam", lr, b1, b2, tau, [([1.0, -2.0, 3.0], avgs[0]), (got[0].tolist(), avgs[1])])
    for g, r in zip(got, ref):
        assert torch.allclose(g, torch.tensor(r, dtype=torch.float64), rtol=0, atol=1e-12)


def test_fedavgm_matches_reference_over_many_rounds():
    gen = torch.Generator().manual_seed(3)
    theta0 = torch.randn(7, generator=gen, dtype=torch.float64).tolist()
    avgs = [torch.randn(7, generator=gen, dtype=torch.float64).tolist() for _ in range(5)]
    got = _run(ServerOptimizer("fedavgm", lr=0.7, momentum=0.5), theta0, avgs)
    thetas = [theta0] + [g.tolist() for g in got[:-1]]
    ref = _reference("fedavgm", 0.7, 0.5, 0.0, 1.0, list(zip(thetas, avgs)))
    for g, r in zip(got, ref):
        assert torch.allclose(g, torch.tensor(r, dtype=torch.float64), rtol=0, atol=1e-12)


@pytest.mark.parametrize("kind", SERVER_OPTIMIZERS)
def test_state_round_trip_gives_identical_next_steps(kind, tmp_path):
    gen = torch.Generator().manual_seed(1)
    avgs = [torch.randn(50, generator=gen) for _ in range(6)]
    settings = dict(lr=0.3, momentum=0.8, beta2=0.95, tau=1e-2)
    straight = ServerOptimizer(kind, **settings)
    theta = torch.randn(50, generator=gen)
    for avg in avgs[:3]:
        theta = straight.step(theta, avg)
    torch.save({"server": straight.state_dict(), "global": theta}, tmp_path / "ckpt.pt")
    saved = torch.load(tmp_path / "ckpt.pt", weights_only=True)
    resumed = ServerOptimizer(kind, **settings)
    resumed.load_state_dict(saved["server"])
    theta_resumed = saved["global"]
    for avg in avgs[3:]:
        theta = straight.step(theta, avg)
        theta_resumed = resumed.step(theta_resumed, avg)
        assert torch.equal(theta, theta_resumed)
    assert resumed.state_dict()["steps"] == straight.state_dict()["steps"] == 6


def test_state_dict_is_a_copy():
    opt = ServerOptimizer("fedavgm", lr=1.0, momentum=0.9)
    opt.step(torch.ones(3), torch.zeros(3))
    state = opt.state_dict()
    opt.step(torch.ones(3), torch.zeros(3))
    assert torch.equal(state["m"], torch.ones(3)) and state["steps"] == 1


def test_bad_settings_and_state_are_refused():
    with pytest.raises(ValueError, match='Unsupported server optimizer "sgd"'):
        ServerOptimizer("sgd")
    for bad in (dict(lr=0.0), dict(momentum=1.0), dict(beta2=-0.1), dict(tau=0.0)):
        with pytest.raises(ValueError, match=next(iter(bad))):
            ServerOptimizer("fedadam", **bad)
    momentum = ServerOptimizer("fedavgm")
    momentum.step(torch.ones(4), torch.zeros(4))
    adam = ServerOptimizer("fedadam")
    with pytest.raises(ValueError, match="the state of fedadam after 1 steps"):
        adam.load_state_dict(momentum.state_dict(), "round-3/global.pt")
    with pytest.raises(ValueError, match="round-3/global.pt"):
        adam.load_state_dict({"m": torch.zeros(4)}, "round-3/global.pt")
    with pytest.raises(ValueError, match="same shape"):
        adam.step(torch.ones(4), torch.zeros(5))
    momentum.load_state_dict(momentum.state_dict())
    with pytest.raises(ValueError, match="state's size 4"):
        momentum.step(torch.ones(6), torch.zeros(6))
