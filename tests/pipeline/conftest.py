"""Fixtures shared by the pipeline tests."""

from __future__ import annotations

import pytest

from asepr.pipeline.inputs.synth import SynthConfig, generate

#: The graph of the ``inputs`` fixture.
SYNTH_NODES, SYNTH_EDGES = 400, 3000


@pytest.fixture(scope="module")
def client():
    """A real 2-process Dask cluster, to check results match the threaded scheduler."""
    distributed = pytest.importorskip("distributed")
    with (
        distributed.LocalCluster(
            n_workers=2, processes=True, threads_per_worker=1, dashboard_address=None
        ) as cluster,
        distributed.Client(cluster) as c,
    ):
        yield c


@pytest.fixture(scope="module")
def inputs(tmp_path_factory):
    """The same synthetic graph with 1 and with 8 edge shards (identical stream order)."""
    root = tmp_path_factory.mktemp("synth-inputs")
    config = SynthConfig(num_nodes=SYNTH_NODES, num_edges=SYNTH_EDGES, num_classes=4, dim=8, homophily=0.8, seed=7)
    out = {}
    for shards in (1, 8):
        out[shards] = root / f"s{shards}"
        generate(out[shards], config, shard_rows=-(-SYNTH_EDGES // shards))
    return out
