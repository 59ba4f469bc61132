"""``asepr partition``, ``asepr inspect`` and ``asepr verify``.

``partition`` validates the input, partitions it and commits one Zarr store per
partition plus ``manifest.json`` (:func:`asepr.pipeline.partition_run.partition_to_store`);
``inspect`` prints what an output holds; ``verify`` checks every invariant
(:func:`asepr.pipeline.verify.verify_output`) and exits 1 on any violation.

Before anything is written, ``partition`` prints its memory and disk plan
(:mod:`asepr.pipeline.planning.plan`) and refuses to start when the plan does not fit this machine,
unless ``--ignore-plan``; ``--dry-run`` prints the plan and exits.
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import os
import sys
import textwrap
from dataclasses import fields
from pathlib import Path
from typing import Any

from asepr.pipeline.config import ALGORITHMS, SCORINGS, PartitionConfig
from asepr.storage.errors import AseprError, InputError, format_problem
from asepr.storage.locations.remote import add_storage_options_flag, remote_errors_as_problems
from asepr.workflows.dask_client import add_dask_arguments, client_from_args, default_workers
from asepr.workflows.extras import require_extra

__all__ = ["byte_count", "config_from_args", "drift_text", "inspect_text", "metrics_table", "partition_table", "register",
           "share_text"]

log = logging.getLogger(__name__)

# CLI flag (argparse dest) → PartitionConfig field.
_CONFIG_FLAGS = {
    "algo": "algo",
    "scoring": "scoring",
    "alpha": "alpha",
    "beta": "beta",
    "attr_clusters": "num_attr_clusters",
    "attr_column": "attr_column",
    "lift_reference": "lift_reference",
    "epsilon": "epsilon",
    "seed": "seed",
    "batch_rows": "batch_rows",
    "two_phase_fallback": "two_phase_fallback",
    "restream_passes": "restream_passes",
    "concurrent_fallback": "concurrent_fallback",
    "memory_budget": "memory_budget",
}


def byte_count(text: str) -> int:
    """``"512M"``, ``"2G"``, ``"1.5GiB"``, ``"100000"`` -> bytes (binary units)."""
    units = {"": 1, "K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}
    value = text.strip().upper().removesuffix("IB").removesuffix("B")
    unit = value[-1] if value and value[-1] in units else ""
    try:
        number = float(value[: len(value) - len(unit)])
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a byte count such as 512M or 2G, found {text!r}") from None
    if not math.isfinite(number) or number < 0:
        raise argparse.ArgumentTypeError(f"expected a finite byte count >= 0, found {text!r}")
    return int(number * units[unit])


def register(subparsers, add_common) -> None:
    """Add the three commands to the ``asepr`` parser."""
    p = subparsers.add_parser("partition", help="partition an input into K Zarr stores (+ manifest.json)")
    add_common(p)
    p.add_argument("input", help="input directory (edges/, nodes/, meta.json)")
    p.add_argument("out", help="output: a local directory, or an object-store URL (s3://bucket/prefix, gs://..., "
                               "az://...; one writer at a time, by a lease)")
    p.add_argument("-k", "--num-parts", type=int, help="number of partitions K")
    p.add_argument("--algo", choices=ALGORITHMS, help="algorithm (default asep)")
    p.add_argument("--config", help="TOML file with PartitionConfig fields (and halo); flags override it")
    p.add_argument("--scoring", choices=SCORINGS, help="asep: score the 2 community candidates or all K")
    p.add_argument("--alpha", type=float, help="attribute weight of structural clustering, in [0, 1]")
    p.add_argument("--beta", type=float, help="weight of the attribute-home term of the edge score")
    p.add_argument("--attr-clusters", type=int, help="C, attribute clusters (default K)")
    p.add_argument("--attr-column", help="use this categorical node column as the attribute clusters")
    p.add_argument("--lift-reference", type=float,
                   help="asep: scale alpha and beta by min(1, attribute lift / REF); 0: no scaling "
                        "(the default)")
    p.add_argument("--epsilon", type=float, help="balance slack: cap = (1 + epsilon) |E| / K")
    p.add_argument("--capacities", metavar="W1,...,WK",
                   help="K positive numbers, each partition's machine's capacity: partition p takes the share "
                        "Wp / sum(W) of the edges and masters, its cap (1 + epsilon) share |E| (default: equal)")
    p.add_argument("--cluster", metavar="FILE",
                   help="a TOML or JSON file with each machine's relative compute and memory ([[machine]] "
                        "compute = ..., memory = ...); the shares follow the smaller of the two "
                        "(docs/guide/partitioning.md)")
    p.add_argument("--memory-budget", type=byte_count, default=None, metavar="BYTES",
                   help="asep/hdrf hybrid: hold up to BYTES (e.g. 512M, 2G) of the low-degree subgraph in memory "
                        "and partition it by neighbourhood expansion, streaming the rest; about 12 B per edge "
                        "+ 28 B per vertex holds the whole graph; 0 (default): pure streaming")
    p.add_argument("--no-two-phase-fallback", dest="two_phase_fallback", action="store_const", const=False,
                   default=None,
                   help="asep: keep its own stream; by default it also streams the edges as 2PS-HDRF does "
                        "(2 more edge passes, 1 more clustering pass) and keeps the assignment with fewer replicas")
    p.add_argument("--restream-passes", type=int, default=None, metavar="N",
                   help="asep (all-K scoring, no memory budget): after its stream, stream the edges N more times, "
                        "each steered by the previous pass's masters (default 1; 0: a single stream)")
    p.add_argument("--sequential-fallback", dest="concurrent_fallback", action="store_const", const=False,
                   default=None,
                   help="asep: stream the two-phase fallback after ASEP's own stream instead of beside it on "
                        "a thread (less memory: one kernel state at a time; the same assignment)")
    p.add_argument("--seed", type=int, help="seed (k-means, projections, hash baselines)")
    p.add_argument("--batch-rows", type=int, help="edge rows per streamed batch")
    p.add_argument("--halo", type=int, choices=(0, 1), default=None,
                   help="1: copy each master's 1-hop in-neighbourhood into its partition")
    p.add_argument("--overwrite", action="store_true",
                   help="replace a committed output (the old generation stays readable until the new commit)")
    p.add_argument("--dry-run", action="store_true",
                   help="print the memory and disk plan (peak RSS per stage, bytes written) and exit")
    p.add_argument("--ignore-plan", action="store_true",
                   help="run even when the plan exceeds the available memory or the free disk")
    p.add_argument("--plan-rf", type=float, default=None,
                   help="plan with this replication factor (e.g. an earlier run's) instead of the "
                        "one estimated from a sample of the edges")
    p.add_argument("--scratch", default=None, metavar="DIR",
                   help="with an object-store output: the local directory for spill files and the decoded input "
                        "(default: a new directory under the system's temporary directory, removed after the run)")
    add_storage_options_flag(p)
    add_dask_arguments(p)
    p.set_defaults(handler=_cmd_partition)

    p = subparsers.add_parser("inspect", help="print an output's manifest, metrics and partitions")
    add_common(p)
    p.add_argument("out", help="the output directory of `asepr partition` (a path or an fsspec URL)")
    p.add_argument("--json", action="store_true", help="print the manifest as JSON")
    p.add_argument("--plot", nargs="?", const="", default=None, metavar="PNG",
                   help="also draw the partitions' edges, masters, replicas and labels into PNG "
                        "(default: OUT.partitions.png beside OUT)")
    p.add_argument("--diagnose", action="store_true",
                   help="also show why the local models differ: each partition's label divergence, receptive-field "
                        "coverage and training seeds (reads every store's labels and edges; in --json as "
                        "'diagnostics')")
    p.add_argument("--hops", type=_positive_int, default=2,
                   help="with --diagnose: the receptive field's depth, the model's layers (default 2)")
    add_storage_options_flag(p)
    p.set_defaults(handler=_cmd_inspect)

    p = subparsers.add_parser("verify", help="check every invariant of an output; exit 1 on a violation")
    add_common(p)
    p.add_argument("out", help="the output directory of `asepr partition`")
    p.add_argument("--input", help="the input directory (default: the one in the manifest)")
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    p.add_argument("--memory-budget", type=float, default=None,
                   help="GiB of node rows held at once for the node comparison (default: a quarter of the "
                        "available memory, at least 1): the input's node table when it fits, else groups of "
                        "partitions, one pass over the nodes each")
    p.add_argument("--threads", type=int, default=None, help="threads that run the checks (default: cores, <= 4)")
    p.add_argument("--exact-edges", action="store_true",
                   help="compare the edge multiset bucket by bucket exactly instead of by random fingerprints "
                        "(which miss a difference with probability < 2^-60)")
    add_storage_options_flag(p)
    p.set_defaults(handler=_cmd_verify)


# --- partition ---------------------------------------------------------------------------


def config_from_args(args: argparse.Namespace) -> tuple[PartitionConfig, int]:
    """The PartitionConfig and halo from ``--config`` (TOML) overlaid with the flags."""
    values: dict[str, Any] = {}
    halo = 0
    if args.config:
        try:
            import tomllib
        except ModuleNotFoundError:  # Python 3.10
            import tomli as tomllib
        try:
            with open(args.config, "rb") as fh:
                raw = tomllib.load(fh)
        except (OSError, tomllib.TOMLDecodeError) as exc:
            raise InputError(
                format_problem(f"config file {args.config}", "a readable TOML file", str(exc))
            ) from exc
        section = raw.get("partition", raw)
        known = {f.name for f in fields(PartitionConfig)} | {"halo", "k", "attr_clusters"}
        for key, value in section.items():
            name = key.replace("-", "_")
            if name not in known:
                raise InputError(
                    format_problem(
                        f"config file {args.config}, key '{key}'",
                        f"one of {sorted(known)}",
                        f"'{key}'",
                        "fix the spelling or remove the key.",
                    )
                )
            if name == "halo":
                halo = int(value)
            else:
                values[{"k": "num_parts", "attr_clusters": "num_attr_clusters"}.get(name, name)] = value
    for flag, name in _CONFIG_FLAGS.items():
        value = getattr(args, flag, None)
        if value is not None:
            values[name] = value
    if args.num_parts is not None:
        values["num_parts"] = args.num_parts
    _capacities_from_args(args, values)
    if args.halo is not None:
        halo = args.halo
    if "num_parts" not in values:
        raise InputError("give the number of partitions with -k K (or k in --config).")
    return PartitionConfig(**values), halo


def _capacities_from_args(args: argparse.Namespace, values: dict[str, Any]) -> None:
    """``--capacities`` or ``--cluster`` into ``values["capacities"]`` (checked against k;
    without -k, k is their count)."""
    from asepr.pipeline.capacity import normalise_capacities, parse_capacities, read_cluster_file

    text, cluster = getattr(args, "capacities", None), getattr(args, "cluster", None)
    if text is not None and cluster is not None:
        raise InputError(format_problem("--capacities and --cluster", "one of them", "both",
                                        "give the capacities either as numbers or as a cluster file."))
    if text is None and cluster is None:
        return
    where = "--capacities" if text is not None else f"--cluster {cluster}"
    capacities = parse_capacities(text) if text is not None else read_cluster_file(cluster)
    values.setdefault("num_parts", len(capacities))
    normalise_capacities(capacities, values["num_parts"], where)
    values["capacities"] = capacities


def _plan(args: argparse.Namespace, config: PartitionConfig, halo: int):
    """The run's memory and disk plan, for the Dask setup the flags ask for."""
    from asepr.pipeline.planning.plan import plan_partition

    remote = bool(args.scheduler_address or args.scheduler_file or os.environ.get("DASK_SCHEDULER_ADDRESS"))
    workers = default_workers() if args.workers is None else max(0, args.workers)
    return plan_partition(args.input, args.out, config, halo=halo, workers=workers, remote=remote,
                          replication_factor=args.plan_rf, storage_options=args.storage_options or None,
                          scratch=args.scratch)


