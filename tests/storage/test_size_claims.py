"""Counts read from a file are claims, checked before anything is sized by them: an
``.npy`` header, OGB's node count, a label, ``meta.json``'s class count and feature width.
Each crafted claim of 10^12 is refused naming the file and the claim, never a MemoryError."""

from __future__ import annotations

import gzip
import io
import json
import zipfile
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from asepr.storage.errors import InputError
from asepr.storage.importers import import_dataset
from asepr.storage.integrity.validate import validate_input as validate
from tests.pipeline.test_write import make_input
from asepr.workflows.demo import bundled_cora

CLAIM = 10**12


def _npz_with_claim(src: Path, dest: Path, member: str, shape: tuple[int, ...]) -> None:
    """A copy of the archive ``src`` whose ``member`` header claims ``shape`` (its data unchanged)."""
    with zipfile.ZipFile(src) as original, zipfile.ZipFile(dest, "w", zipfile.ZIP_DEFLATED) as crafted:
        for name in original.namelist():
            data = original.read(name)
            if name == member:
                fh = io.BytesIO(data)
                assert np.lib.format.read_magic(fh) == (1, 0)
                _, fortran, dtype = np.lib.format.read_array_header_1_0(fh)
                payload = data[fh.tell():]
                header = io.BytesIO()
                np.lib.format.write_array_header_1_0(header, {"descr": np.lib.format.dtype_to_descr(dtype),
                                                              "fortran_order": fortran, "shape": shape})
                data = header.getvalue() + payload  # the magic string and the new header
            crafted.writestr(name, data)


def test_an_npz_header_claiming_more_than_its_member_holds_is_refused(tmp_path):
    crafted = tmp_path / "crafted.npz"
    _npz_with_claim(bundled_cora(), crafted, "adj_data.npy", (CLAIM,))
    with pytest.raises(InputError) as refused:
        import_dataset("gnn-npz", crafted, tmp_path / "in")
    message = str(refused.value)
    assert f"file {crafted}, array 'adj_data'" in message and f"shape ({CLAIM},)" in message
    assert "that the file can hold" in message and "TiB" in message
    assert not (tmp_path / "in").exists()


def test_an_ogb_node_count_beyond_memory_is_refused_naming_the_file(tmp_path):
    pytest.importorskip("ogb.nodeproppred", reason="needs the ogb package (asepr[test] has it)")
    from tests.storage.test_ogb import ogbn_arxiv_like

    folder = ogbn_arxiv_like(tmp_path)["folder"]
    with gzip.open(folder / "raw" / "num-node-list.csv.gz", "wt") as fh:
        fh.write(f"{CLAIM}\n")
    with pytest.raises(InputError) as refused:
        import_dataset("ogb", folder, tmp_path / "in")
    message = str(refused.value)
    assert f"file {folder / 'raw' / 'num-node-list.csv.gz'}: expected a node count whose arrays fit" in message
    assert f"found {CLAIM:,}" in message


@pytest.fixture
def small_input(tmp_path) -> Path:
    root = tmp_path / "in"
    make_input(root, edge_shards=1, num_nodes=120, num_edges=400)
    return root


def _edit_meta(root: Path, **changes) -> None:
    meta = json.loads((root / "meta.json").read_text())
    for key, value in changes.items():
        if value is None:
            meta.pop(key, None)
        else:
            meta[key] = value
    (root / "meta.json").write_text(json.dumps(meta))


def test_a_label_of_ten_to_the_twelve_is_refused_naming_the_column(small_input):
    _edit_meta(small_input, num_classes=None)
    shard = min((small_input / "nodes").glob("*.parquet"))
    table = pq.read_table(shard)
    labels = table.column("label").to_numpy().copy()
    labels[5] = CLAIM
    pq.write_table(table.set_column(table.schema.get_field_index("label"), "label", pa.array(labels)), shard)
    with pytest.raises(InputError) as refused:
        validate(small_input)
    message = str(refused.value)
    assert f"file {shard}, column 'label'" in message and f"found {CLAIM + 1:,}" in message


@pytest.mark.parametrize(("key", "value", "expected"), [
    ("num_classes", CLAIM, "expected a class count whose arrays fit"),
    ("feat_dim", CLAIM, "expected the feature width of the node shards (6), found 1,000,000,000,000"),
])
def test_a_crafted_meta_json_claim_is_refused_naming_the_key(small_input, key, value, expected):
    _edit_meta(small_input, **{key: value})
    with pytest.raises(InputError) as refused:
        validate(small_input)
    assert f"meta.json of {small_input}, key '{key}': {expected}" in str(refused.value)


def test_a_meta_json_whose_claims_hold_validates(small_input):
    _edit_meta(small_input, feat_dim=6)
    assert validate(small_input).feat_dim == 6
