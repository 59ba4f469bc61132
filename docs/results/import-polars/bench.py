"""Side by side: the edge-list importer's CSV reader (pyarrow's streaming reader, as
``asepr.storage.importers`` configures it) against polars' streaming CSV reader (``scan_csv`` then
``collect_batches``; polars 2 has no other batched CSV reader).

Each reader runs in a fresh process and turns every block into ``int64`` numpy arrays
of ``src`` and ``dst`` (what the importer consumes); the process reports its wall time,
its CPU time (user + system, which other processes on a loaded machine change less than
the wall time) and peak resident memory.

    python docs/results/import-polars/bench.py --edges 20000000 --dir /tmp/asepr-polars

The file is tab separated with a two-line comment header (as SNAP publishes them).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

BLOCK = 1 << 24  # the importer's default block size (asepr.storage.importers.edgelist)


def generate(path: Path, edges: int, nodes: int, seed: int = 0) -> None:
    import numpy as np

    rng = np.random.default_rng(seed)
    with open(path, "w") as fh:
        fh.write("# synthetic directed graph\n# FromNodeId\tToNodeId\n")
        step = 2_000_000
        for lo in range(0, edges, step):
            n = min(step, edges - lo)
            src = rng.integers(0, nodes, n)
            dst = rng.integers(0, nodes, n)
            fh.write("\n".join(f"{a}\t{b}" for a, b in zip(src.tolist(), dst.tolist())))
            fh.write("\n")


def read_pyarrow(path: Path) -> int:
    import pyarrow as pa
    import pyarrow.csv as pacsv

    read = pacsv.ReadOptions(block_size=BLOCK, autogenerate_column_names=True, skip_rows=2)
    parse = pacsv.ParseOptions(delimiter="\t", ignore_empty_lines=True)
    convert = pacsv.ConvertOptions(include_columns=["f0", "f1"],
                                   column_types={"f0": pa.int64(), "f1": pa.int64()},
                                   null_values=[""], strings_can_be_null=True,
                                   quoted_strings_can_be_null=False)
    rows = 0
    with open(path, "rb") as fh:
        reader = pacsv.open_csv(fh, read_options=read, parse_options=parse, convert_options=convert)
        for batch in reader:
            src = batch.column(0).to_numpy()
            dst = batch.column(1).to_numpy()
            rows += len(src) + 0 * len(dst)
    return rows


def read_polars_streaming(path: Path) -> int:
    import polars as pl

    lazy = pl.scan_csv(path, has_header=False, separator="\t", comment_prefix="#",
                       schema={"src": pl.Int64, "dst": pl.Int64})
    rows = 0
    for frame in lazy.collect_batches(chunk_size=1 << 20):
        src = frame.to_series(0).to_numpy()
        dst = frame.to_series(1).to_numpy()
        rows += len(src) + 0 * len(dst)
    return rows


READERS = {"pyarrow": read_pyarrow, "polars-streaming": read_polars_streaming}


def child(reader: str, path: Path) -> None:
    start = time.perf_counter()
    rows = READERS[reader](path)
    wall = time.perf_counter() - start
    usage = resource.getrusage(resource.RUSAGE_SELF)
    print(json.dumps({"reader": reader, "rows": rows, "seconds": round(wall, 2),
                      "cpu_seconds": round(usage.ru_utime + usage.ru_stime, 2),
                      "peak_rss_mib": round(usage.ru_maxrss / 1024)}))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--edges", type=int, default=20_000_000, help="edges in the file")
    ap.add_argument("--nodes", type=int, default=2_000_000, help="distinct node ids")
    ap.add_argument("--dir", type=Path, default=Path("/tmp/asepr-polars"), help="where the file goes")
    ap.add_argument("--repeats", type=int, default=3, help="runs of each reader, alternating")
    ap.add_argument("--child", choices=sorted(READERS), help=argparse.SUPPRESS)
    ap.add_argument("--path", type=Path, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        child(args.child, args.path)
        return
    args.dir.mkdir(parents=True, exist_ok=True)
    path = args.dir / f"edges-{args.edges}.tsv"
    if not path.exists():
        generate(path, args.edges, args.nodes)
    print(json.dumps({"file": str(path), "bytes": path.stat().st_size, "edges": args.edges}))
    for _ in range(args.repeats):
        for reader in READERS:
            out = subprocess.run([sys.executable, __file__, "--child", reader, "--path", str(path)],
                                 check=True, capture_output=True, text=True, env=os.environ)
            print(out.stdout.strip(), flush=True)


if __name__ == "__main__":
    main()
