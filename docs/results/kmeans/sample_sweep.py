"""Full-data inertia of the sampled fit by sample size, restarts and Lloyd updates (in memory).

    python sample_sweep.py INPUT_DIR C [m,m,...]   # writes sweep-<input>-C<C>.md here

Embeds every row of the input (projection-free inputs only: d <= 256) into memory,
then for each setting draws a uniform sample of m rows (seed 1), fits it with
:func:`asepr.pipeline.stages.kmeans.fit_sample` (seed 7) and scores the centroids on every
row. ``sample estimate`` is the sample inertia scaled by N/m, as ``inertia_history``
reports it. CPU is that of the fit alone.
"""

from __future__ import annotations

import math
import sys
import time
from pathlib import Path

import numpy as np

from asepr.pipeline.stages.kmeans import embed, fit_sample, nearest
from asepr.storage.inputs.directory import open_parquet
from asepr.storage.inputs.schema import check_node_schema, feature_matrix
from asepr.storage.locations.fs import discover_shards

HERE = Path(__file__).resolve().parent


def embedded_rows(root: Path) -> np.ndarray:
    parts = []
    for shard in discover_shards(root / "nodes"):
        pf = open_parquet(shard)
        layout, _, _ = check_node_schema(pf.schema_arrow, shard.url)
        for batch in pf.iter_batches(batch_size=1 << 18, columns=list(layout.columns)):
            parts.append(embed(feature_matrix(batch, layout), None))
    return np.concatenate(parts)


def main() -> None:
    root, clusters = Path(sys.argv[1]), int(sys.argv[2])
    sizes = [int(v) for v in (sys.argv[3] if len(sys.argv) > 3 else "20000,65536,262144").split(",")]
    x = embedded_rows(root)
    n = len(x)
    lines = [f"# Sampled fit on {root.name}: N = {n:,}, d' = {x.shape[1]}, C = {clusters}", "",
             "| m | restarts | max updates | updates | converged | fit CPU s | sample estimate | full-data inertia |",
             "|---|---|---|---|---|---|---|---|"]
    for m in sizes:
        sample = x[np.sort(np.random.default_rng(1).choice(n, m, replace=False))]
        for restarts in (1, 3):
            for updates in (10, 100):
                t0 = time.process_time()
                fit = fit_sample(sample, clusters, restarts=restarts, max_iter=updates, tol=1e-4,
                                 seq=np.random.SeedSequence(7))
                seconds = time.process_time() - t0
                full = math.fsum(nearest(x, fit.centroids)[2])
                lines.append(f"| {m:,} | {restarts} | {updates} | {fit.iterations} | {fit.converged} | "
                             f"{seconds:.2f} | {fit.inertia * n / m:.6g} | {full:.6g} |")
                print(lines[-1], flush=True)
    (HERE / f"sweep-{root.name}-C{clusters}.md").write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
