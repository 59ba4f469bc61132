"""Which code a benchmark's child commands run: the installed asepr, or another checkout.

``asepr bench scale --baseline TREE`` runs an earlier revision side by side with the
installed package, in the same run and on the same inputs. A checkout of the one-
namespace layout (``api/`` beside ``storage/``, ``pipeline/``...) is not importable as
``asepr`` from its folder, since ``pyproject.toml`` maps its folders into the package;
:func:`code_of` lays out that mapping as symbolic links in the work directory and puts
them on the child's ``PYTHONPATH``. A checkout from before the namespace (top-level
``workflows`` and friends) runs as ``python -m workflows`` with the checkout itself on
``PYTHONPATH``. Every child runs with ``-P``, so that the working directory never
shadows the code chosen here.
"""

from __future__ import annotations

import hashlib
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path

from asepr.storage.errors import InputError, format_problem

__all__ = ["ROOMS", "Code", "code_of", "namespace_view", "this_code"]

ROOMS = ("storage", "pipeline", "training", "workflows")


@dataclass(frozen=True)
class Code:
    """A label, the command line prefix of ``asepr``, and the environment it needs."""

    label: str
    argv: tuple[str, ...]
    env: dict[str, str] = field(default_factory=dict)

    def command(self, *args: str) -> list[str]:
        return [*self.argv, *args]

    def environ(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
        return {**env, **self.env}


def this_code() -> Code:
    """The installed package (the one running this benchmark)."""
    return Code("this", (sys.executable, "-P", "-m", "asepr"))


def namespace_view(tree: Path, workdir: Path) -> Path:
    """A folder of ``workdir`` holding ``asepr/`` as links into the checkout ``tree``: the
    package as it installs, importable with the folder on ``sys.path``."""
    view = workdir / f"code-{hashlib.sha256(str(tree).encode()).hexdigest()[:12]}"
    package = view / "asepr"
    package.mkdir(parents=True, exist_ok=True)
    links = {"__init__.py": tree / "api" / "__init__.py", "__main__.py": tree / "api" / "__main__.py",
             **{room: tree / room for room in ROOMS}}
    for name, target in links.items():
        link = package / name
        if link.is_symlink() or link.exists():
            link.unlink()
        link.symlink_to(target, target_is_directory=target.is_dir())
    return view


def code_of(tree: str | Path, workdir: Path, label: str = "base") -> Code:
    """The code of the checkout ``tree``, runnable from ``workdir``'s links."""
    tree = Path(tree).resolve()
    if (tree / "api" / "__init__.py").is_file() and all((tree / room).is_dir() for room in ROOMS):
        view = namespace_view(tree, workdir)
        return Code(label, (sys.executable, "-P", "-m", "asepr"), {"PYTHONPATH": str(view)})
    if (tree / "workflows" / "__main__.py").is_file():
        return Code(label, (sys.executable, "-P", "-m", "workflows"), {"PYTHONPATH": str(tree)})
    raise InputError(format_problem(f"--baseline {tree}", "a checkout of asepr (api/ and storage/, pipeline/, "
                                    "training/, workflows/ at its top level)", "neither layout",
                                    "give the folder of a checkout, e.g. `git worktree add /tmp/base REV`."))