def _refuse_committed(args: argparse.Namespace) -> None:
    """A committed output without ``--overwrite`` is refused before the run is planned:
    the run would refuse it, after a plan that says nothing about it. A local output
    with a staging directory is left to the run, which first completes or undoes the
    commit that was interrupted there (perhaps of this very run)."""
    from asepr.pipeline.store.write import committed_output_error
    from asepr.storage.locations.location import is_local_url
    from asepr.storage.partitions.manifest import STAGING_NAME, read_manifest

    if args.overwrite or args.dry_run:
        return
    options = args.storage_options or None
    old = read_manifest(args.out, storage_options=options, missing_ok=True)
    if old is None or (is_local_url(args.out, options) and (Path(args.out) / STAGING_NAME).exists()):
        return
    raise committed_output_error(args.out, old)


def _cmd_partition(args: argparse.Namespace) -> int:
    from asepr.pipeline.partition_run import partition_to_store
    from asepr.pipeline.planning.plan import check_plan, human_bytes

    config, halo = config_from_args(args)
    if config.algo == "metis":
        require_extra("pymetis", "--algo metis")
    with remote_errors_as_problems(args.out):
        _refuse_committed(args)
    # The plan comes first: nothing is written (no output or staging directory, no
    # cluster started) before it is printed and checked.
    plan = _plan(args, config, halo)
    log.info("plan: peak memory %s (stage %s), local disk %s; available memory %s, free disk %s at %s",
             human_bytes(plan.peak_bytes), plan.peak.name, human_bytes(plan.disk_bytes),
             human_bytes(plan.free_memory), human_bytes(plan.free_disk), plan.disk_at)
    if args.dry_run or not args.quiet:
        print(plan.table(), flush=True)
    if args.dry_run:
        return 0
    if not args.ignore_plan:
        check_plan(plan)
    with client_from_args(args) as client:
        manifest = partition_to_store(
            args.input, args.out, config, halo=halo, client=client,
            overwrite=args.overwrite,
            storage_options=args.storage_options or None, scratch=args.scratch,
        )
    if not args.quiet:
        print(
            f"committed generation {manifest['generation']} of {args.out}: "
            f"{manifest['num_parts']} partitions of {manifest['num_nodes']:,} nodes and "
            f"{manifest['num_edges']:,} edges ({manifest['algorithm']})"
        )
        resumed = manifest.get("run", {}).get("resumed_partitions") or []
        if resumed:
            print(f"resumed {len(resumed)} finished partition(s) of an interrupted run")
        print(metrics_table(manifest))
        print(partition_table(manifest))
        if share_text(manifest):
            print(share_text(manifest))
        if manifest.get("metrics", {}).get("drift", {}).get("rebalance_advised"):
            print(drift_text(args.out, manifest))  # said now, not first by a later `asepr inspect`
    return 0


