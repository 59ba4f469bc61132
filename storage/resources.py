"""Stage timing and peak-memory logging, shared by every layer."""

from __future__ import annotations

import contextlib
import logging
import os
import resource
import sys
import time
from collections.abc import Iterator

from asepr.storage.progress import track

__all__ = ["StageClock", "own_peak_rss_bytes", "peak_rss_bytes", "stage", "tune_malloc", "vm_hwm_bytes"]

#: glibc's ``mallopt`` parameters: the most malloc arenas, the size from which a block
#: gets its own mapping, and the free bytes at a heap's top that are kept, not returned.
_M_ARENA_MAX, _M_MMAP_THRESHOLD, _M_TRIM_THRESHOLD = -8, -3, -1
#: Blocks below this come from the heaps and are reused (glibc's largest threshold).
MMAP_THRESHOLD = 32 << 20
#: A heap keeps this much freed memory at its top for the next allocations.
TRIM_THRESHOLD = 128 << 20


def tune_malloc(arenas: int | None = None) -> bool:
    """Tune glibc's allocator for a run's pattern of large, short-lived arrays.

    - **Arenas capped** at ``arenas`` (default: the CPU count, at least 2). Each stage of
      a run starts fresh worker threads, and glibc gives threads their own arenas (up
      to 8 per core), each keeping what its threads freed: resident memory ratchets up
      stage by stage. With as many arenas as cores, a stage reuses what the previous one
      freed, so a run peaks lower and runs no slower (``docs/results/implementation-choices``).
    - **Batches reused, not remapped.** glibc maps every block above its (dynamic)
      threshold afresh and unmaps it when freed, so each decoded batch of a stream
      landed in new pages that the kernel zeroes on the first touch (zeroing pages is
      the largest symbol of a 20M-edge run's profile,
      ``docs/results/scale/perf-20m.txt``, most of it now the O(|V|) arrays). With
      the threshold fixed at :data:`MMAP_THRESHOLD` and :data:`TRIM_THRESHOLD` kept at
      a heap's top, the batches reuse the heap's pages.

    Call it before the process starts threads. Returns whether it took effect (glibc on
    Linux only).
    """
    if not sys.platform.startswith("linux"):
        return False
    try:
        import ctypes

        libc = ctypes.CDLL("libc.so.6")
    except OSError:
        return False
    count = arenas if arenas is not None else max(2, os.cpu_count() or 1)
    settings = ((_M_ARENA_MAX, count), (_M_MMAP_THRESHOLD, MMAP_THRESHOLD), (_M_TRIM_THRESHOLD, TRIM_THRESHOLD))
    return all([bool(libc.mallopt(option, int(value))) for option, value in settings])


def peak_rss_bytes() -> int:
    """Peak resident set size of this process so far, in bytes."""
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    # Linux reports KiB, macOS bytes.
    return int(peak if sys.platform == "darwin" else peak * 1024)


def vm_hwm_bytes(pid: int | str = "self") -> int | None:
    """The RSS high-water mark (``VmHWM`` of ``/proc/PID/status``) of process ``pid``, in
    bytes; None where there is no ``/proc`` or once the process has exited."""
    try:
        with open(f"/proc/{pid}/status") as fh:
            for line in fh:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


def own_peak_rss_bytes() -> int | None:
    """This process's own RSS high-water mark (:func:`vm_hwm_bytes`); None where there is
    no ``/proc``.

    Not ``getrusage``'s ``ru_maxrss``: Linux carries the parent's high-water mark across
    fork and exec into it, so every child a launcher starts would report at least the
    launcher's peak.
    """
    return vm_hwm_bytes("self")


@contextlib.contextmanager
def stage(name: str, logger: logging.Logger) -> Iterator[dict]:
    """Log how long a stage took and the process's peak RSS after it.

    Yields a dict the stage may fill with extra figures to log (``rows``, ...). The
    stage's progress is tracked meanwhile (:func:`asepr.storage.progress.track`): the loops
    inside it count into its bar, which a command line draws.
    """
    info: dict = {}
    start = time.perf_counter()
    with track(name):
        yield info
    elapsed = time.perf_counter() - start
    extra = "".join(f", {k}={v}" for k, v in info.items())
    logger.info(
        "stage %s: %.2f s, peak RSS %.0f MiB%s", name, elapsed, peak_rss_bytes() / 2**20, extra
    )


class StageClock:
    """Wall time per stage of a run, accumulated into a ``{stage: seconds}`` dict.

    Each :meth:`tick` charges the time since the previous tick (or since the clock
    was made) to the stage just finished.

    Parameters
    ----------
    timings
        The dict to accumulate into (a new one when None), e.g. a run's timings so far.
    """

    def __init__(self, timings: dict[str, float] | None = None):
        self.timings: dict[str, float] = {} if timings is None else timings
        self._last = time.perf_counter()

    def tick(self, name: str) -> None:
        """Charge the time since the last tick to stage ``name``."""
        now = time.perf_counter()
        self.add(name, now - self._last)
        self._last = now

    def add(self, name: str, seconds: float) -> None:
        """Charge ``seconds`` measured elsewhere (a kernel's own time) to ``name``."""
        self.timings[name] = self.timings.get(name, 0.0) + seconds
