"""The floors of the layout (docs/design.md#layout): which room may import which.

- ``storage`` imports neither ``pipeline`` nor ``training``;
- ``pipeline`` does not import ``training``, and ``training`` does not import ``pipeline``;
- nothing imports ``workflows`` (the command line sits on top of every room).

Imports inside functions count, and so do module names handed to ``importlib``.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
ROOMS = ("storage", "pipeline", "training", "workflows")
FORBIDDEN = {
    "storage": ("pipeline", "training", "workflows"),
    "pipeline": ("training", "workflows"),
    "training": ("pipeline", "workflows"),
    "workflows": (),
}
_MODULE_NAME = re.compile(r"asepr(\.\w+)+")


def imported_rooms(source: str) -> set[str]:
    """The rooms (``storage``...) that ``source`` imports, directly or by a module name string."""
    tree = ast.parse(source)
    docstrings = {id(node.body[0].value) for node in ast.walk(tree)
                  if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
                  and node.body and isinstance(node.body[0], ast.Expr)
                  and isinstance(node.body[0].value, ast.Constant)}
    names: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names.append(node.module)
            if node.module == "asepr":
                names += [f"asepr.{alias.name}" for alias in node.names]
        elif (isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings
              and _MODULE_NAME.fullmatch(node.value)):
            names.append(node.value)
    return {name.split(".")[1] for name in names if name.startswith("asepr.") and name.split(".")[1] in ROOMS}


@pytest.mark.parametrize("room", ROOMS)
def test_a_room_imports_only_the_rooms_below_it(room):
    broken = {
        str(path.relative_to(REPO)): sorted(found)
        for path in sorted((REPO / room).rglob("*.py"))
        if (found := imported_rooms(path.read_text()) & set(FORBIDDEN[room]))
    }
    assert not broken, f"{room} may not import {FORBIDDEN[room]}: {broken}"


def test_the_rule_sees_every_kind_of_import():
    source = '''"""asepr.training.config in a docstring is prose."""
import asepr.pipeline.config
from asepr.storage import open_partition
from asepr import training
def f():
    from asepr.workflows.cli import run
    importlib.import_module("asepr.storage.errors")
'''
    assert imported_rooms(source) == {"pipeline", "storage", "training", "workflows"}
    assert imported_rooms('"""Mentions asepr.training.main."""\nimport numpy\n') == set()


@pytest.mark.parametrize("room", ("training", "pipeline"))
def test_a_room_keeps_at_most_eight_loose_modules(room):
    loose = sorted(p.name for p in (REPO / room).glob("*.py") if p.name != "__init__.py")
    assert len(loose) <= 8, loose


def test_every_folder_of_a_room_is_a_package_that_says_what_it_holds():
    for room in ROOMS:
        for init in [REPO / room / "__init__.py", *(REPO / room).rglob("*/__init__.py")]:
            assert ast.get_docstring(ast.parse(init.read_text())), f"{init.relative_to(REPO)} has no docstring"
        for folder in (REPO / room).rglob("*"):
            if folder.is_dir() and folder.name != "__pycache__" and any(folder.glob("*.py")):
                assert (folder / "__init__.py").is_file(), f"{folder.relative_to(REPO)} is not a package"
