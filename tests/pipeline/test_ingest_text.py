"""Ingest of text edge lists in the original ids of an imported input (mapped through its id map)."""

from __future__ import annotations

import gzip
import os
import shutil
import subprocess
import sys
from collections import Counter
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from asepr.pipeline import ingest
from asepr.pipeline.config import PartitionConfig
from asepr.pipeline.increment.text_edges import TEXT_WORK_NAME
from asepr.pipeline.partition_run import partition_to_store
from asepr.pipeline.verify import verify_output
from asepr.storage.errors import InputError, SchemaError
from asepr.storage.importers import import_dataset
from asepr.storage.partitions.manifest import LOCK_NAME, STAGING_NAME, read_manifest
from tests.pipeline.crash import Crash, crash_at
from tests.pipeline.ingest_cases import edge_multiset
from tests.workflows.helpers import REPO

NAMES = [f"user-{i:02d}" for i in range(60)]


def _edge_list(path: Path, pairs, header: str = "src\tdst") -> Path:
    path.write_text("\n".join([header, *(f"{a}\t{b}" for a, b in pairs)]) + "\n")
    return path


@pytest.fixture(scope="module")
def imported(tmp_path_factory) -> dict:
    """An edge list of string ids imported (with its id map) and partitioned (k=2, hdrf)."""
    root = tmp_path_factory.mktemp("text")
    rng = np.random.default_rng(0)
    pairs = [(NAMES[i], NAMES[(i + 1) % 60]) for i in range(60)]
    pairs += [(NAMES[a], NAMES[b]) for a, b in rng.integers(0, 60, (120, 2)) if a != b]
    _edge_list(root / "graph.tsv", pairs)
    import_dataset("edgelist", root / "graph.tsv", root / "in")
    partition_to_store(root / "in", root / "out", PartitionConfig(num_parts=2, algo="hdrf"))
    return {"root": root, "pairs": pairs}


def _fresh(imported: dict, tmp_path: Path) -> tuple[Path, Path]:
    """A copy of the input and of its output, the output's manifest pointing at the copy."""
    src = imported["root"]
    shutil.copytree(src / "in", tmp_path / "in")
    shutil.copytree(src / "out", tmp_path / "out")
    manifest = tmp_path / "out" / "manifest.json"
    manifest.write_text(manifest.read_text().replace(str(src / "in"), str(tmp_path / "in")))
    return tmp_path / "in", tmp_path / "out"


def _id_map(input_dir: Path) -> dict:
    table = pq.read_table(input_dir / "id_map.parquet")
    return dict(zip(table.column("original_id").to_pylist(), table.column("global_nid").to_pylist()))


def _clean(out: Path) -> None:
    assert not (out / STAGING_NAME).exists() and not (out / LOCK_NAME).exists()
    assert not (out / TEXT_WORK_NAME).exists()
    report = verify_output(out)
    assert report.ok, report.summary()


def test_a_tsv_in_original_ids_is_mapped_and_its_new_ids_appended_to_the_id_map(imported, tmp_path):
    input_dir, out = _fresh(imported, tmp_path)
    before = _id_map(input_dir)
    old_edges = edge_multiset(out)
    new = [("user-03", "user-07"), ("user-zz", "user-01"), ("user-aa", "user-zz"), ("user-05", "user-aa")]
    manifest = ingest(out, _edge_list(tmp_path / "new.tsv", new))
    assert manifest["generation"] == 2 and manifest["num_nodes"] == 62
    # The new ids are numbered from 60 in sorted order of their original ids, and appended.
    grown = _id_map(input_dir)
    assert grown == {**before, "user-aa": 60, "user-zz": 61}
    expected = Counter(old_edges)
    expected.update(tuple(sorted((grown[a], grown[b]))) if manifest.get("undirected") else (grown[a], grown[b])
                    for a, b in new)
    assert edge_multiset(out) == expected
    record = manifest["increments"][-1]
    assert record["edge_list"]["files"] == [str(tmp_path / "new.tsv")] and record["new_nodes"] == 2
    assert record["edge_list"]["id_map"]["rows_below"] == 62
    # The converted shards are kept in the input, where verify reads them again.
    assert record["edges"][0]["url"].startswith(str(input_dir / "ingested" / "edges-"))
    assert record["nodes"][0]["url"].startswith(str(input_dir / "ingested" / "nodes-"))
    _clean(out)


