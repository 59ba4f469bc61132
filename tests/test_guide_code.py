"""The Python in the README and the guides names the package as it installs: every
``python`` block parses, and every asepr module, name and ``asepr.X`` it uses resolves."""

from __future__ import annotations

import ast
import importlib
import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PAGES = [REPO / "README.md", *sorted((REPO / "docs" / "guide").glob("*.md"))]
_BLOCK = re.compile(r"^```python\n(.*?)^```", re.S | re.M)


def python_blocks(page: Path) -> list[str]:
    return _BLOCK.findall(page.read_text())


def asepr_names(source: str) -> set[str]:
    """Dotted names under ``asepr`` that ``source`` imports or reads."""
    found: set[str] = set()
    aliases: dict[str, str] = {}
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] == "asepr":
                    found.add(alias.name)
                    aliases[alias.asname or alias.name.split(".")[0]] = alias.name if alias.asname else "asepr"
        elif isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "asepr":
            found.update(f"{node.module}.{alias.name}" for alias in node.names)
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in aliases:
            found.add(f"{aliases[node.value.id]}.{node.attr}")
    return found


def resolves(dotted: str) -> bool:
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:cut]))
        except ModuleNotFoundError:
            continue
        for attr in parts[cut:]:
            if not hasattr(obj, attr):
                return False
            obj = getattr(obj, attr)
        return True
    return False


def test_the_pages_hold_python_that_uses_asepr():
    assert sum(len(asepr_names(block)) for page in PAGES for block in python_blocks(page)) >= 10


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_every_asepr_name_in_a_page_resolves(page):
    for block in python_blocks(page):
        missing = sorted(name for name in asepr_names(block) if not resolves(name))
        assert not missing, f"{page.relative_to(REPO)}: {missing}"


def test_the_check_fails_on_a_name_that_moved():
    assert not resolves("asepr.training.data.load_local_graph")  # training/ by concept: graph/data.py
    assert asepr_names("import asepr\nasepr.nothing_here()\n") == {"asepr", "asepr.nothing_here"}
    assert not resolves("asepr.nothing_here")
