"""Benchmark of the hybrid assignment (asepr.pipeline.assign.hybrid) against HEP's reference RF.

Builds the kernel state exactly as ``asepr.pipeline.partition._assign`` does for
``PartitionConfig(num_parts=k, algo=ALGO)`` (degrees, attribute clusters as
``asepr bench partition`` computes them, attribute lift, structural clusters, community
mapping, vertex terms), then runs :func:`asepr.pipeline.assign.hybrid.hybrid_stream_assign`
at several budgets on the streams of ``asepr bench partition`` (natural order and the
seed-0 shuffle, cached under docs/results/partition-quality/inputs).

Usage (from the repository root)::

    python docs/results/hybrid/hybrid_bench.py [--datasets ...] [--ks 4 8 16 32]
        [--budgets stream small whole] [--prefer-attr both|on|off] [--out docs/results/hybrid]

Budgets: ``stream`` is 0 bytes (pure streaming); ``small`` is ``SMALL_BYTES_PER_EDGE`` bytes
per edge of the graph (fixed, not tuned per graph); ``whole`` holds the whole graph
(every vertex low); ``6bpe`` is 6 bytes per edge; a number is a byte count. Writes ``hybrid.csv`` and ``hybrid.md``
(RF and edge balance next to HEP-1 and HEP-100 of the published reference values,
``anchors/reference-rf.csv`` beside the ``$ASEPR_DATASETS`` folder).
"""

from __future__ import annotations

import argparse
import csv
import os
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

import numpy as np

from asepr.pipeline.assign import AssignState, EdgePartSink, KernelSettings
from asepr.pipeline.assign.hybrid import held_bytes, hybrid_stream_assign
from asepr.pipeline.config import PartitionConfig
from asepr.pipeline.stages.attr_cluster import attribute_clusters
from asepr.pipeline.stages.attr_lift import attribute_lift
from asepr.pipeline.stages.degrees import compute_degrees
from asepr.pipeline.stages.mapping import map_communities, vertex_terms
from asepr.pipeline.stages.struct_cluster import structural_clusters
from asepr.storage.inputs.directory import open_input, open_parquet
from asepr.storage.resources import peak_rss_bytes

ROOT = Path(__file__).resolve().parents[3]
INPUTS = ROOT / "docs/results/partition-quality/inputs"
SHARED_INPUTS = {
    "natural": "{name}",
    "shuffled": {"amazon-computers": "amazon-computers-cb213647-shuffled-0",
                 "coauthor-physics": "coauthor-physics-dc4ba0e9-shuffled-0",
                 "tolokers": "tolokers-ceef77d3-shuffled-0",
                 "facebook-pagepage": "facebook-pagepage-f3eb62fe-shuffled-0"},
}
REFERENCE = Path(os.environ.get("ASEPR_DATASETS", "datasets")).resolve().parent / "anchors" / "reference-rf.csv"
DATASETS = ["amazon-computers", "coauthor-physics", "tolokers", "facebook-pagepage"]
#: The small budget, in bytes per edge of the graph (plus nothing for the vertices).
SMALL_BYTES_PER_EDGE = 10.0
#: The expansion's preference in the report's main table (the library default).
DEFAULT_PREFER = "attr"


def input_path(name: str, order: str) -> Path:
    if order == "natural":
        return INPUTS / name
    return INPUTS / SHARED_INPUTS["shuffled"][name]


