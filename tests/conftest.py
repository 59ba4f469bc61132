"""Shared fixtures: the published datasets and small synthetic inputs."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

REPO = Path(__file__).resolve().parents[1]


def _datasets_dir() -> Path | None:
    env = os.environ.get("ASEPR_DATASETS")
    candidates = [Path(env)] if env else []
    candidates += [REPO.parent / "shared" / "datasets", REPO / "shared" / "datasets"]
    for path in candidates:
        if (path / "README.md").exists():
            return path
    return None


@pytest.fixture(scope="session")
def datasets_dir() -> Path:
    """``../shared/datasets`` (or ``$ASEPR_DATASETS``); skips when absent."""
    path = _datasets_dir()
    if path is None:
        pytest.skip("the shared datasets are not available (set ASEPR_DATASETS)")
    return path


@pytest.fixture
def rng() -> np.random.Generator:
    return np.random.default_rng(12345)
