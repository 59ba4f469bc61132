"""A tiny partitioned output and new edge shards for it, for the ingest attacks."""

from __future__ import annotations

from pathlib import Path

from asepr.pipeline import partition_to_store
from asepr.pipeline.config import PartitionConfig
from tests.pipeline.ingest_cases import split_case


def tiny_output(root: Path) -> dict:
    """Generation 1 of a 200-node graph (k = 2, hdrf) and two new edge shards for it.

    Returns ``{"out": the output, "edges": [two Parquet files], "inc": their directory}``.
    """
    case = split_case(root / "case", nodes=200, edges=1_200, frac=0.8)
    out = root / "gen1"
    partition_to_store(case["root"] / "base", out, PartitionConfig(num_parts=2, algo="hdrf"))
    inc = case["root"] / "inc" / "edges"
    shards = sorted(inc.glob("*.parquet"))
    assert len(shards) == 2
    return {"out": out, "edges": [str(s) for s in shards], "inc": inc, "root": case["root"]}