class Prepared:
    """Everything ``partition._assign`` builds before the stream, for one input and k."""

    def __init__(self, path: Path, k: int, algo: str = "asep"):
        source = open_input(path)
        self.edge_shards = source.edge_shards
        num_nodes = int(source.num_nodes)
        run = PartitionConfig(num_parts=k, algo=algo).resolved(source).effective()
        self.run = run
        degrees = compute_degrees(source.edge_shards, num_nodes, batch_rows=run.batch_rows)
        self.degree = degrees.degree
        self.num_edges = degrees.num_edges
        attr = attribute_clusters(
            source.node_shards, num_nodes, run.attr_clusters, seed=run.seed, max_passes=run.kmeans_max_passes,
            tol=run.kmeans_tol, sample_size=run.kmeans_sample, projection_dim=run.projection_dim,
            projection_threshold=run.projection_threshold,
        )
        self.attr_ids = np.ascontiguousarray(attr.attr_cluster_id, dtype=np.int32)
        alpha, beta, keep = run.alpha, run.beta, run.keep_attr_together
        if run.uses_attributes:
            lift = attribute_lift(source.edge_shards, self.degree, self.attr_ids, batch_rows=run.batch_rows)
            factor = lift.scale(run.lift_reference)
            alpha, beta = run.alpha * factor, run.beta * factor
            keep = run.keep_attr_together and factor > 0
        self.terms = (None, None, None)
        if run.uses_communities:
            communities = structural_clusters(source.edge_shards, self.degree, self.attr_ids, k, alpha,
                                              passes=run.cluster_passes, batch_rows=run.batch_rows)
            mapping = map_communities(
                communities.volume, self.attr_ids, k, epsilon=run.epsilon,
                keep_attr_together=run.uses_attributes and keep, community_id=communities.community_id,
                degree=self.degree, higher_id_first=not run.uses_attributes,
            )
            self.terms = vertex_terms(mapping, communities.community_id, communities.volume,
                                      self.attr_ids if run.uses_attributes else None)
        self.settings = KernelSettings.for_run(run, self.num_edges, alpha=alpha, beta=beta,
                                               keep_attr_together=keep)
        self.shard_rows = [open_parquet(s).metadata.num_rows for s in self.edge_shards]

    def state(self) -> AssignState:
        return AssignState(self.run.num_parts, self.degree, *self.terms)

    def whole_budget(self) -> int:
        low = int(np.count_nonzero(self.degree))
        return held_bytes(len(self.degree), low, int(self.degree.sum()), self.run.num_parts)

    def assign(self, budget: int, workdir: Path, prefer: str = "attr", mixed: bool = True):
        """Run the hybrid; returns ``(state, info, seconds)``."""
        state = self.state()
        sink = EdgePartSink(workdir, self.shard_rows)
        t0 = time.perf_counter()
        info = hybrid_stream_assign(state, self.edge_shards, self.degree, self.settings, sink, budget_bytes=budget,
                                    attr_ids=self.attr_ids, batch_rows=self.run.batch_rows,
                                    prefer=prefer, mixed=mixed)
        return state, info, time.perf_counter() - t0


def replication_factor(state: AssignState, degree: np.ndarray) -> float:
    """Σ_v |A(v)| / |{v : d(v) > 0}|."""
    return float(np.bitwise_count(state.replicas).sum() / max(1, np.count_nonzero(degree)))


def attribute_homogeneity(state: AssignState, attr_ids: np.ndarray) -> float:
    """Mean over partitions of the share of the partition's vertices in its dominant attribute cluster."""
    replicas = state.replicas
    shares = []
    for p in range(state.num_parts):
        members = (replicas[:, p >> 6] >> np.uint64(p & 63)) & np.uint64(1) != 0
        if members.any():
            shares.append(np.bincount(attr_ids[members]).max() / members.sum())
    return float(np.mean(shares))


def reference() -> dict:
    ref = {}
    with open(REFERENCE) as f:
        for row in csv.DictReader(f):
            ref[(row["dataset"], row["order"], int(row["k"]), row["algorithm"])] = float(row["replication_factor"])
    return ref


def budget_bytes(name: str, prep: Prepared) -> int:
    if name == "stream":
        return 0
    if name == "small":
        return int(SMALL_BYTES_PER_EDGE * prep.num_edges)
    if name == "whole":
        return prep.whole_budget()
    if name.endswith("bpe"):
        return int(float(name[:-3]) * prep.num_edges)
    return int(float(name))


