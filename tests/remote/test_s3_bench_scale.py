"""asepr bench scale --out-url: the same input partitioned locally and into a real
S3-compatible server, side by side in one run."""

from __future__ import annotations

import json

import pyarrow.parquet as pq
import pytest

from asepr.storage.errors import InputError
from asepr.storage.locations.location import tree_exists
from asepr.workflows.bench.scale import COLUMNS, bench_scale


def test_bench_scale_partitions_locally_and_into_the_store_side_by_side(tmp_path, s3_bucket):
    url, options = s3_bucket
    rows = bench_scale(tmp_path / "out", [20_000], k=2, dim=8, classes=4, out_url=f"{url}/scale",
                       storage_options=options, echo=lambda *_: None)
    local, remote = rows
    assert set(COLUMNS) - {"verify_s", "verify_edges_per_s", "verify_peak_gib", "verify_cpu_s", "remote_ratio",
                         "same_stores"} \
        <= set(local)
    assert (local["target"], remote["target"]) == ("local", "s3")
    assert remote["remote_ratio"] == pytest.approx(remote["wall_s"] / local["wall_s"])
    # The same input and algorithm: the same partitioning, in stores of the same size.
    assert remote["rf"] == local["rf"] and remote["disk_gib"] == pytest.approx(local["disk_gib"], rel=0.05)
    assert remote["cpu_s"] > 0 and remote["local_disk_peak_gib"] >= 0
    assert "assignment kernel" in json.loads(remote["stage_seconds"])
    assert not tree_exists(f"{url}/scale/out-e20000-k2", options)  # removed without --keep
    assert not list((tmp_path / "out" / "work").glob("scratch-*"))  # the scratch is gone too
    table = pq.read_table(tmp_path / "out" / "scale.parquet").to_pylist()  # every row's columns, the first's too
    assert table[1]["remote_ratio"] == pytest.approx(remote["remote_ratio"]) and table[0]["remote_ratio"] is None
    text = (tmp_path / "out" / "scale.md").read_text()
    assert "| s3 |" in text and "| local |" in text and "remote_ratio" in text


def test_an_out_url_without_a_scheme_is_refused_before_anything_runs(tmp_path):
    with pytest.raises(InputError, match="--out-url") as info:
        bench_scale(tmp_path / "out", [20_000], k=2, out_url=str(tmp_path / "elsewhere"), echo=lambda *_: None)
    assert "s3://" in str(info.value) and not (tmp_path / "out").exists()
