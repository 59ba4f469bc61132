"""Stage timing and peak-memory logging, shared by every layer."""

from __future__ import annotations

import contextlib
import logging
import resource
import sys
import time
from collections.abc import Iterator

__all__ = ["peak_rss_bytes", "stage"]


def peak_rss_bytes() -> int:
    """Peak resident set size of this process so far, in bytes."""
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    # Linux reports KiB, macOS bytes.
    return int(peak if sys.platform == "darwin" else peak * 1024)


@contextlib.contextmanager
def stage(name: str, logger: logging.Logger) -> Iterator[dict]:
    """Log how long a stage took and the process's peak RSS after it.

    Yields a dict the stage may fill with extra figures to log (``rows``, ...).
    """
    info: dict = {}
    start = time.perf_counter()
    yield info
    elapsed = time.perf_counter() - start
    extra = "".join(f", {k}={v}" for k, v in info.items())
    logger.info(
        "stage %s: %.2f s, peak RSS %.0f MiB%s", name, elapsed, peak_rss_bytes() / 2**20, extra
    )
