"""bench train with ASEP partitions at alpha = beta = A (patches bench_train's PartitionConfig)."""
import functools
import sys

import asepr.workflows.bench.train as bt
from asepr.pipeline.config import PartitionConfig
from asepr.workflows.cli import main

if __name__ == "__main__":
    a = float(sys.argv[1])
    bt.PartitionConfig = functools.partial(PartitionConfig, alpha=a, beta=a)
    sys.exit(main(sys.argv[2:]))
