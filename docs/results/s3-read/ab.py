"""One partition on the server read with its arrays one after another and with the
reads of all its arrays in flight together, alternating, best of ROUNDS each.

    python docs/results/s3-read/ab.py URL PART STORAGE_OPTIONS_JSON [ROUNDS [SERVER_PID [LOCAL_OUT]]] > ab.md

Both are ``open_partition(URL, PART).to_numpy()``; the first sets the store's
``read_workers`` to 1 (as a local store reads), the second keeps the object-store default.
Beside the wall time of the best load, the CPU seconds of this process (every thread,
user and system) and, given its pid, of the server process, per load (median); given
the same output on the local disk, its loads (page cache warm) alternate with them.
"""

import dataclasses
import json
import os
import statistics
import sys
import time

from asepr.storage.partitions.output_stores import open_partition

url, part, options = sys.argv[1], int(sys.argv[2]), json.loads(sys.argv[3])
rounds = int(sys.argv[4]) if len(sys.argv) > 4 else 3
server = int(sys.argv[5]) if len(sys.argv) > 5 else None
local = sys.argv[6] if len(sys.argv) > 6 else None


def server_cpu() -> float:
    if server is None:
        return float("nan")
    fields = open(f"/proc/{server}/stat").read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


open_partition(url, part, storage_options=options).to_numpy()  # the client's first connections, not timed
default = open_partition(url, part, storage_options=options).read_workers
seen: dict[object, list[tuple[float, float, float]]] = {1: [], default: []} | ({"local": []} if local else {})
raw = 0
for _ in range(rounds):
    for workers in seen:
        c0, s0, t0 = time.process_time(), server_cpu(), time.perf_counter()
        if workers == "local":
            arrays = open_partition(local, part).to_numpy()
            seen[workers].append((time.perf_counter() - t0, time.process_time() - c0, server_cpu() - s0))
            del arrays
            continue
        store = open_partition(url, part, storage_options=options)
        arrays = dataclasses.replace(store, read_workers=workers).to_numpy()
        seen[workers].append((time.perf_counter() - t0, time.process_time() - c0, server_cpu() - s0))
        raw = sum(a.nbytes for a in arrays.values())
        del arrays
print(f"Partition {part} of {url}, {raw / 2**20:.1f} MiB raw; {rounds} loads per row, alternating.\n")
print("| read | best seconds | mb_per_s | client CPU s | server CPU s |\n|---|---:|---:|---:|---:|")
for workers, loads in seen.items():
    best = min(t for t, _, _ in loads)
    name = f"local {local}" if workers == "local" else f"{url}, read_workers {workers}"
    print(f"| {name} | {best:.3f} | {raw / 1e6 / best:.1f} | {statistics.median(c for _, c, _ in loads):.2f} | "
          f"{statistics.median(s for _, _, s in loads):.2f} |")
