"""Crafted inputs: mistyped ``meta.json`` fields and symlink loops.

Each is refused through the command line with a message naming the file and the field
(or the entry), never a traceback, and nothing is written.
"""

from __future__ import annotations

import json
import os

import pytest

from tests.storage.helpers import write_input
from asepr.workflows.cli import main


def _input_with_meta(root, **fields):
    write_input(root)
    (root / "meta.json").write_text(json.dumps({"name": "crafted", "num_classes": 3, **fields}))
    return root


MISTYPED = [
    ("undirected", "false", "a JSON boolean", '"false" (a string)'),
    ("undirected", 0, "a JSON boolean", "0 (an integer)"),
    ("num_nodes", "2708", "a non-negative JSON integer", '"2708" (a string)'),
    ("num_nodes", 60.0, "a non-negative JSON integer", "60.0 (a number"),
    ("num_nodes", True, "a non-negative JSON integer", "true (a boolean)"),
    ("num_edges", -1, "a non-negative JSON integer", "-1 (an integer)"),
    ("num_classes", "3", "a non-negative JSON integer", '"3" (a string)'),
    ("feat_dim", [5], "a non-negative JSON integer", "[5] (an array)"),
    ("name", 7, "a JSON string", "7 (an integer)"),
]


@pytest.mark.parametrize("field, value, expected, found", MISTYPED)
def test_validate_refuses_a_mistyped_meta_field(tmp_path, capsys, field, value, expected, found):
    root = _input_with_meta(tmp_path / "in", **{field: value})
    assert main(["validate", str(root)]) == 1
    err = capsys.readouterr().err
    assert f"file {root / 'meta.json'}, field '{field}'" in err
    assert f"expected {expected}" in err and f"found {found}" in err
    assert "Traceback" not in err


def test_partition_refuses_a_quoted_boolean_and_writes_nothing(tmp_path, capsys):
    root = _input_with_meta(tmp_path / "in", undirected="false")
    out = tmp_path / "out"
    assert main(["partition", str(root), str(out), "-k", "2", "--workers", "0", "--no-progress"]) == 1
    err = capsys.readouterr().err
    assert f"file {root / 'meta.json'}, field 'undirected'" in err and '"false" (a string)' in err
    assert not (out / "manifest.json").exists()


def test_json_booleans_counts_and_nulls_are_accepted(tmp_path, capsys):
    root = _input_with_meta(tmp_path / "in", undirected=False, num_nodes=60, num_edges=300,
                            feat_dim=5, num_classes=None)
    assert main(["validate", str(root), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["undirected"] is False and report["num_nodes"] == 60


@pytest.mark.parametrize("command", ["validate", "partition"])
def test_a_symlink_loop_among_the_edge_shards_is_named(tmp_path, capsys, command):
    root = tmp_path / "in"
    write_input(root)
    loop = root / "edges" / "part-00099.parquet"
    os.symlink(loop.name, loop)
    argv = [command, str(root)]
    if command == "partition":
        argv += [str(tmp_path / "out"), "-k", "2", "--workers", "0", "--no-progress"]
    assert main(argv) == 1
    err = capsys.readouterr().err
    assert f"entry {loop}" in err and "a symbolic link loop" in err
    assert "free space" not in err and "Traceback" not in err
    assert not (tmp_path / "out" / "manifest.json").exists()


def test_a_dangling_symlinked_shard_is_named(tmp_path, capsys):
    root = tmp_path / "in"
    write_input(root)
    link = root / "nodes" / "part-00099.parquet"
    os.symlink(tmp_path / "gone.parquet", link)
    assert main(["validate", str(root)]) == 1
    err = capsys.readouterr().err
    assert f"entry {link}" in err and "a broken symbolic link" in err


def test_shards_symlinked_from_outside_the_input_are_legal(tmp_path, capsys):
    write_input(tmp_path / "real")
    root = tmp_path / "in"
    (root / "edges").mkdir(parents=True)
    for shard in (tmp_path / "real" / "edges").iterdir():
        os.symlink(shard, root / "edges" / shard.name)
    os.symlink(tmp_path / "real" / "nodes", root / "nodes")
    assert main(["validate", str(root)]) == 0
    assert "300 in 3 shard(s)" in capsys.readouterr().out
