"""``.npy`` headers are never parsed on two threads at once where CPython cannot take it.

``np.load`` parses each header with :func:`ast.literal_eval`, which is not thread-safe on
CPython 3.11 before 3.11.8 and 3.12 before 3.12.2 (``SystemError: AST constructor
recursion depth mismatch``). Every load of the package goes through
:func:`asepr.storage.inputs.npy.load_npy`; these tests check that no module calls ``np.load`` itself
and that ``load_npy`` never lets two header parses overlap, under many threads.
"""

from __future__ import annotations

import ast
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest

import asepr.storage.inputs.npy as npy
from asepr.storage.inputs.npy import load_npy, npz_member

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("pipeline", "storage", "training", "workflows")


def _bare_loads(path: Path) -> list[int]:
    """Lines of ``path`` that call ``np.load`` / ``numpy.load`` directly."""
    lines = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "load"
                and isinstance(node.func.value, ast.Name) and node.func.value.id in ("np", "numpy")):
            lines.append(node.lineno)
    return lines


def test_every_npy_load_of_the_package_goes_through_load_npy():
    found = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            if path == ROOT / "storage" / "inputs" / "npy.py":
                continue
            if lines := _bare_loads(path):
                found[str(path.relative_to(ROOT))] = lines
    assert not found, f"np.load called directly (use asepr.storage.inputs.npy.load_npy): {found}"


def test_the_versions_with_the_unsafe_parser():
    assert not npy._parse_is_thread_safe((3, 11, 7))
    assert npy._parse_is_thread_safe((3, 11, 8))
    assert not npy._parse_is_thread_safe((3, 12, 1))
    assert npy._parse_is_thread_safe((3, 12, 2))
    assert npy._parse_is_thread_safe((3, 13, 0))


@pytest.fixture
def overlap(monkeypatch):
    """Count the header parses running at once (each held open a moment to widen the window)."""
    real = ast.literal_eval
    state = {"now": 0, "most": 0, "calls": 0}
    guard = threading.Lock()

    def literal_eval(source):
        with guard:
            state["now"] += 1
            state["calls"] += 1
            state["most"] = max(state["most"], state["now"])
        try:
            time.sleep(0.001)
            return real(source)
        finally:
            with guard:
                state["now"] -= 1

    monkeypatch.setattr(ast, "literal_eval", literal_eval)
    monkeypatch.setattr(npy, "HEADER_PARSE_THREAD_SAFE", False)  # as on the affected versions
    return state


def _files(tmp_path: Path, count: int = 16) -> list[tuple[Path, np.ndarray]]:
    out = []
    for i in range(count):
        array = np.arange(i * 7, dtype=np.int64 if i % 2 else np.float32).reshape(-1, 7) if i else np.zeros(0)
        path = tmp_path / f"a{i}.npy"
        np.save(path, array)
        out.append((path, array))
    return out


def _hammer(files, mmap_mode) -> None:
    def one(k: int) -> None:
        path, want = files[k % len(files)]
        got = load_npy(path, mmap_mode=mmap_mode)
        assert got.dtype == want.dtype and got.shape == want.shape and np.array_equal(got, want)
        assert isinstance(got, np.memmap) == (mmap_mode is not None)

    with ThreadPoolExecutor(max_workers=16) as pool:
        list(pool.map(one, range(800)))


@pytest.mark.parametrize("mmap_mode", [None, "r"])
def test_many_threads_loading_npy_files_never_parse_two_headers_at_once(tmp_path, overlap, mmap_mode):
    _hammer(_files(tmp_path), mmap_mode)
    assert overlap["calls"] >= 800 and overlap["most"] == 1


def test_bare_np_load_would_overlap(tmp_path, overlap):
    """The instrument sees overlapping parses when nothing serialises them."""
    files = _files(tmp_path)
    with ThreadPoolExecutor(max_workers=16) as pool:
        list(pool.map(lambda k: np.load(files[k % len(files)][0]), range(800)))
    assert overlap["most"] > 1


def test_npz_members_are_read_under_the_lock(tmp_path, overlap):
    np.savez(tmp_path / "a.npz", x=np.arange(5), y=np.ones((2, 3)))

    def one(_):
        with np.load(tmp_path / "a.npz") as npz:
            assert np.array_equal(npz_member(npz, "x"), np.arange(5))
            assert npz_member(npz, "y").shape == (2, 3)

    with ThreadPoolExecutor(max_workers=8) as pool:
        list(pool.map(one, range(200)))
    assert overlap["most"] == 1