def test_the_same_edge_list_again_changes_nothing_and_a_second_one_numbers_on(imported, tmp_path, caplog):
    input_dir, out = _fresh(imported, tmp_path)
    first = _edge_list(tmp_path / "a.tsv", [("user-00", "new-b"), ("new-a", "user-02")])
    ingest(out, first)
    before = (out / "manifest.json").read_bytes(), (input_dir / "id_map.parquet").read_bytes()
    assert ingest(out, first)["generation"] == 2
    assert ((out / "manifest.json").read_bytes(), (input_dir / "id_map.parquet").read_bytes()) == before
    assert "already ingested in generation 2" in caplog.text
    manifest = ingest(out, _edge_list(tmp_path / "b.tsv", [("new-a", "new-c"), ("new-c", "user-09")]))
    assert manifest["generation"] == 3 and manifest["num_nodes"] == 63
    assert _id_map(input_dir)["new-c"] == 62 and _id_map(input_dir)["new-a"] == 60
    _clean(out)


def test_map_rows_of_an_ingest_that_did_not_commit_are_numbered_again(imported, tmp_path):
    input_dir, out = _fresh(imported, tmp_path)
    table = pq.read_table(input_dir / "id_map.parquet")
    left = pa.table({"global_nid": pa.array([60, 61], pa.int64()), "original_id": ["gone-1", "gone-2"]})
    pq.write_table(pa.concat_tables([table, left.cast(table.schema)]), input_dir / "id_map.parquet")
    manifest = ingest(out, _edge_list(tmp_path / "new.tsv", [("user-01", "fresh")]))
    grown = _id_map(input_dir)
    assert grown["fresh"] == 60 and "gone-1" not in grown and manifest["num_nodes"] == 61
    _clean(out)


def _rows_of(input_dir: Path, owner: Path) -> dict:
    """The map's rows numbered for the output ``owner``: original id -> node id."""
    table = pq.read_table(input_dir / "id_map.parquet").to_pylist()
    return {r["original_id"]: r["global_nid"] for r in table if r.get("output") == str(owner.resolve())}


def test_two_outputs_of_one_input_keep_their_own_new_ids_in_the_map(imported, tmp_path):
    input_dir, out = _fresh(imported, tmp_path)
    other = tmp_path / "other"
    shutil.copytree(out, other)
    ingest(out, _edge_list(tmp_path / "a.tsv", [("user-01", "mine")]))
    ingest(other, _edge_list(tmp_path / "b.tsv", [("user-01", "theirs")]))  # numbers 60 for itself
    assert _rows_of(input_dir, out) == {"mine": 60} and _rows_of(input_dir, other) == {"theirs": 60}
    # Each output reads its own rows: "mine" is out's node 60, a known node, not a new one.
    manifest = ingest(out, _edge_list(tmp_path / "c.tsv", [("mine", "user-02"), ("mine", "new-c")]))
    assert manifest["num_nodes"] == 62 and _rows_of(input_dir, out) == {"mine": 60, "new-c": 61}
    assert _rows_of(input_dir, other) == {"theirs": 60}
    _clean(out)
    _clean(other)


def test_a_map_whose_rows_of_this_output_changed_is_refused(imported, tmp_path):
    input_dir, out = _fresh(imported, tmp_path)
    ingest(out, _edge_list(tmp_path / "a.tsv", [("user-01", "mine")]))
    table = pq.read_table(input_dir / "id_map.parquet")
    original = ["changed" if v == "mine" else v for v in table.column("original_id").to_pylist()]
    pq.write_table(table.set_column(1, "original_id", pa.array(original)), input_dir / "id_map.parquet")
    before = (out / "manifest.json").read_bytes()
    with pytest.raises(InputError) as info:
        ingest(out, _edge_list(tmp_path / "c.tsv", [("mine", "user-02")]))
    message = str(info.value)
    assert f"id map {input_dir / 'id_map.parquet'}" in message and "other rows" in message
    assert "changed since its last ingest" in message
    assert (out / "manifest.json").read_bytes() == before
    _clean(out)


def race_ingests(imported: dict, tmp_path: Path, rounds: int) -> None:
    """Each round: two ``asepr ingest`` processes, into two outputs of one input, started
    together; each output's new ids must be in the map afterwards, and each output verify."""
    env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    for r in range(rounds):
        base = tmp_path / f"round-{r}"
        input_dir, out = _fresh(imported, base)
        other = base / "other"
        shutil.copytree(out, other)
        mine = _edge_list(base / "a.tsv", [("user-01", f"a-{r}-1"), (f"a-{r}-2", "user-03")])
        theirs = _edge_list(base / "b.tsv", [("user-02", f"b-{r}-1"), (f"b-{r}-1", f"b-{r}-2"), ("user-04", "b-x")])
        procs = [subprocess.Popen([sys.executable, "-m", "asepr", "ingest", str(o), str(e), "-q"], cwd=REPO,
                                  env=env, stderr=subprocess.PIPE, text=True)
                 for o, e in ((out, mine), (other, theirs))]
        errors = [p.communicate(timeout=300)[1] for p in procs]
        assert [p.returncode for p in procs] == [0, 0], f"round {r}: {errors}"
        assert _rows_of(input_dir, out) == {f"a-{r}-1": 60, f"a-{r}-2": 61}, f"round {r}"
        assert _rows_of(input_dir, other) == {f"b-{r}-1": 60, f"b-{r}-2": 61, "b-x": 62}, f"round {r}"
        _clean(out)
        _clean(other)


