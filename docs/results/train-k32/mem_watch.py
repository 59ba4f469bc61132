"""Sample the machine's and a launch's memory every 2 s until the launch exits.

usage: python mem_watch.py PID [MIN_AVAILABLE_GIB]
  PID: the `asepr bench train` process (the leader of its own process group: commands.sh starts it with setsid).
Prints one line every 30 s and a summary at the end: the machine's lowest MemAvailable, and the
largest number of the launch's processes alive at once with their summed RSS and PSS (PSS counts a
page shared by n processes as 1/n in each, so its sum is what the processes hold together; the sum of
RSS counts the shared libraries once per process). If MemAvailable falls below MIN_AVAILABLE_GIB
(default 1.5), the launch's process group is stopped, so that the machine's other jobs are not
killed for memory, and the summary says so.
"""

from __future__ import annotations

import os
import signal
import sys
import time

GIB = 2**30


def _meminfo_available() -> int:
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError("no MemAvailable in /proc/meminfo")


def _descendants(root: int) -> list[int]:
    parent = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                with open(f"/proc/{name}/stat") as f:
                    parent[int(name)] = int(f.read().rsplit(")", 1)[1].split()[1])
            except OSError:
                pass
    found, frontier = [root], [root]
    while frontier:
        frontier = [p for p, pp in parent.items() if pp in frontier]
        found += frontier
    return [p for p in found if p in parent]


def _rss_pss(pid: int) -> tuple[int, int]:
    rss = pss = 0
    try:
        with open(f"/proc/{pid}/smaps_rollup") as f:
            for line in f:
                if line.startswith("Rss:"):
                    rss = int(line.split()[1]) * 1024
                elif line.startswith("Pss:"):
                    pss = int(line.split()[1]) * 1024
    except OSError:
        pass
    return rss, pss


def main(pid: int, floor_gib: float) -> None:
    start = time.time()
    low, peak, stopped, last = _meminfo_available(), (0, 0, 0, 0), False, 0.0
    print(f"MemAvailable at start {low / GIB:.2f} GiB", flush=True)
    while os.path.exists(f"/proc/{pid}"):
        avail = _meminfo_available()
        sizes = [_rss_pss(p) for p in _descendants(pid)]
        rss, pss = sum(s[0] for s in sizes), sum(s[1] for s in sizes)
        low = min(low, avail)
        if pss > peak[2]:
            peak = (len(sizes), rss, pss, max((s[0] for s in sizes), default=0))
        if time.time() - last >= 30:
            last = time.time()
            print(f"{time.time() - start:7.0f} s  processes {len(sizes):3d}  RSS sum {rss / GIB:6.2f} GiB  "
                  f"PSS sum {pss / GIB:6.2f} GiB  MemAvailable {avail / GIB:6.2f} GiB", flush=True)
        if avail < floor_gib * GIB and not stopped:
            print(f"MemAvailable {avail / GIB:.2f} GiB below {floor_gib} GiB: stopping the launch", flush=True)
            os.killpg(pid, signal.SIGTERM)
            stopped = True
        time.sleep(2)
    print(f"lowest MemAvailable {low / GIB:.2f} GiB; at the largest PSS sum: {peak[0]} processes, "
          f"RSS sum {peak[1] / GIB:.2f} GiB, PSS sum {peak[2] / GIB:.2f} GiB, largest RSS {peak[3] / 2**20:.0f} MiB"
          + ("; the launch was STOPPED for memory" if stopped else ""), flush=True)


if __name__ == "__main__":
    main(int(sys.argv[1]), float(sys.argv[2]) if len(sys.argv) > 2 else 1.5)
