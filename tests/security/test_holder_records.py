"""What a lock or lease records about its holder, and what a refusal prints: the command's
name, never its arguments (which may carry credentials); crafted lease records are
refused as what they are, never a traceback."""

from __future__ import annotations

import json
import os
import socket
import stat
import sys
import time
import uuid

import fsspec
import psutil
import pytest

from asepr.storage.commit import holder
from asepr.storage.commit.lease import LEASE_NAME, Lease
from asepr.storage.commit.lock import OutputLock
from asepr.storage.errors import StoreError
from asepr.storage.partitions.manifest import LOCK_NAME

SECRET = "Zq7SuperSecretValue"
ARGV = ["/usr/bin/asepr", "partition", "in", "s3://b/out", "--storage-options", json.dumps({"secret": SECRET})]


@pytest.fixture
def command_line(monkeypatch):
    """A command line that carries a secret, as ``asepr partition`` would have it."""
    monkeypatch.setattr(sys, "argv", ARGV)
    monkeypatch.setattr(holder, "_NAME", None)


@pytest.fixture
def lease_url():
    url = f"memory://asepr-holder/{uuid.uuid4().hex}"
    yield url
    fs = fsspec.filesystem("memory")
    if fs.exists(url):
        fs.rm(url, recursive=True)


def _lease(url: str, **kw) -> Lease:
    return Lease(fsspec.filesystem("memory"), f"{url.removeprefix('memory://')}/{LEASE_NAME}",
                 f"{url}/{LEASE_NAME}", settle=0.02, **kw)


def test_the_lock_file_is_private_and_records_the_command_name_only(tmp_path, command_line):
    holder.set_command_name("asepr partition")
    with OutputLock(tmp_path):
        path = tmp_path / LOCK_NAME
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
        record = json.loads(path.read_text())
        assert record["command"] == "asepr partition" and SECRET not in path.read_text()
        with pytest.raises(StoreError) as refused:
            OutputLock(tmp_path).acquire()
    assert "command asepr partition" in str(refused.value) and SECRET not in str(refused.value)


def test_without_a_name_the_lock_records_the_program_not_its_arguments(tmp_path, command_line):
    with OutputLock(tmp_path):
        text = (tmp_path / LOCK_NAME).read_text()
    assert json.loads(text)["command"] == "asepr" and SECRET not in text


def test_a_world_readable_lock_left_by_an_older_writer_becomes_private(tmp_path, command_line):
    path = tmp_path / LOCK_NAME
    path.write_text(json.dumps({"pid": 2**22 + 7, "host": socket.gethostname(), "started": 1.0,
                                "command": " ".join(ARGV), "token": "old"}))
    path.chmod(0o644)
    with OutputLock(tmp_path):
        assert stat.S_IMODE(path.stat().st_mode) == 0o600 and SECRET not in path.read_text()


def test_a_refusal_shows_only_the_name_of_a_command_an_older_writer_recorded(tmp_path, lease_url):
    started = psutil.Process().create_time()
    (tmp_path / LOCK_NAME).write_text(json.dumps({"pid": os.getpid(), "host": socket.gethostname(),
                                                  "started": started, "command": " ".join(ARGV), "token": "x"}))
    with pytest.raises(StoreError) as refused:
        OutputLock(tmp_path).acquire()
    assert f"pid {os.getpid()}" in str(refused.value) and SECRET not in str(refused.value)
    live = {"token": "t" * 32, "host": "elsewhere", "pid": 7, "command": " ".join(ARGV), "renewed_at": time.time(),
            "ttl": 120}
    fsspec.filesystem("memory").pipe(f"{lease_url.removeprefix('memory://')}/{LEASE_NAME}", json.dumps(live).encode())
    with pytest.raises(StoreError) as refused:
        _lease(lease_url).acquire()
    assert "command: asepr partition in)" in str(refused.value) and SECRET not in str(refused.value)


def test_the_lease_records_the_command_name_only(lease_url, command_line):
    fs = fsspec.filesystem("memory")
    with _lease(lease_url) as lease:
        raw = fs.cat(lease.path)
        assert json.loads(raw)["command"] == "asepr" and SECRET.encode() not in raw
        with pytest.raises(StoreError) as refused:
            _lease(lease_url).acquire()
    assert SECRET not in str(refused.value)


@pytest.mark.parametrize("content", [
    json.dumps({"token": "t" * 32, "host": "h", "pid": 7, "command": "c", "renewed_at": time.time(),
                "ttl": "100000"}).encode(),
    json.dumps({"token": "t" * 32, "host": "h", "pid": "7", "command": "c", "renewed_at": time.time(),
                "ttl": 120}).encode(),
    json.dumps({"token": "t" * 32, "host": "h", "pid": 7, "command": "c", "renewed_at": "soon", "ttl": 120}).encode(),
    b"[" * 100_000 + b"]" * 100_000,
    b'{"token": "' + b"a" * 100_000 + b'"}',
], ids=["ttl-as-text", "pid-as-text", "renewed-as-text", "deeply-nested", "oversized"])
def test_a_crafted_lease_record_is_refused_naming_the_object(lease_url, content):
    fsspec.filesystem("memory").pipe(f"{lease_url.removeprefix('memory://')}/{LEASE_NAME}", content)
    with pytest.raises(StoreError) as refused:
        _lease(lease_url).acquire()
    assert f"{lease_url}/{LEASE_NAME}" in str(refused.value) and "delete" in str(refused.value)
