"""Every package directory is installed by pyproject.toml, so a non-editable install has it."""

from __future__ import annotations

import tomllib
from pathlib import Path

from setuptools import find_packages

REPO = Path(__file__).resolve().parents[1]


def test_every_package_is_installed():
    setuptools = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]
    include = setuptools["packages"]["find"]["include"]
    installed = set(find_packages(where=str(REPO), include=include))
    found = {
        ".".join(p.parent.relative_to(REPO).parts)
        for top in ("storage", "pipeline", "training", "workflows")
        for p in (REPO / top).rglob("__init__.py")
    }
    assert found <= installed, f"packages missing from pyproject.toml: {sorted(found - installed)}"
    assert not any(name.startswith("tests") for name in installed)
