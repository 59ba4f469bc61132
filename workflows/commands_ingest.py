"""``asepr ingest`` and ``asepr rebalance``: grow and rebalance a committed output.

``ingest`` adds new edge (and node) shards as the next generation
(:func:`asepr.pipeline.increment.ingest.ingest`); shards ingested before are skipped with a message.
``rebalance`` moves whole communities off partitions past the volume cap
(:func:`asepr.pipeline.increment.rebalance.rebalance`). Both print what they committed; ``asepr
inspect`` shows the drift and whether a rebalance is advised.
"""

from __future__ import annotations

import argparse

from asepr.storage.locations.remote import add_storage_options_flag
from asepr.workflows.commands_partition import metrics_table, partition_table
from asepr.workflows.dask_client import add_dask_arguments, client_from_args

__all__ = ["register"]


def register(subparsers, add_common) -> None:
    """Add ``ingest`` and ``rebalance`` to the ``asepr`` parser."""
    p = subparsers.add_parser("ingest", help="add new edge (and node) shards to a partitioned output")
    add_common(p)
    p.add_argument("out", help="output directory of `asepr partition`")
    p.add_argument("new_edges", help="new edge shards: a directory, glob or file of Parquet with int64 columns "
                                      "src, dst in the output's node ids (new nodes from its next free id, "
                                      "given with --nodes), or a CSV/TSV edge list in the input's original ids, "
                                      "mapped through its id_map.parquet (new ids appended to it)")
    p.add_argument("--nodes", help="new node shards (ids from the output's next free id on)")
    add_storage_options_flag(p)
    add_dask_arguments(p)
    p.set_defaults(handler=_cmd_ingest)

    p = subparsers.add_parser("rebalance", help="move whole communities off partitions past the cap")
    add_common(p)
    p.add_argument("out", help="output directory of `asepr partition`")
    add_storage_options_flag(p)
    add_dask_arguments(p)
    p.set_defaults(handler=_cmd_rebalance)


def _changed(manifest: dict) -> str:
    changed = manifest.get("run", {}).get("changed_partitions")
    if changed is None:
        return ""
    return f"; {len(changed)} of {manifest['num_parts']} partitions rebuilt"


def _commit_generation(args: argparse.Namespace, step, nothing: str) -> dict | None:
    """Run ``step(client)`` (an ingest or a rebalance) on ``args.out``; return its manifest
    when it committed a new generation and output is wanted, else None (after saying why)."""
    from asepr.storage.partitions.manifest import read_manifest

    before = read_manifest(args.out, storage_options=args.storage_options or None)
    with client_from_args(args) as client:
        manifest = step(client)
    if args.quiet:
        return None
    if manifest["generation"] == before["generation"]:
        print(f"{nothing}; {args.out} stays at generation {manifest['generation']}")
        return None
    return manifest


def _cmd_ingest(args: argparse.Namespace) -> int:
    from asepr.pipeline.increment.ingest import ingest

    manifest = _commit_generation(
        args, lambda client: ingest(args.out, args.new_edges, args.nodes, client=client,
                                    storage_options=args.storage_options or None),
        "nothing new to ingest: every shard was ingested before")
    if manifest is None:
        return 0
    inc = manifest.get("increments", [{}])[-1]
    print(
        f"committed generation {manifest['generation']} of {args.out}: +{inc.get('new_edges', 0):,} edges, "
        f"+{inc.get('new_nodes', 0):,} nodes from {len(inc.get('edges', []))} edge and "
        f"{len(inc.get('nodes', []))} node shard(s){_changed(manifest)}"
    )
    if inc.get("skipped"):
        print(f"skipped {len(inc['skipped'])} shard(s) ingested before")
    print(metrics_table(manifest))
    print(partition_table(manifest))
    return 0


def _cmd_rebalance(args: argparse.Namespace) -> int:
    from asepr.pipeline.increment.rebalance import rebalance

    manifest = _commit_generation(
        args, lambda client: rebalance(args.out, client=client, storage_options=args.storage_options or None),
        "nothing to rebalance: no community can move under the caps")
    if manifest is None:
        return 0
    rec = manifest.get("rebalances", [{}])[-1]
    print(
        f"committed generation {manifest['generation']} of {args.out}: moved "
        f"{rec.get('moved_communities', 0):,} communities and {rec.get('moved_edges', 0):,} edges; community "
        f"balance {rec.get('community_balance_before', 0):.3f} -> {rec.get('community_balance_after', 0):.3f}"
        f"{_changed(manifest)}"
    )
    print(metrics_table(manifest))
    return 0
