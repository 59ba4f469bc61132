"""The per-pass costs behind the speed changes of 2026-12-01, in CPU seconds.

Usage: python docs/results/implementation-choices/micro.py INPUT > docs/results/implementation-choices/micro.md
INPUT: an `asepr synth` input (the 20M-edge one of bench scale). CPU time of this process
(time.process_time), so a loaded machine inflates the figures less than wall time;
each figure is the best of 3.
"""

from __future__ import annotations

import os
import sys
import tempfile
import time

import numpy as np

from asepr.pipeline.stream import iter_edge_batches
from asepr.storage.inputs.decoded import decoded_shards
from asepr.storage.inputs.decoded_copy import validate_and_copy
from asepr.storage.inputs.directory import open_input


def best(fn, repeat: int = 3) -> float:
    times = []
    for _ in range(repeat):
        start = time.process_time()
        fn()
        times.append(time.process_time() - start)
    return min(times)


def main(path: str) -> None:
    source = open_input(path)
    rows = []
    with tempfile.TemporaryDirectory(dir=os.path.dirname(os.path.abspath(path))) as tmp:
        report = validate_and_copy(source, tmp, check_duplicates=False)
        copy = decoded_shards(source.edge_shards, [i.rows for i in report.edge_shards], tmp, report.num_nodes)
        edges = report.num_edges
        for name, shards in (("Parquet", source.edge_shards), ("decoded copy", copy)):
            rows.append((f"one pass over {edges:,} edges, {name}",
                         best(lambda: [None for _ in iter_edge_batches(shards, 1 << 20, prefetch=0)])))
    rng = np.random.default_rng(0)
    for nodes in (2_000_000, 50_000_000):
        ids = rng.integers(0, nodes, 1 << 20)
        degree = np.zeros(nodes, dtype=np.int64)
        rows.append((f"degree count of a 1M-row batch, {nodes:,} nodes, bincount",
                     best(lambda: np.add(degree, np.bincount(ids, minlength=nodes), out=degree))))
        rows.append((f"degree count of a 1M-row batch, {nodes:,} nodes, np.add.at",
                     best(lambda: np.add.at(degree, ids, 1))))
    part = rng.integers(0, 16, 1 << 20)
    for dtype in (np.int64, np.int16):
        key = part.astype(dtype)
        rows.append((f"stable argsort of 1M partition ids (k = 16) as {np.dtype(dtype).name}",
                     best(lambda: np.argsort(key, kind="stable"))))
    print(f"`python docs/results/implementation-choices/micro.py {path}`, {time.strftime('%Y-%m-%d %H:%M')}; "
          "CPU seconds, best of 3.\n")
    print("| measurement | CPU s |\n|---|---|")
    for name, seconds in rows:
        print(f"| {name} | {seconds:.3f} |")


if __name__ == "__main__":
    main(sys.argv[1])