def _typed(row: dict) -> dict:
    out = {}
    for key, value in row.items():
        if value in ("True", "False"):
            out[key] = value == "True"
        else:
            try:
                out[key] = int(value)
            except ValueError:
                try:
                    out[key] = float(value)
                except ValueError:
                    out[key] = value
    return out


def _fmt(x) -> str:
    return "" if x != x else f"{x:.3f}"


def write_report(rows: list[dict], out: Path, command: str) -> None:
    """``hybrid.md``: the default configuration per cell against HEP, and the ablations."""
    default = [r for r in rows if r["budget"] == "stream" or (r["prefer"] == DEFAULT_PREFER and r["mixed"])]
    cells = sorted({(r["dataset"], r["order"], r["k"]) for r in rows},
                   key=lambda c: (DATASETS.index(c[0]) if c[0] in DATASETS else 99, c[1], c[2]))
    get = {(r["dataset"], r["order"], r["k"], r["budget"]): r for r in default}
    lines = [
        "# Hybrid assignment under a memory budget",
        "",
        f"Command: `{command}`. RF over non-isolated vertices; balance = max load / mean load "
        f"(cap 1.05). Default hybrid: `prefer={DEFAULT_PREFER!r}`, `mixed=True` (HEP's held set). "
        f"small = {SMALL_BYTES_PER_EDGE:g} bytes per edge of the graph; whole = every vertex low. "
        "`B/e` = bytes the hybrid allocated per edge; `held` = share of the edges held in memory. "
        "HEP-1 / HEP-100 from the published reference values, anchors/reference-rf.csv beside "
        "$ASEPR_DATASETS (blank: not in the file). "
        "Marks: small ≤ HEP-1 (✓/✗), whole ≤ 1.1 × HEP-100 (✓/✗).",
        "",
        "| dataset | order | k | stream RF | small RF | small bal | small held | small B/e | HEP-1 | small≤HEP-1 "
        "| whole RF | whole bal | whole B/e | HEP-100 | whole≤1.1·HEP-100 |",
        "|" + "---|" * 15,
    ]
    tally = {"small": [0, 0], "whole": [0, 0]}
    for c in cells:
        st, sm, wh = (get.get((*c, b)) for b in ("stream", "small", "whole"))
        if not (st and sm and wh):
            continue
        hep1, hep100 = sm["hep1"], wh["hep100"]
        m1 = "" if hep1 != hep1 else ("✓" if sm["rf"] <= hep1 else "✗")
        m100 = "" if hep100 != hep100 else ("✓" if wh["rf"] <= 1.1 * hep100 else "✗")
        if m1:
            tally["small"][m1 == "✓"] += 1
        if m100:
            tally["whole"][m100 == "✓"] += 1
        lines.append(
            f"| {c[0]} | {c[1]} | {c[2]} | {_fmt(st['rf'])} | {_fmt(sm['rf'])} | {_fmt(sm['edge_balance'])} "
            f"| {sm['held_share']:.2f} | {sm['bytes_per_edge']:.1f} | {_fmt(hep1)} | {m1} | {_fmt(wh['rf'])} "
            f"| {_fmt(wh['edge_balance'])} | {wh['bytes_per_edge']:.1f} | {_fmt(hep100)} | {m100} |")
    lines += ["", f"small ≤ HEP-1 in {tally['small'][1]} of {sum(tally['small'])} cells; "
              f"whole ≤ 1.1 × HEP-100 in {tally['whole'][1]} of {sum(tally['whole'])} cells; "
              f"every run's max load ≤ cap: {all(r['max_load_le_cap'] for r in rows)}.", ""]
    lines += _ablation(rows)
    (out / "hybrid.md").write_text("\n".join(lines) + "\n")


