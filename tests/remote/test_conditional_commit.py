"""The commit of a remote output fenced by the store itself, where the store honours
conditional writes (moto's server), and by the lease alone where it does not (rclone's).

The case that matters: a writer that has read its lease back and is about to PUT its
manifest is stopped (a paused process, a long GC); its lease is taken over and another
writer commits. When the first one wakes, its PUT must not replace the newer commit.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest
import s3fs

from asepr.pipeline.config import PartitionConfig
from asepr.pipeline.partition_run import partition_to_store
from asepr.pipeline.verify import verify_output
from asepr.storage.commit.conditional import (
    PROBE_PREFIX,
    CommitConflict,
    conditional_writes,
    put_if_unchanged,
)
from asepr.storage.commit.lease import LEASE_NAME
from asepr.storage.partitions.manifest import read_manifest
from tests.pipeline.test_write import make_input
from tests.workflows.helpers import REPO


@pytest.fixture(scope="module")
def graph(tmp_path_factory):
    root = tmp_path_factory.mktemp("cas-in") / "in"
    make_input(root, edge_shards=2, num_nodes=300, num_edges=1500)
    return root


def _fs(options) -> s3fs.S3FileSystem:
    return s3fs.S3FileSystem(**options, skip_instance_cache=True)


def test_the_probe_finds_conditional_writes_on_moto_and_not_on_rclone(moto_server, s3_server):
    for server, honoured in ((moto_server, True), (s3_server, False)):
        url, options = server.bucket()
        fs = _fs(options)
        assert conditional_writes(fs, f"{url.removeprefix('s3://')}/out") is honoured
        assert not [p for p in fs.find(url) if PROBE_PREFIX in p]  # the probe object is gone


def test_a_stale_etag_or_a_create_over_an_existing_manifest_is_refused_by_moto(moto_server, graph):
    url, options = moto_server.bucket()
    out = f"{url}/out"
    manifest = partition_to_store(graph, out, PartitionConfig(num_parts=2, algo="hash"), storage_options=options)
    fs = _fs(options)
    path = f"{out.removeprefix('s3://')}/manifest.json"
    etag = fs.info(path)["ETag"]
    with pytest.raises(CommitConflict, match="another writer committed"):
        put_if_unchanged(fs, path, b"{}", None, began="no manifest yet")
    with pytest.raises(CommitConflict):
        put_if_unchanged(fs, path, b"{}", '"0123456789abcdef0123456789abcdef"', began="an older manifest")
    assert read_manifest(out, storage_options=options) == manifest
    assert fs.info(path, refresh=True)["ETag"] == etag


def _expire_lease(options, out: str) -> None:
    """The stopped writer's lease, as it is once its TTL has run out: anyone may take it."""
    record = {"token": "e" * 32, "host": "elsewhere", "pid": 1, "command": "asepr partition",
              "renewed_at": time.time() - 3600, "ttl": 120}
    _fs(options).pipe(f"{out.removeprefix('s3://')}/{LEASE_NAME}", json.dumps(record).encode())


@pytest.mark.slow  # a writer process, stopped and continued, and a second writer
@pytest.mark.parametrize(("server", "point", "refusal"), [
    ("moto_server", "commit-put", "the store refused the conditional write"),
    ("moto_server", "manifest", "this run lost its lease"),
    ("s3_server", "manifest", "this run lost its lease"),
])
def test_a_writer_paused_past_its_lease_does_not_overwrite_the_newer_commit(request, graph, tmp_path, server, point,
                                                                             refusal):
    """``commit-put``: stopped after its lease read-back, just before its PUT, which only
    the store's compare-and-swap can refuse; ``manifest``: stopped before the read-back,
    which the lease refuses (the guarantee where the store ignores conditional writes)."""
    url, options = request.getfixturevalue(server).bucket()
    out = f"{url}/out"
    first = partition_to_store(graph, out, PartitionConfig(num_parts=2, algo="hash"), storage_options=options)
    marker = tmp_path / "paused"
    env = dict(os.environ, ASEPR_FAILPOINTS=f"{point}=wait", ASEPR_FAILPOINT_MARKER=str(marker),
               PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    paused = subprocess.Popen(
        [sys.executable, "-m", "asepr", "partition", str(graph), out, "-k", "2", "--algo", "hash", "--overwrite",
         "--storage-options", json.dumps(options), "-q"], cwd=REPO, env=env, stderr=subprocess.PIPE, text=True)
    try:
        while not marker.exists():
            assert paused.poll() is None, paused.stderr.read()
            time.sleep(0.05)
        os.kill(paused.pid, signal.SIGSTOP)  # its heartbeat stops too: the lease runs out
        _expire_lease(options, out)
        newer = partition_to_store(graph, out, PartitionConfig(num_parts=3, algo="hash"), overwrite=True,
                                   storage_options=options)
        assert newer["generation"] == first["generation"] + 1
    finally:
        os.kill(paused.pid, signal.SIGCONT)
        marker.unlink(missing_ok=True)
    _, err = paused.communicate(timeout=300)
    assert paused.returncode == 1 and refusal in err and "did not commit" in err and "Traceback" not in err, err
    assert read_manifest(out, storage_options=options) == newer
    report = verify_output(out, input_url=graph, storage_options=options)
    assert report.ok, report.summary()