# --- reports ------------------------------------------------------------------------------

_METRICS = (
    ("replication_factor", "replication factor", "{:.3f}"),
    ("edge_balance", "edge balance (max/mean)", "{:.3f}"),
    ("vertex_balance", "vertex balance (max/mean)", "{:.3f}"),
    ("attribute_homogeneity", "attribute homogeneity", "{:.3f}"),
    ("label_entropy_mean", "label entropy (bits, mean)", "{:.3f}"),
    ("one_hop_locality", "1-hop locality", "{:.3f}"),
)


def metrics_table(manifest: dict[str, Any]) -> str:
    """The quality metrics of a manifest as an aligned two-column table."""
    metrics = manifest.get("metrics", {})
    lines = [f"metrics ({manifest.get('algorithm')}, k={manifest.get('num_parts')})"]
    for key, label, fmt in _METRICS:
        if key in metrics:
            lines.append(f"  {label:28s} {fmt.format(metrics[key])}")
    fallback = metrics.get("two_phase_fallback")
    if fallback:  # asep streams twice and keeps the assignment with fewer replicas
        passes = int(manifest.get("config", {}).get("restream_passes", 0) or 0)
        own = "asep's own stream" + (f" ({passes} restream{'s' if passes > 1 else ''})" if passes else "")
        lines.append(f"  {'assignment kept':28s} {fallback['chosen']}'s (RF {float(fallback['asep_rf']):.3f} "
                     f"from {own}, {float(fallback['two_phase_rf']):.3f} from the two-phase fallback)")
    return "\n".join(lines)


