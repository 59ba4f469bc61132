"""Write a synthetic dataset in OGB's node-property raw layout, for measuring the importer.

    python docs/results/ogb-import/make_fixture.py OUT_ROOT --nodes 1000000 --edges 20000000 --dim 8

writes ``OUT_ROOT/ogbn_synth/{raw,split/random}`` exactly as OGB lays a dataset out
(headerless gzip CSVs), block by block, in bounded memory. Edges have uniform endpoints,
features are seeded normals, labels 10 classes, the split 60/20/20 of a permutation.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.csv as pacsv

BLOCK = 2_000_000


def write_csv_gz(path: Path, blocks) -> None:
    """Write headerless CSV rows from an iterator of 2-d arrays into ``path`` (gzip)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with pa.CompressedOutputStream(str(path), "gzip") as sink:
        for block in blocks:
            table = pa.table({f"c{i}": block[:, i] for i in range(block.shape[1])})
            pacsv.write_csv(table, sink, write_options=pacsv.WriteOptions(include_header=False))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("root", type=Path)
    ap.add_argument("--nodes", type=int, default=1_000_000)
    ap.add_argument("--edges", type=int, default=20_000_000)
    ap.add_argument("--dim", type=int, default=8)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    rng = np.random.default_rng(args.seed)
    n, m = args.nodes, args.edges
    folder = args.root / "ogbn_synth"
    raw = folder / "raw"
    write_csv_gz(raw / "edge.csv.gz", (rng.integers(0, n, (min(BLOCK, m - lo), 2)) for lo in range(0, m, BLOCK)))
    write_csv_gz(raw / "node-feat.csv.gz",
                 (rng.normal(size=(min(BLOCK // 4, n - lo), args.dim)).astype(np.float32)
                  for lo in range(0, n, BLOCK // 4)))
    write_csv_gz(raw / "node-label.csv.gz", [rng.integers(0, 10, (n, 1))])
    write_csv_gz(raw / "num-node-list.csv.gz", [np.array([[n]])])
    write_csv_gz(raw / "num-edge-list.csv.gz", [np.array([[m]])])
    perm = rng.permutation(n)
    cuts = (0, int(0.6 * n), int(0.8 * n), n)
    for name, lo, hi in zip(("train", "valid", "test"), cuts, cuts[1:]):
        write_csv_gz(folder / "split" / "random" / f"{name}.csv.gz", [np.sort(perm[lo:hi])[:, None]])
    print(f"wrote {folder}")


if __name__ == "__main__":
    main()
