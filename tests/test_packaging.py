"""What a user checks first: every package is installed, the extras, ``--version``, help on every option."""

from __future__ import annotations

import argparse
import tomllib
from pathlib import Path

import pytest
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


def _parsers(parser: argparse.ArgumentParser, path: str = "asepr"):
    """Every parser under ``parser``, with its command line prefix."""
    yield path, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from _parsers(sub, f"{path} {name}")


def test_every_option_of_every_command_has_help():
    from workflows.cli import build_parser

    missing = [
        f"{path} {'/'.join(action.option_strings) or action.dest}"
        for path, parser in _parsers(build_parser())
        for action in parser._actions
        if not isinstance(action, (argparse._HelpAction, argparse._SubParsersAction))
        and not (action.help or "").strip()
    ]
    assert not missing, f"options without help text: {missing}"


def test_rounds_help_says_resumed_rounds_count():
    from workflows.cli import build_parser

    train = dict(_parsers(build_parser()))["asepr train"]
    rounds = next(a for a in train._actions if "--rounds" in a.option_strings)
    assert "resumed ones included" in rounds.help


def test_version_is_the_installed_one(capsys):
    from workflows.cli import main

    version = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"]
    with pytest.raises(SystemExit) as exit_info:
        main(["--version"])
    assert exit_info.value.code == 0
    assert capsys.readouterr().out.strip() == f"asepr {version}"