def _human_bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(n) < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} GiB"


def partition_table(manifest: dict[str, Any], sizes: dict[int, int] | None = None) -> str:
    """One row per partition: nodes, masters, edges, halo edges, bytes."""
    header = f"  {'part':>5} {'nodes':>12} {'masters':>12} {'edges':>13} {'halo edges':>11} {'bytes':>11}"
    lines = ["partitions", header]
    total = {"nodes": 0, "masters": 0, "edges": 0, "halo_edges": 0, "bytes": 0}
    for entry in sorted(manifest["partitions"], key=lambda e: e["part_id"]):
        c = entry.get("counts", {})
        size = (sizes or {}).get(entry["part_id"], entry.get("bytes", 0))
        lines.append(
            f"  {entry['part_id']:>5} {c.get('nodes', 0):>12,} {c.get('masters', 0):>12,} "
            f"{c.get('edges', 0):>13,} {c.get('halo_edges', 0):>11,} {_human_bytes(size):>11}"
        )
        for key in ("nodes", "masters", "edges", "halo_edges"):
            total[key] += c.get(key, 0)
        total["bytes"] += size
    lines.append(
        f"  {'total':>5} {total['nodes']:>12,} {total['masters']:>12,} {total['edges']:>13,} "
        f"{total['halo_edges']:>11,} {_human_bytes(total['bytes']):>11}"
    )
    return "\n".join(lines)


