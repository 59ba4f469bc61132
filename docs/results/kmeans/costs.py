"""CPU costs behind the stage's constants (``READ_COST``) and its two reads, on one s50 shard.

    python costs.py [INPUT_DIR]      # default /work/scratch/s50; writes costs.md here

Measures, in CPU seconds of this process (robust to load): decoding the feature column
of a 1M-row node shard (the sample pass reads only that column), the sample pass of that
shard (decode, pick and embed 4,000 rows), its labelling pass (decode ids and features,
embed, assign, distances), and the assignment kernel per multiply-add at d' = 32 and 256.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import numpy as np

from asepr.pipeline.stages.attr_cluster import READ_COST
from asepr.pipeline.stages.attr_rows import ShardPiece
from asepr.pipeline.stages.kmeans import nearest
from asepr.storage.inputs.directory import open_parquet
from asepr.storage.inputs.schema import check_node_schema, feature_matrix
from asepr.storage.locations.fs import discover_shards

HERE = Path(__file__).resolve().parent


def cpu(fn, repeat: int = 3) -> float:
    """The smallest CPU time of ``repeat`` calls (the first call may compile)."""
    fn()
    best = float("inf")
    for _ in range(repeat):
        t0 = time.process_time()
        fn()
        best = min(best, time.process_time() - t0)
    return best


def main() -> None:
    root = Path(sys.argv[1] if len(sys.argv) > 1 else "/work/scratch/s50")
    shard = discover_shards(root / "nodes")[0]
    pf = open_parquet(shard)
    layout, _, _ = check_node_schema(pf.schema_arrow, shard.url)
    n = pf.metadata.num_rows

    def decode():
        for batch in open_parquet(shard).iter_batches(batch_size=65_536, columns=list(layout.columns)):
            feature_matrix(batch, layout)

    d = int(feature_matrix(next(pf.iter_batches(batch_size=1, columns=list(layout.columns))), layout).shape[1])
    rng = np.random.default_rng(0)
    picks = np.sort(rng.choice(n, 4000, replace=False))
    centroids = rng.normal(size=(16, d)).astype(np.float32)
    centroids /= np.linalg.norm(centroids, axis=1, keepdims=True)
    rows = [("decode the feature column", cpu(decode))]
    rows.append(("sample pass (4,000 rows picked)",
                 cpu(lambda: ShardPiece(shard, d, 65_536).picked(picks, None))))
    piece = ShardPiece(shard, d, 65_536)
    rows.append(("labelling pass, C = 16", cpu(lambda: [nearest(x, centroids) for _, x in piece.batches(None)])))
    per_value = rows[0][1] / (n * d)
    lines = [f"# CPU costs on {shard.url} ({n:,} rows, d = {d})", "",
             "| step | CPU s | per row-feature |", "|---|---|---|"]
    lines += [f"| {name} | {s:.3f} | {s / (n * d) * 1e9:.2f} ns |" for name, s in rows]
    lines += ["", "| assignment kernel | rows | d' | C | CPU s | per multiply-add |", "|---|---|---|---|---|---|"]
    fma = []
    for width in (32, 256):
        x = rng.normal(size=(200_000, width)).astype(np.float32)
        c = rng.normal(size=(16, width))
        s = cpu(lambda: nearest(x, c))
        fma.append(s / (len(x) * width * 16))
        lines.append(f"| nearest | {len(x):,} | {width} | 16 | {s:.3f} | {fma[-1] * 1e9:.3f} ns |")
    lines += ["", f"Decoding one feature value costs {per_value / max(fma):.0f} to {per_value / min(fma):.0f} "
              f"multiply-adds of the kernel (READ_COST = {READ_COST})."]
    (HERE / "costs.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
