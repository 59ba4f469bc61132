"""Crafted files inside an output never reach outside it.

Each test builds a real output (``asepr partition``), plants what a hostile co-user of
a shared filesystem could plant, runs the real command, and checks that it is refused
with a message naming the file, and that nothing outside OUT was read, written or
deleted (a ``victim`` directory and file beside OUT keep their content).
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

from asepr.pipeline.config import PartitionConfig
from asepr.pipeline.increment.ingest import ingest
from asepr.pipeline.partition_run import partition_to_store
from asepr.pipeline.verify import verify_output
from asepr.storage.commit.atomic import save_npy_atomic, write_bytes_atomic, write_json_atomic
from asepr.storage.commit.confine import confined_path
from asepr.storage.commit.lock import OutputLock
from asepr.storage.errors import StoreError
from asepr.storage.partitions.manifest import (
    JOURNAL_NAME,
    LOCK_NAME,
    MANIFEST_NAME,
    STAGING_NAME,
    read_manifest,
)
from asepr.storage.partitions.state import read_state
from tests.storage.helpers import edge_table, write_input
from asepr.workflows.cli import main

_NUM_NODES = 60


@pytest.fixture(scope="module")
def committed(tmp_path_factory) -> tuple[Path, Path]:
    """``(input, output)``: a small input and its committed generation 1 (with state)."""
    base = tmp_path_factory.mktemp("confine")
    write_input(base / "in", num_nodes=_NUM_NODES)
    partition_to_store(base / "in", base / "gen1", PartitionConfig(num_parts=2, algo="dbh"))
    return base / "in", base / "gen1"


@pytest.fixture
def world(committed, tmp_path) -> dict[str, Path]:
    """A copy of the output, new edges to ingest, and victims beside the output."""
    _, gen1 = committed
    out = tmp_path / "out"
    shutil.copytree(gen1, out)
    new = tmp_path / "new"
    new.mkdir()
    rng = np.random.default_rng(1)
    pq.write_table(edge_table(rng.integers(0, _NUM_NODES, 40), rng.integers(0, _NUM_NODES, 40)),
                   new / "part-00000.parquet")
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "keep.txt").write_text("precious")
    victim_file = tmp_path / "victim.txt"
    victim_file.write_text("precious")
    return {"out": out, "new": new, "victim": victim, "victim_file": victim_file}


def _untouched(world: dict[str, Path]) -> None:
    assert (world["victim"] / "keep.txt").read_text() == "precious"
    assert world["victim_file"].read_text() == "precious"
    assert sorted(p.name for p in world["victim"].iterdir()) == ["keep.txt"]


def _plant_journal(out: Path, **fields) -> Path:
    """A journal of the committed generation: one whose manifest landed is always completed."""
    manifest = read_manifest(out)
    journal = {"run_key": "crafted", "generation": manifest["generation"], "items": [], "retire": [],
               "manifest": manifest, **fields}
    staging = out / STAGING_NAME
    staging.mkdir(exist_ok=True)
    path = staging / JOURNAL_NAME
    path.write_text(json.dumps(journal))
    return path


# --- case 4: the commit journal names paths outside OUT ------------------------------------------


@pytest.mark.parametrize("field", ["retire", "items"])
def test_a_journal_entry_outside_out_is_refused_by_ingest(world, field, capsys):
    out = world["out"]
    before = (out / MANIFEST_NAME).read_bytes()
    journal = _plant_journal(out, **{field: ["../victim"]})
    assert main(["ingest", str(out), str(world["new"]), "--no-progress"]) == 1
    err = capsys.readouterr().err
    assert str(journal) in err and "'../victim'" in err and f"({field})" in err
    _untouched(world)
    assert (out / MANIFEST_NAME).read_bytes() == before
    assert journal.exists()  # nothing was moved: the file stays for the user to inspect


def test_a_journal_entry_through_a_symlink_is_refused(world):
    out = world["out"]
    os.symlink(world["victim"], out / "part-00007.zarr")
    _plant_journal(out, retire=["part-00007.zarr"])
    with pytest.raises(StoreError, match="commit.json"):
        ingest(out, world["new"])
    _untouched(world)


def test_a_malformed_journal_is_refused_with_its_path(world):
    journal = _plant_journal(world["out"], items="part-00000.zarr")
    with pytest.raises(StoreError, match=str(journal)):
        ingest(world["out"], world["new"])
    _untouched(world)


def test_a_manifest_partition_path_outside_out_is_never_retired(world, committed):
    """A crafted manifest entry would become a ``retire`` item: the commit refuses it first."""
    root, _ = committed
    out = world["out"]
    manifest = read_manifest(out)
    manifest["partitions"][1]["path"] = "../victim"
    (out / MANIFEST_NAME).write_text(json.dumps(manifest))
    with pytest.raises(StoreError, match=r"\(retire\).*'../victim'"):
        partition_to_store(root, out, PartitionConfig(num_parts=2, algo="dbh"), overwrite=True)
    _untouched(world)


def test_a_state_reference_outside_out_is_refused(world):
    out = world["out"]
    outside = out.parent / "elsewhere"
    shutil.copytree(out / "state.zarr", outside / "state.zarr")
    manifest = read_manifest(out)
    manifest["state"]["path"] = "../elsewhere/state.zarr"
    (out / MANIFEST_NAME).write_text(json.dumps(manifest))
    with pytest.raises(StoreError, match=r"manifest.json \(state path\).*'../elsewhere/state.zarr'"):
        read_state(out)
    with pytest.raises(StoreError, match="state path"):
        ingest(out, world["new"])
    _untouched(world)


def test_confined_path_refuses_escapes_and_resolves_inside(tmp_path):
    (tmp_path / "a").mkdir()
    assert confined_path(tmp_path, "a/b", what="f") == (tmp_path / "a" / "b").resolve()
    os.symlink(tmp_path.parent, tmp_path / "up")
    for bad in ("../x", "/etc/passwd", "up/x", "a/../../x", ".", "", None, 3):
        with pytest.raises(StoreError, match="f: expected"):
            confined_path(tmp_path, bad, what="f")


# --- case 5: predictable temp names and planted symlinks ------------------------------------------


def test_planted_symlinks_at_the_old_temp_names_are_never_followed(world):
    """``OUT/manifest.json.partial-<pid>`` and ``staging/run.json.tmp`` were opened blindly."""
    out = world["out"]
    os.symlink(world["victim_file"], out / f"{MANIFEST_NAME}.partial-{os.getpid()}")
    staging = out / STAGING_NAME
    staging.mkdir()
    os.symlink(world["victim"] / "keep.txt", staging / "run.json.tmp")
    manifest = ingest(out, world["new"])
    assert manifest["generation"] == 2
    _untouched(world)
    assert not (out / MANIFEST_NAME).is_symlink()
    assert read_manifest(out)["generation"] == 2
    assert verify_output(out).ok


def test_a_symlink_in_place_of_the_manifest_is_refused_before_the_swap(world):
    out = world["out"]
    shutil.copy(out / MANIFEST_NAME, world["victim_file"])
    original = world["victim_file"].read_bytes()
    (out / MANIFEST_NAME).unlink()
    os.symlink(world["victim_file"], out / MANIFEST_NAME)
    with pytest.raises(StoreError, match=rf"{MANIFEST_NAME}: expected a regular file or directory.*symbolic link"):
        ingest(out, world["new"])
    assert world["victim_file"].read_bytes() == original
    assert read_manifest(out)["generation"] == 1  # the stores were not swapped
    assert not (out / STAGING_NAME / JOURNAL_NAME).exists()


def test_a_symlinked_staging_directory_is_refused(world):
    out = world["out"]
    os.symlink(world["victim"], out / STAGING_NAME)
    with pytest.raises(StoreError, match=rf"{STAGING_NAME}: expected a regular file or directory.*symbolic link"):
        ingest(out, world["new"])
    _untouched(world)


def test_the_atomic_writers_refuse_a_symlink_and_leave_no_temp_file(tmp_path):
    victim = tmp_path / "victim"
    victim.write_text("precious")
    d = tmp_path / "d"
    d.mkdir()
    for name, write in [("a.json", lambda p: write_json_atomic(p, {"x": 1})),
                        ("b.bin", lambda p: write_bytes_atomic(p, b"data")),
                        ("c.npy", lambda p: save_npy_atomic(p, np.arange(3)))]:
        os.symlink(victim, d / name)
        with pytest.raises(StoreError, match=rf"{d / name}: expected a regular file or directory"):
            write(d / name)
    assert victim.read_text() == "precious"
    assert sorted(p.name for p in d.iterdir()) == ["a.json", "b.bin", "c.npy"]
    write_bytes_atomic(d / "fresh", b"data")
    assert (d / "fresh").read_bytes() == b"data" and oct((d / "fresh").stat().st_mode & 0o777) != "0o600"


# --- case 10: a lock file with garbage content ---------------------------------------------------


@pytest.mark.parametrize("content", [b"garbage \x00\xff", b"[1, 2]", b'{"pid": "12", "host": "h"}'])
def test_a_garbage_lock_is_refused_with_its_path_and_the_fix(world, content, capsys):
    out = world["out"]
    before = (out / MANIFEST_NAME).read_bytes()
    (out / LOCK_NAME).write_bytes(content)
    assert main(["ingest", str(out), str(world["new"]), "--no-progress"]) == 1
    err = capsys.readouterr().err
    assert f"lock file {out / LOCK_NAME}" in err and "not an asepr lock" in err
    assert f"once no asepr process is writing to {out}, remove {out / LOCK_NAME}" in err
    assert "pid ?" not in err
    assert (out / LOCK_NAME).read_bytes() == content and (out / MANIFEST_NAME).read_bytes() == before


def test_a_symlink_in_place_of_the_lock_is_refused(world):
    out = world["out"]
    os.symlink(world["victim_file"], out / LOCK_NAME)
    with pytest.raises(StoreError, match="a symbolic link: it is unreadable or not an asepr lock"):
        OutputLock(out).acquire()
    _untouched(world)