def share_text(manifest: dict[str, Any]) -> str | None:
    """With capacities: each partition's target share and its shares of the edges and
    masters, each also as a ratio to the target (1.000: exactly in proportion)."""
    capacities = manifest.get("config", {}).get("capacities")
    if not capacities:
        return None
    total = float(sum(capacities))
    entries = sorted(manifest["partitions"], key=lambda e: e["part_id"])
    edges = [e.get("counts", {}).get("edges", 0) for e in entries]
    masters = [e.get("counts", {}).get("masters", 0) for e in entries]
    lines = [f"shares (capacities {', '.join(f'{c:g}' for c in capacities)})",
             f"  {'part':>5} {'share':>7} {'edges':>7} {'/share':>7} {'masters':>8} {'/share':>7}"]
    for entry, e, m in zip(entries, edges, masters):
        share = capacities[entry["part_id"]] / total
        e_share, m_share = e / max(1, sum(edges)), m / max(1, sum(masters))
        lines.append(f"  {entry['part_id']:>5} {share:>7.3f} {e_share:>7.3f} {e_share / share:>7.3f} "
                     f"{m_share:>8.3f} {m_share / share:>7.3f}")
    return "\n".join(lines)


_STAGE_ORDER = (
    "validate", "load state", "degrees", "attribute clustering", "attribute clusters",
    "structural clustering", "mapping", "metis", "assignment", "masters", "metrics", "plan moves",
    "write state", "route", "finalize edges", "rebuild edges", "gather nodes", "finalize nodes",
    "rebuild nodes", "node map", "commit",
)


def drift_text(out: str | Path, manifest: dict[str, Any]) -> str | None:
    """The balance drift of a manifest and whether ``asepr rebalance`` is advised."""
    metrics = manifest.get("metrics", {})
    drift = metrics.get("drift")
    if not drift:
        return None
    cap = 1.0 + float(drift.get("epsilon", 0.05))
    lines = ["drift"]
    lines.append(f"  {'edge balance (max/mean)':28s} {drift['edge_balance']:.3f} (cap {cap:.3f})")
    if "community_balance" in drift:
        lines.append(f"  {'community volume balance':28s} {drift['community_balance']:.3f} (cap {cap:.3f})")
    ingest = metrics.get("ingest")
    if ingest and ingest.get("new_edges"):
        share = ingest.get("off_community_edges", 0) / ingest["new_edges"]
        lines.append(f"  {'last ingest off community':28s} {100 * share:.1f} % of its {ingest['new_edges']:,} edges "
                     "(placed on neither endpoint's community partition)")
    over = drift.get("overloaded") or []
    if drift.get("rebalance_advised"):
        lines.append(f"  rebalance advised: partition(s) {', '.join(map(str, over))} past the cap; "
                     f"run `asepr rebalance {out}`")
        if not metrics.get("ingest") and drift.get("volume_over_cap"):
            lines.append(textwrap.fill(
                "why on a fresh output: the mapping places whole communities, and one that fits under the cap "
                "on no partition goes to the least loaded; the kernel then steers more edges there than its "
                "edge cap takes and places the rest elsewhere. A rebalance moves whole communities to "
                "partitions with room.", width=100, initial_indent="  ", subsequent_indent="  "))
    else:
        lines.append("  no rebalance needed: every partition is within its cap")
    return "\n".join(lines)


