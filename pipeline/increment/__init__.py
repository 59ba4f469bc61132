"""Changing a committed output: ingest new shards, rebalance (docs/design.md#incremental-ingest).

``ingest`` continues the assignment stream on new edges, ``rebalance`` moves whole
communities off overloaded partitions; both commit through ``generation``, which
rebuilds only the changed partitions (``rebuild``).
"""
