"""Training seeds per rank, and the batch `--batch-size auto` gives each, on the ASEP partitions
`asepr bench train` trains on (one partition per rank; partitions made here when the cache lacks them).

usage: python seeds_per_rank.py CACHE DATASET K [K ...]
  CACHE: bench train's --cache for DATASET (the input imported in CACHE/DATASET, the partitions
  in CACHE/DATASET-asep-kK, as bench train names them).
"""

from __future__ import annotations

import sys
from pathlib import Path

from pipeline.config import PartitionConfig
from pipeline.partition_run import partition_to_store
from training.config import resolve_batch_size
from training.data import load_local_graph
from workflows.datasets import resolve_dataset


def main(cache: Path, name: str, ks: list[int]) -> None:
    source = resolve_dataset(name, cache)
    for k in ks:
        out = cache / f"{name}-asep-k{k}"
        if not (out / "manifest.json").exists():
            partition_to_store(source, out, PartitionConfig(num_parts=k, algo="asep", seed=0), overwrite=True)
        seeds = [int(load_local_graph(out, [rank]).train_mask.sum()) for rank in range(k)]
        batches = [resolve_batch_size("auto", n) for n in seeds]
        print(f"{name} k={k}: training seeds per rank {seeds} (min {min(seeds)}, max {max(seeds)}, "
              f"total {sum(seeds)}); auto batch {batches}"
              + (" = 256 on every rank" if set(batches) == {256} else ""))


if __name__ == "__main__":
    main(Path(sys.argv[1]), sys.argv[2], [int(k) for k in sys.argv[3:]])