def inspect_text(out: str | Path, manifest: dict[str, Any], storage_options: dict | None = None) -> str:
    """Everything ``asepr inspect`` prints (``storage_options``: of a remote ``out``)."""
    from asepr.storage.locations.location import tree_bytes
    from asepr.storage.partitions.output_stores import resolve_store_url

    inp = manifest.get("input", {})
    kind = "undirected" if manifest.get("undirected") else "directed"
    lines = [
        f"output       {out}",
        (
            f"generation   {manifest['generation']} (created {manifest.get('created')}, "
            f"format version {manifest['format_version']})"
        ),
        f"algorithm    {manifest.get('algorithm')} with k={manifest['num_parts']}, halo {manifest.get('halo', 0)}",
        (
            f"input        {inp.get('url')}: {manifest.get('num_nodes', 0):,} nodes, "
            f"{manifest.get('num_edges', 0):,} edges ({kind}), {manifest.get('feat_dim')} features; "
            f"{len(inp.get('edges', []))} edge and {len(inp.get('nodes', []))} node shard(s)"
        ),
        textwrap.fill(", ".join(f"{k}={v}" for k, v in sorted(manifest.get("config", {}).items()) if k != "extra"),
                      width=100, initial_indent="config       ", subsequent_indent=" " * 13, break_on_hyphens=False),
        metrics_table(manifest),
    ]
    increments = manifest.get("increments", [])
    if increments:
        last = increments[-1]
        lines.insert(4, (
            f"increments   {len(increments)} ingested (+{sum(i.get('new_edges', 0) for i in increments):,} edges, "
            f"+{sum(i.get('new_nodes', 0) for i in increments):,} nodes); last in generation {last.get('generation')}"
        ))
    rebalances = manifest.get("rebalances", [])
    if rebalances:
        last = rebalances[-1]
        lines.insert(5 if increments else 4, (
            f"rebalances   {len(rebalances)}; last in generation {last.get('generation')}: moved "
            f"{last.get('moved_communities', 0):,} communities and {last.get('moved_edges', 0):,} edges"
        ))
    drift = drift_text(out, manifest)
    if drift:
        lines.append(drift)
    timings = manifest.get("timings", {})
    if timings:
        # "... kernel" entries are parts of their stage, not stages of their own.
        order = {name: i for i, name in enumerate(_STAGE_ORDER)}
        top = {k: timings[k] for k in sorted(timings, key=lambda k: (order.get(k, len(order)), k))
               if "kernel" not in k}
        total = sum(top.values()) or 1.0
        lines.append(f"timings (total {total:.1f} s)")
        lines += [f"  {k:28s} {v:8.2f} s {100 * v / total:5.1f} %" for k, v in top.items()]
    sizes = {}
    for entry in manifest["partitions"]:
        try:
            url = resolve_store_url(out, manifest, entry, storage_options)
            sizes[entry["part_id"]] = tree_bytes(url, storage_options)
        except AseprError:
            pass
    lines.append(partition_table(manifest, sizes))
    shares = share_text(manifest)
    if shares:
        lines.append(shares)
    return "\n".join(lines)


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected an integer >= 1, found {text!r}")
    return value


def _cmd_inspect(args: argparse.Namespace) -> int:
    from asepr.storage.partitions.manifest import read_manifest

    with remote_errors_as_problems(args.out):
        manifest = read_manifest(args.out, storage_options=args.storage_options)
        diagnostics = None
        if getattr(args, "diagnose", False):
            from asepr.pipeline.diagnose import diagnose_output

            diagnostics = diagnose_output(args.out, hops=args.hops, storage_options=args.storage_options or None)
        if args.json:
            extra = {"diagnostics": diagnostics.to_dict()} if diagnostics is not None else {}
            print(json.dumps({**manifest, **extra}, indent=2, sort_keys=True))
        else:
            print(inspect_text(args.out, manifest, args.storage_options))
            if diagnostics is not None:
                from asepr.workflows.diagnose_report import diagnostics_text

                print(diagnostics_text(diagnostics.summary()))
        if args.plot is not None:
            from asepr.workflows.plot import plot_partitions

            _, path = plot_partitions(args.out, path=args.plot or None, storage_options=args.storage_options or None)
            if not args.quiet:
                print(f"wrote {path}")
    return 0


def _cmd_verify(args: argparse.Namespace) -> int:
    from asepr.pipeline.verify import verify_output

    if (args.memory_budget is not None and not args.memory_budget > 0) or (args.threads is not None
                                                                          and args.threads < 1):
        raise AseprError(format_problem("asepr verify", "--memory-budget > 0 and --threads >= 1",
                                        f"--memory-budget {args.memory_budget}, --threads {args.threads}"))
    budget = None if args.memory_budget is None else int(args.memory_budget * 2**30)
    report = verify_output(args.out, input_url=args.input, memory_budget=budget,
                           storage_options=args.storage_options or None,
                           workers=args.threads, edge_check="exact" if args.exact_edges else "fingerprint")
    if report.generation is None and not args.json:
        # No committed generation could be read (a missing output, or one never committed):
        # say that, not "generation None, None partitions".
        for problem in report.problems:
            print(f"asepr verify: error: {problem.message}", file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps({"ok": report.ok, "generation": report.generation, "num_parts": report.num_parts,
                          "checks": report.checks, "problems": [str(p) for p in report.problems]}, indent=2))
    elif not (report.ok and args.quiet):  # -q: an output that verifies prints nothing
        stream = sys.stdout if report.ok else sys.stderr
        print(report.summary(), file=stream)
    return 0 if report.ok else 1
