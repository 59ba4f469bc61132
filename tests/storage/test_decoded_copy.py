"""The decoded copy written while the validator reads: the same rows as the shards."""

from __future__ import annotations

from pathlib import Path

import pyarrow.parquet as pq
import pytest

from asepr.storage.inputs.decoded_copy import validate_and_copy
from tests.storage.helpers import edge_table, write_input


def test_decoded_copy_streams_the_same_batches_and_is_checked(tmp_path):
    # The decoded copy written beside the validator (asepr.storage.inputs.decoded) gives the edge stream exactly the
    # Parquet shards' rows, empty shards included; a truncated or missing copy is refused
    # by name, and an existing file is never overwritten.
    from asepr.pipeline.stream import iter_edge_batches
    from asepr.storage import StoreError
    from asepr.storage.inputs.decoded import decoded_shards
    from asepr.storage.inputs.directory import open_input

    write_input(tmp_path / "in")
    pq.write_table(edge_table([], []), tmp_path / "in" / "edges" / "part-00009.parquet")
    source = open_input(tmp_path / "in")
    (tmp_path / "copy").mkdir()
    report = validate_and_copy(source, tmp_path / "copy")
    rows = [info.rows for info in report.edge_shards]
    shards = decoded_shards(source.edge_shards, rows, tmp_path / "copy", report.num_nodes)
    for batch_rows in (7, 1 << 20):
        plain = [(b.shard_index, b.row0, b.position, b.src.tolist(), b.dst.tolist())
                 for b in iter_edge_batches(source.edge_shards, batch_rows)]
        copied = [(b.shard_index, b.row0, b.position, b.src.tolist(), b.dst.tolist())
                  for b in iter_edge_batches(shards, batch_rows)]
        assert copied == plain and sum(len(b[3]) for b in plain) == report.num_edges
    src_path = Path(shards[0].decoded[0])
    assert src_path.stat().st_size == rows[0] * 4  # int32 ids while N fits
    src_path.write_bytes(src_path.read_bytes()[:-4])
    with pytest.raises(StoreError, match=rf"{src_path.name}.*{rows[0] * 4:,} bytes"):
        decoded_shards(source.edge_shards, rows, tmp_path / "copy", report.num_nodes)
    with pytest.raises(FileExistsError):
        validate_and_copy(source, tmp_path / "copy")