def write_sweep(rows: list[dict], out: Path, command: str) -> None:
    """``sweep.md``: per budget, the cells at most HEP-1's RF and the held share (default configuration)."""
    lines = ["# Hybrid RF against the budget", "", f"Command: `{command}`.", "",
             "| budget | cells with HEP-1 | RF ≤ HEP-1 | mean RF / HEP-1 | max RF / HEP-1 | mean RF / stream "
             "| mean held share | mean B/e |", "|---|---|---|---|---|---|---|---|"]
    stream = {(r["dataset"], r["order"], r["k"]): r["rf"] for r in rows if r["budget"] == "stream"}
    for budget in dict.fromkeys(r["budget"] for r in rows if r["budget"] != "stream"):
        chosen = [r for r in rows if r["budget"] == budget and r["prefer"] == DEFAULT_PREFER and r["mixed"]]
        ref = [r for r in chosen if r["hep1"] == r["hep1"]]
        ratios = [r["rf"] / r["hep1"] for r in ref]
        to_stream = [r["rf"] / stream[(r["dataset"], r["order"], r["k"])] for r in chosen
                     if (r["dataset"], r["order"], r["k"]) in stream]
        lines.append(f"| {budget} | {len(ref)} | {sum(x <= 1 for x in ratios)} | {np.mean(ratios):.3f} "
                     f"| {max(ratios):.3f} | {np.mean(to_stream):.3f} | {np.mean([r['held_share'] for r in chosen]):.2f} "
                     f"| {np.mean([r['bytes_per_edge'] for r in chosen]):.1f} |")
    (out / "sweep.md").write_text("\n".join(lines) + "\n")


