"""Shared fixtures: the published datasets and small synthetic inputs."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

REPO = Path(__file__).resolve().parents[1]


#: The published datasets that tests read from ``$ASEPR_DATASETS`` (Cora is bundled in
#: ``workflows/data`` and read from there).
PUBLISHED = ("amazon-computers", "amazon-photo", "coauthor-cs", "coauthor-physics", "facebook-pagepage",
             "squirrel", "tolokers", "twitch-de")


def _candidates() -> list[Path]:
    env = os.environ.get("ASEPR_DATASETS")
    return ([Path(env)] if env else []) + [REPO.parent / "shared" / "datasets", REPO / "shared" / "datasets"]


def _datasets_dir() -> Path | None:
    return next((path for path in _candidates() if (path / "README.md").exists()), None)


def needs_published(what: str) -> str:
    """The skip reason of a test that needs the published dataset(s) ``what``."""
    looked = ", ".join(str(p) for p in _candidates())
    return (f"needs the published dataset(s) {what}: set $ASEPR_DATASETS to the folder that holds them "
            f"(none found in {looked})")


@pytest.fixture(scope="session")
def datasets_dir() -> Path:
    """The published datasets' folder, ``$ASEPR_DATASETS`` (else ``../shared/datasets``);
    a test that asks for it is skipped with :func:`needs_published`'s reason when absent."""
    path = _datasets_dir()
    if path is None:
        pytest.skip(needs_published(", ".join(PUBLISHED)))
    return path


@pytest.fixture
def rng() -> np.random.Generator:
    return np.random.default_rng(12345)
