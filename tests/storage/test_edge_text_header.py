"""A text edge list whose header line appears again as a data line is refused, naming
the file and the line, rather than read as an edge between nodes named after the columns."""

from __future__ import annotations

import pytest

from asepr.storage.errors import InputError
from asepr.storage.importers import import_dataset


@pytest.mark.parametrize("text, line", [
    ("src\tdst\nsrc\tdst\nu1\tu2\n", 2),
    ("# a comment\nsrc,dst\nu0,u1\n\nsrc,dst\nu1,u2\n", 5),
    ("source target\nu0 u1\nsource   target\n", 3),
])
def test_a_repeated_header_line_is_refused_naming_the_line(tmp_path, text, line):
    edges = tmp_path / "x.tsv"
    edges.write_text(text)
    with pytest.raises(InputError) as info:
        import_dataset("edgelist", edges, tmp_path / "in")
    message = str(info.value)
    assert f"edge list {edges}, line {line}" in message and "header" in message
    assert f"delete line {line}" in message
    assert not (tmp_path / "in").exists()


def test_a_renamed_header_keeps_nodes_named_like_the_old_columns(tmp_path):
    edges = tmp_path / "x.tsv"
    edges.write_text("from\tto\nsrc\tdst\nu1\tu2\n")
    import_dataset("edgelist", edges, tmp_path / "in")
    assert (tmp_path / "in" / "id_map.parquet").exists()
