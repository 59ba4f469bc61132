"""A committed output on a real S3-compatible server: read by the library, the CLI and a trainer."""

from __future__ import annotations

import s3fs


def test_server_is_an_s3_store(s3_bucket, s3_server):
    url, options = s3_bucket
    fs = s3fs.S3FileSystem(**options)
    fs.pipe(f"{url}/a/b.bin", b"abc")
    assert fs.cat(f"{url}/a/b.bin") == b"abc"
    assert (s3_server.root / url.removeprefix("s3://") / "a" / "b.bin").read_bytes() == b"abc"
