"""Trainers flush denormal floats to zero: weights and Adam moments that only weight decay
moves sink into the denormal range, where CPU float arithmetic is 10-100x slower (a
5-epoch link-prediction round on amazon-computers took 540 s instead of 24 s)."""

from __future__ import annotations

import torch

from training.centralized import run_centralized
from training.config import TrainConfig
from training.rounds import configure_cpu


def test_configure_cpu_flushes_denormals_and_sets_threads():
    denormal = torch.tensor([1e-39], dtype=torch.float32)
    before = torch.get_num_threads()
    try:
        torch.set_flush_denormal(False)
        assert (denormal * 1.0).item() != 0.0  # the platform keeps denormals by default
        configure_cpu(TrainConfig(threads=1), world=4)
        assert (denormal * 1.0).item() == 0.0
        assert torch.get_num_threads() == 1
    finally:
        torch.set_flush_denormal(False)
        torch.set_num_threads(before)


def test_centralized_training_runs_with_denormals_flushed(cora_input, tmp_path):
    """The centralized trainer configures its process like the ranks (it once did not, and
    its link runs slowed 20x after 30 epochs)."""
    seen = []

    def on_round(row):
        seen.append(((torch.tensor([1e-39]) * 1.0).item(), torch.get_num_threads()))

    config = TrainConfig(hidden=16, rounds=1, local_epochs=1, threads=1, feature_norm="none")
    before = torch.get_num_threads()
    try:
        torch.set_flush_denormal(False)
        run_centralized(cora_input, tmp_path / "run", config, on_round=on_round)
    finally:
        torch.set_flush_denormal(False)
        torch.set_num_threads(before)
    assert seen == [(0.0, 1)]