def test_two_racing_ingests_into_two_outputs_of_one_input_keep_both_sides_ids(imported, tmp_path):
    race_ingests(imported, tmp_path, rounds=1)


@pytest.mark.slow
def test_two_racing_ingests_keep_both_sides_ids_50_times(imported, tmp_path):
    race_ingests(imported, tmp_path, rounds=50)


def test_an_input_without_an_id_map_takes_node_ids_and_new_ones_without_gaps(tmp_path):
    lines = [(i, (i + 1) % 40) for i in range(40)] + [(i, (i + 7) % 40) for i in range(40)]
    _edge_list(tmp_path / "graph.csv", lines, header="src\tdst")
    import_dataset("edgelist", tmp_path / "graph.csv", tmp_path / "in")
    assert not (tmp_path / "in" / "id_map.parquet").exists()
    out = tmp_path / "out"
    partition_to_store(tmp_path / "in", out, PartitionConfig(num_parts=2, algo="hdrf"))
    gap = tmp_path / "gap.csv"
    gap.write_text("src,dst\n3,40\n5,42\n")
    with pytest.raises(InputError) as info:
        ingest(out, gap)
    message = str(info.value)
    assert f"edge list {gap}, column 'dst', data row 2" in message
    assert "new nodes 40..41 without gaps" in message and "found id 42" in message
    assert read_manifest(out)["generation"] == 1
    ok = tmp_path / "ok.csv"
    ok.write_text("src,dst\n3,40\n41,40\n0,1\n")
    manifest = ingest(out, ok)
    assert manifest["num_nodes"] == 42 and manifest["num_edges"] == 83
    assert not (tmp_path / "in" / "id_map.parquet").exists()
    _clean(out)


def test_text_edges_with_node_shards_or_ids_of_the_wrong_kind_are_refused(imported, tmp_path):
    input_dir, out = _fresh(imported, tmp_path)
    before = (out / "manifest.json").read_bytes()
    new = _edge_list(tmp_path / "new.tsv", [("user-01", "user-02")])
    with pytest.raises(InputError, match="option --nodes"):
        ingest(out, new, tmp_path / "nodes")
    empty = tmp_path / "empty.tsv"
    empty.write_text("src\tdst\nuser-01\t\n")
    with pytest.raises(InputError) as info:
        ingest(out, empty)
    assert f"edge list {empty}, column 'dst', data row 1" in str(info.value)
    assert (out / "manifest.json").read_bytes() == before
    _clean(out)


def test_the_cli_ingests_an_edge_list_without_a_traceback(imported, tmp_path, capsys):
    from asepr.workflows.cli import main

    input_dir, out = _fresh(imported, tmp_path)
    new = _edge_list(tmp_path / "new.tsv", [("user-04", "cli-new")])
    assert main(["ingest", str(out), str(new), "--no-progress"]) == 0
    assert read_manifest(out)["num_nodes"] == 61 and _id_map(input_dir)["cli-new"] == 60
    gz = tmp_path / "mixed"
    gz.mkdir()
    shutil.copy(new, gz / "a.tsv")
    pq.write_table(pa.table({"src": [0], "dst": [1]}), gz / "b.tsv")
    assert main(["ingest", str(out), str(gz), "--no-progress"]) == 1
    err = capsys.readouterr().err
    assert "either Parquet shards or text edge lists" in err and "Traceback" not in err


def test_a_header_line_repeated_as_a_data_line_is_refused_naming_the_line(imported, tmp_path, capsys):
    from asepr.workflows.cli import main

    input_dir, out = _fresh(imported, tmp_path)
    before = (out / "manifest.json").read_bytes(), (input_dir / "id_map.parquet").read_bytes()
    twice = tmp_path / "x.tsv"
    twice.write_text("src\tdst\nsrc\tdst\nuser-01\tuser-02\n")
    assert main(["ingest", str(out), str(twice), "-q"]) == 1
    err = capsys.readouterr().err
    assert f"edge list {twice}, line 2" in err and "delete line 2" in err and "Traceback" not in err
    assert ((out / "manifest.json").read_bytes(), (input_dir / "id_map.parquet").read_bytes()) == before
    _clean(out)


