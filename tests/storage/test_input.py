"""``open_input``: one listing of the shards and one read of ``meta.json`` per input."""

from __future__ import annotations

import json

import fsspec
import pyarrow.parquet as pq
import pytest

from asepr.storage import (
    InputDir,
    InputError,
    InputNotFoundError,
    open_input,
    open_parquet,
    read_meta,
    validate_input,
)
from asepr.storage.inputs import directory as input_module
from asepr.storage.integrity import validate as validate_module
from tests.storage.helpers import edge_table, write_input


def test_open_input_lists_shards_in_natural_order_and_reads_meta(tmp_path):
    write_input(tmp_path / "in", edge_shards=3, meta={"undirected": True, "num_nodes": 60})
    pq.write_table(edge_table([0], [1]), tmp_path / "in" / "edges" / "part-10.parquet")
    pq.write_table(edge_table([1], [2]), tmp_path / "in" / "edges" / "part-9.parquet")
    source = open_input(str(tmp_path / "in") + "/")
    assert source.url == str(tmp_path / "in")
    assert source.edges_url == f"{source.url}/edges" and source.nodes_url == f"{source.url}/nodes"
    names = [s.path.rsplit("/", 1)[1] for s in source.edge_shards]
    assert names == [f"part-0000{i}.parquet" for i in range(3)] + ["part-9.parquet", "part-10.parquet"]
    assert len(source.node_shards) == 2
    assert source.undirected is True and source.num_nodes == 60 and source.num_classes == 3
    assert open_input(source) is source


def test_an_input_without_meta_is_directed_and_uncounted(tmp_path):
    write_input(tmp_path / "in")
    source = open_input(tmp_path / "in")
    assert source.meta == {} and source.undirected is False
    assert source.num_nodes is None and source.num_classes is None


def test_open_input_over_fsspec(tmp_path):
    fs = fsspec.filesystem("memory")
    write_input(tmp_path / "in", meta={})
    for sub in ("edges", "nodes"):
        for path in sorted((tmp_path / "in" / sub).iterdir()):
            fs.pipe(f"/inp/{sub}/{path.name}", path.read_bytes())
    fs.pipe("/inp/meta.json", (tmp_path / "in" / "meta.json").read_bytes())
    source = open_input("memory://inp")
    assert len(source.edge_shards) == 3 and source.num_classes == 3
    assert open_parquet(source.edge_shards[0]).metadata.num_rows == 100
    assert validate_input(source).num_edges == 300


def test_missing_edges_directory_is_named(tmp_path):
    write_input(tmp_path / "in")
    (tmp_path / "in" / "edges").rename(tmp_path / "in" / "moved")
    with pytest.raises(InputNotFoundError, match="edge shards path .*edges"):
        open_input(tmp_path / "in")


def test_validate_input_reuses_an_opened_input(tmp_path, monkeypatch):
    write_input(tmp_path / "in", meta={"undirected": True})
    source = open_input(tmp_path / "in")

    def no_listing(*args, **kwargs):
        raise AssertionError("shards listed again")

    monkeypatch.setattr(input_module, "discover_shards", no_listing)
    monkeypatch.setattr(validate_module, "discover_shards", no_listing)
    monkeypatch.setattr(input_module, "read_meta", no_listing)
    monkeypatch.setattr(validate_module, "read_meta", no_listing)
    report = validate_input(source)
    assert report.num_edges == 300 and report.undirected is True and report.input == source.url
    with pytest.raises(InputError, match="not both"):
        validate_input(source, edges=tmp_path / "in" / "edges")


def test_validate_input_of_a_url_lists_and_reads_once(tmp_path, monkeypatch):
    write_input(tmp_path / "in", meta={})
    calls = {"list": 0, "meta": 0}
    list_shards, read = input_module.discover_shards, input_module.read_meta

    def counted_list(*args, **kwargs):
        calls["list"] += 1
        return list_shards(*args, **kwargs)

    def counted_read(*args, **kwargs):
        calls["meta"] += 1
        return read(*args, **kwargs)

    monkeypatch.setattr(input_module, "discover_shards", counted_list)
    monkeypatch.setattr(input_module, "read_meta", counted_read)
    validate_input(tmp_path / "in")
    assert calls == {"list": 2, "meta": 1}


@pytest.mark.parametrize("text, message", [
    ('{"undirected": "true"}', "field 'undirected': expected a JSON boolean"),
    ('{"num_nodes": 2708.5}', "field 'num_nodes': expected a non-negative JSON integer"),
    ('{"num_classes": false}', "field 'num_classes': expected a non-negative JSON integer"),
    ("[1, 2]", "expected a JSON object"),
    ("{not json", "expected a JSON object, found unreadable content"),
])
def test_read_meta_refuses_wrong_types(tmp_path, text, message):
    (tmp_path / "meta.json").write_text(text)
    with pytest.raises(InputError, match=message) as info:
        read_meta(tmp_path)
    assert str(tmp_path / "meta.json") in str(info.value)


def test_read_meta_keeps_unread_fields_and_nulls(tmp_path):
    meta = {"undirected": None, "num_classes": None, "num_nodes": 0, "split": {"kind": "none"}, "extra": "x"}
    (tmp_path / "meta.json").write_text(json.dumps(meta))
    assert read_meta(tmp_path) == meta
    assert read_meta(tmp_path / "absent") is None


def test_input_dir_is_frozen(tmp_path):
    write_input(tmp_path / "in")
    source = open_input(tmp_path / "in")
    assert isinstance(source, InputDir)
    with pytest.raises(AttributeError):
        source.url = "elsewhere"
