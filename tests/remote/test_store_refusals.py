"""A store that refuses the credentials, a client that has none, an endpoint that does not
answer: ``verify`` and ``ingest`` on a remote output say so in one line, naming the URL,
and never advise a step that rewrites a good output."""

from __future__ import annotations

import json

import pytest

from asepr.pipeline.config import PartitionConfig
from asepr.pipeline.partition_run import partition_to_store
from asepr.storage.partitions.manifest import read_manifest
from tests.pipeline.test_write import make_input
from tests.remote.s3server import free_port
from asepr.workflows.cli import main


@pytest.fixture(scope="module")
def committed(s3_server, tmp_path_factory):
    """A committed output on the rclone server, and Parquet shards to ingest."""
    root = tmp_path_factory.mktemp("refusals")
    make_input(root / "in", edge_shards=1, num_nodes=200, num_edges=600)
    url, options = s3_server.bucket()
    partition_to_store(root / "in", f"{url}/out", PartitionConfig(num_parts=2, algo="hash"), storage_options=options)
    return f"{url}/out", options, root / "in" / "edges"


@pytest.fixture
def no_client_credentials(monkeypatch, tmp_path):
    """No credentials in the environment or the client's files (and no instance metadata)."""
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")


def _options(options: dict, case: str) -> dict:
    if case == "wrong secret":
        return {**options, "secret": "wrongwrong01"}
    if case == "no credentials":
        return {k: v for k, v in options.items() if k not in ("key", "secret")}
    return {**options, "client_kwargs": {"endpoint_url": f"http://127.0.0.1:{free_port()}"},
            "config_kwargs": {"retries": {"max_attempts": 1}, "connect_timeout": 2}}


@pytest.mark.parametrize(("case", "found"), [
    ("wrong secret", "found credentials that the store refused (HTTP 403"),
    ("no credentials", "found no credentials: none were given and the client found none"),
    ("dead endpoint", "found EndpointConnectionError: Could not connect to the endpoint URL"),
])
@pytest.mark.parametrize("command", ["verify", "ingest"])
def test_a_refused_or_unanswered_request_is_one_line_naming_the_url(committed, no_client_credentials, capsys,
                                                                    case, found, command):
    out, options, edges = committed
    flags = ["--storage-options", json.dumps(_options(options, case))]
    args = ["verify", out, *flags] if command == "verify" else ["ingest", out, str(edges), *flags]
    assert main(args) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"asepr {command}: error: {out} (reading): ") and found in err, err
    assert err.count("\n") == 1 and "Traceback" not in err and "--overwrite" not in err
    if case != "dead endpoint":
        assert "check the key and secret" in err and "nothing was changed" in err
    assert read_manifest(out, storage_options=options)["generation"] == 1  # nothing was committed