def _ablation(rows: list[dict]) -> list[str]:
    """Mean RF ratio and cells won of each variant against the default, per budget."""
    lines = ["## Ablation (RF of the variant / RF of the default, same cell)", "",
             "| budget | variant | cells | mean RF ratio | variant lower | default lower | mean homogeneity "
             "(variant / default) |", "|---|---|---|---|---|---|---|"]
    base = {(r["dataset"], r["order"], r["k"], r["budget"]): r["rf"] for r in rows
            if r["prefer"] == DEFAULT_PREFER and r["mixed"]}
    hom = {(r["dataset"], r["order"], r["k"], r["budget"]): r["attr_homogeneity"] for r in rows
           if r["prefer"] == DEFAULT_PREFER and r["mixed"]}
    for budget in ("small", "whole"):
        for prefer, mixed in (("attr", True), ("none", True), ("attr", False), ("none", False)):
            if prefer == DEFAULT_PREFER and mixed:
                continue
            chosen = [r for r in rows if r["budget"] == budget and r["prefer"] == prefer and r["mixed"] == mixed
                      and (r["dataset"], r["order"], r["k"], budget) in base]
            ratios = [r["rf"] / base[(r["dataset"], r["order"], r["k"], budget)] for r in chosen]
            homs = [r["attr_homogeneity"] for r in chosen]
            base_homs = [hom[(r["dataset"], r["order"], r["k"], budget)] for r in chosen]
            if ratios:
                lines.append(f"| {budget} | prefer={prefer}, mixed={mixed} | {len(ratios)} | "
                             f"{np.mean(ratios):.4f} | {sum(x < 1 for x in ratios)} | {sum(x > 1 for x in ratios)} | "
                             f"{np.mean(homs):.3f} / {np.mean(base_homs):.3f} |")
    return lines + [""]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--datasets", nargs="+", default=DATASETS)
    ap.add_argument("--orders", nargs="+", default=["natural", "shuffled"])
    ap.add_argument("--ks", nargs="+", type=int, default=[4, 8, 16, 32])
    ap.add_argument("--budgets", nargs="+", default=["stream", "small", "whole"])
    ap.add_argument("--prefer", nargs="+", choices=["attr", "community", "none"], default=[DEFAULT_PREFER])
    ap.add_argument("--algo", default="asep")
    ap.add_argument("--mixed", nargs="+", choices=["yes", "no"], default=["yes"],
                    help="hold the low-high edges too (HEP) or only the low-low ones")
    ap.add_argument("--input", type=Path, help="one input directory instead of the datasets")
    ap.add_argument("--out", type=Path, default=None, help="where hybrid.csv goes (none: print only)")
    ap.add_argument("--report-only", action="store_true", help="rewrite hybrid.md from OUT/hybrid.csv")
    ap.add_argument("--command", help="with --report-only: the command that wrote hybrid.csv")
    args = ap.parse_args(argv)
    if args.report_only:
        with open(args.out / "hybrid.csv") as f:
            rows = [_typed(r) for r in csv.DictReader(f)]
        write_report(rows, args.out, args.command or "unknown")
        return 0
    prefs = args.prefer
    ref = reference()
    rows = []
    cells = ([("input", "natural", args.input)] if args.input else
             [(d, o, input_path(d, o)) for d in args.datasets for o in args.orders])
    for name, order, path in cells:
        for k in args.ks:
            prep = Prepared(path, k, args.algo)
            for bname in args.budgets:
                for pref, mixed in [(p, m == "yes") for p in prefs for m in args.mixed] if bname != "stream" \
                        else [("none", True)]:
                    with tempfile.TemporaryDirectory(dir="/work/scratch/hybrid") as wd:
                        state, info, seconds = prep.assign(budget_bytes(bname, prep), Path(wd), pref, mixed)
                    rf = replication_factor(state, prep.degree)
                    row = {
                        "dataset": name, "order": order, "k": k, "budget": bname, "prefer": pref, "mixed": mixed,
                        "budget_bytes": info.budget_bytes, "held_bytes": info.held_bytes,
                        "bytes_per_edge": info.held_bytes / prep.num_edges, "threshold": info.threshold,
                        "held_share": info.held_edges / prep.num_edges, "rf": rf,
                        "edge_balance": float(state.loads.max() / (state.loads.sum() / k)),
                        "attr_homogeneity": attribute_homogeneity(state, prep.attr_ids),
                        "max_load_le_cap": bool(state.loads.max() <= prep.settings.cap),
                        "hep1": ref.get((name, order, k, "hep-1 (in memory)"), float("nan")),
                        "hep100": ref.get((name, order, k, "hep-100 (in memory)"), float("nan")),
                        "2ps_hdrf": ref.get((name, order, k, "2ps-hdrf"), float("nan")),
                        "seconds": seconds, "expansion_s": info.expansion_seconds,
                        "kernel_s": info.kernel_seconds, "build_s": info.build_seconds, "peak_rss_mib": peak_rss_bytes() / 2**20,
                    }
                    rows.append(row)
                    print(f"{name:18s} {order:8s} k={k:<3d} {bname:6s} {pref:9s} mixed={int(mixed)} RF {rf:.4f} "
                          f"bal {row['edge_balance']:.4f} hom {row['attr_homogeneity']:.3f} held {row['held_share']:.3f} "
                          f"{row['bytes_per_edge']:.2f} B/e t={info.threshold} "
                          f"HEP-1 {row['hep1']:.4f} HEP-100 {row['hep100']:.4f} {seconds:.2f}s (build {info.build_seconds:.2f}, "
                          f"expand {info.expansion_seconds:.2f}, kernel {info.kernel_seconds:.2f})", flush=True)
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        with open(args.out / "hybrid.csv", "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=list(rows[0]))
            w.writeheader()
            w.writerows(rows)
        command = "python docs/results/hybrid/hybrid_bench.py " + " ".join(argv or sys.argv[1:])
        if {"small", "whole"} <= {r["budget"] for r in rows}:
            write_report(rows, args.out, command)
        else:
            write_sweep(rows, args.out, command)
    return 0


if __name__ == "__main__":
    sys.exit(main())
