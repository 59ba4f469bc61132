"""Fixtures shared by the pipeline tests."""

from __future__ import annotations

import pytest


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
