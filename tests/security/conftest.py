"""Inputs for the adversarial tests: a small synthetic graph, and the bundled Cora."""

from __future__ import annotations

from pathlib import Path

import pytest

from asepr.pipeline.inputs.synth import SynthConfig, generate


@pytest.fixture(scope="session")
def synth_input(tmp_path_factory) -> Path:
    """A synthetic attributed graph (2,000 nodes, 8,000 edges, 16-d features, 5 classes)."""
    root = tmp_path_factory.mktemp("synth") / "in"
    generate(root, SynthConfig(num_nodes=2_000, num_edges=8_000, num_classes=5, dim=16, seed=3))
    return root


@pytest.fixture(scope="session")
def cora_input(tmp_path_factory) -> Path:
    """The bundled Cora (``workflows/data``), imported."""
    from asepr.storage.importers import import_dataset
    from asepr.workflows.demo import bundled_cora

    root = tmp_path_factory.mktemp("cora") / "cora-in"
    import_dataset("gnn-npz", bundled_cora(), root)
    return root