@pytest.mark.parametrize(("content", "found"), [
    (b"", "found an empty file (0 bytes)"),
    (b"\0" * 64, "found binary content (a NUL byte at offset 0)"),
])
def test_an_empty_or_binary_tsv_is_described_as_what_it_is(imported, tmp_path, capsys, content, found):
    from asepr.workflows.cli import main

    input_dir, out = _fresh(imported, tmp_path)
    edges = tmp_path / "new.tsv"
    edges.write_bytes(content)
    assert main(["ingest", str(out), str(edges), "-q"]) == 1
    err = capsys.readouterr().err
    assert f"edge list {edges}: expected a text edge list" in err and found in err, err
    assert "Parquet" not in err.split("Fix:")[0] and "Traceback" not in err
    assert read_manifest(out)["generation"] == 1


def test_a_headerless_gzip_edge_list_keeps_its_first_line_as_an_edge(imported, tmp_path):
    input_dir, out = _fresh(imported, tmp_path)
    new = tmp_path / "new.tsv.gz"
    with gzip.open(new, "wt") as fh:  # no header: the first line names two known ids
        fh.write("user-03\tuser-08\nuser-08\tgz-new\n")
    before = read_manifest(out)["num_edges"]
    manifest = ingest(out, new)
    assert manifest["num_edges"] == before + 2 and manifest["num_nodes"] == 61
    assert _id_map(input_dir)["gz-new"] == 60
    _clean(out)


@pytest.mark.parametrize("stage", ["route", "swap", "manifest"])
def test_a_killed_text_ingest_is_completed_by_the_same_command(imported, tmp_path, monkeypatch, stage):
    input_dir, out = _fresh(imported, tmp_path)
    reference_in, reference = _fresh(imported, tmp_path / "reference")
    new = [("user-10", "k-2"), ("k-1", "user-11"), ("k-2", "k-1")]
    expected = ingest(reference, _edge_list(tmp_path / "reference" / "new.tsv", new))
    crash_at(monkeypatch, stage)
    with pytest.raises(Crash):
        ingest(out, _edge_list(tmp_path / "new.tsv", new))
    monkeypatch.undo()
    assert read_manifest(out)["generation"] == 1 and verify_output(out).ok
    manifest = ingest(out, tmp_path / "new.tsv")
    assert manifest["num_nodes"] == 62 and _id_map(input_dir) == _id_map(reference_in)
    assert [e["checksum"] for e in manifest["partitions"]] == [e["checksum"] for e in expected["partitions"]]
    _clean(out)


@pytest.mark.parametrize("edit, needle", [
    (lambda g, o: (np.r_[g, [5]], o + ["user-new"]), "column 'global_nid'"),
    (lambda g, o: (np.r_[g, [59]], o + ["user-zz"]), "column 'global_nid'"),
    (lambda g, o: (g, o[:-1] + ["user-00"]), "column 'original_id'"),
])
def test_a_crafted_id_map_is_refused_naming_its_column(imported, tmp_path, edit, needle):
    input_dir, out = _fresh(imported, tmp_path)
    table = pq.read_table(input_dir / "id_map.parquet")
    gnid, original = edit(table.column("global_nid").to_numpy(), table.column("original_id").to_pylist())
    pq.write_table(pa.table({"global_nid": pa.array(gnid, pa.int64()), "original_id": original}),
                   input_dir / "id_map.parquet")
    before = (out / "manifest.json").read_bytes()
    with pytest.raises(SchemaError) as info:
        ingest(out, _edge_list(tmp_path / "new.tsv", [("user-01", "user-02")]))
    assert f"id map {input_dir / 'id_map.parquet'}, {needle}" in str(info.value) and "twice" in str(info.value)
    assert (out / "manifest.json").read_bytes() == before


def test_an_edge_list_for_an_output_whose_input_moved_names_the_input(imported, tmp_path):
    input_dir, out = _fresh(imported, tmp_path)
    input_dir.rename(tmp_path / "moved")
    with pytest.raises(InputError) as info:
        ingest(out, _edge_list(tmp_path / "new.tsv", [("user-01", "user-02")]))
    message = str(info.value)
    assert f"input {input_dir} (named by {out}/manifest.json)" in message and "put the input back" in message
    assert read_manifest(out)["generation"] == 1
