"""A rank that loads its partition while ingests commit new generations.

A commit moves the changed stores of generation g aside and the new ones into place;
a load that opened a store of g just before the swap finds it moved or replaced. That
is no damage: the load starts again on the generation committed then. Three ingests
run one after the other while a second thread loads partitions again and again;
every load returns a graph of some committed generation and none reports damage.
"""

from __future__ import annotations

import shutil
import threading
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from asepr.pipeline import ingest, verify_output
from asepr.storage.errors import StoreError
from asepr.storage.partitions.manifest import read_manifest
from tests.security import increments
from asepr.training.graph.data import load_local_graph

LOADS = 100


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> dict:
    return increments.tiny_output(tmp_path_factory.mktemp("loads"))


def _random_edges(directory: Path, num_nodes: int, count: int, seed: int) -> Path:
    """``count`` edges among the existing nodes, in one shard."""
    rng = np.random.default_rng(seed)
    directory.mkdir(parents=True)
    src = rng.integers(0, num_nodes, count, dtype=np.int64)
    dst = (src + rng.integers(1, num_nodes, count, dtype=np.int64)) % num_nodes
    pq.write_table(pa.table({"src": src, "dst": dst}), directory / "part-00000.parquet")
    return directory


def test_loads_during_three_ingests_never_report_damage(tiny, tmp_path):
    out = tmp_path / "out"
    shutil.copytree(tiny["out"], out)
    num_nodes = int(read_manifest(out)["num_nodes"])
    increments_ = [_random_edges(tmp_path / f"inc{i}", num_nodes, 300, seed=i) for i in range(3)]
    done = threading.Event()
    failures: list[BaseException] = []

    def ingests() -> None:
        try:
            for edges in increments_:
                ingest(out, edges)
        except BaseException as exc:  # noqa: BLE001 - reported by the test
            failures.append(exc)
        finally:
            done.set()

    writer = threading.Thread(target=ingests)
    writer.start()
    generations = []
    errors: list[str] = []
    try:
        while len(generations) + len(errors) < LOADS or not done.is_set():
            try:
                graph = load_local_graph(out, [len(generations) % 2])
                generations.append(graph.generation)
            except StoreError as exc:
                errors.append(str(exc))
    finally:
        done.wait()
        writer.join()
    assert not failures, failures
    assert not errors, f"{len(errors)} of {len(errors) + len(generations)} loads failed: {errors[:3]}"
    assert set(generations) <= {1, 2, 3, 4} and generations[-1] == 4
    assert read_manifest(out)["generation"] == 4
    report = verify_output(out)
    assert report.ok, report.summary()
