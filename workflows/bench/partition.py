"""`asepr bench partition`: every partitioner side by side, on the same inputs, in one process."""

from __future__ import annotations

import hashlib
import json
import logging
import time
from dataclasses import replace
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from asepr.pipeline import PartitionConfig, attribute_clusters, compute_degrees, partition, shuffle_edges
from asepr.pipeline.config import TUNING_SET
from asepr.storage.inputs.directory import open_input, read_meta
from asepr.storage.resources import peak_rss_bytes
from asepr.workflows.bench.tables import machine_info, markdown_table, pyplot, save_figure
from asepr.workflows.datasets import reference_rf, resolve_dataset

__all__ = ["algo_order", "bench_partition", "hybrid_label", "ordered_inputs", "partition_memory_plots", "partition_plots",
           "partition_summary"]

log = logging.getLogger(__name__)


def bench_partition(
    datasets: list[str],
    ks: list[int],
    algos: list[str],
    out: Path,
    *,
    orders: tuple[str, ...] = ("shuffled", "natural"),
    cache: Path | None = None,
    seed: int = 0,
    base: PartitionConfig | None = None,
    budgets: tuple[float, ...] = (),
    echo=print,
) -> list[dict]:
    """Partition every dataset × order × k × algorithm; write ``partition.md`` and ``.parquet``.

    Degrees and attribute clusters are computed once per (dataset, order, k) and
    shared by every algorithm, so the algorithms differ only in what they do with
    them; their time is reported separately (``prep_s``). Each of ``budgets`` (bytes
    per edge of the graph) adds ASEP's hybrid with ``memory_budget = budget × |E|``
    (algorithm ``asep hybrid B B/e``).
    """
    out.mkdir(parents=True, exist_ok=True)
    cache = cache or out / "inputs"
    cache.mkdir(parents=True, exist_ok=True)
    base = base or PartitionConfig(num_parts=2)
    rows: list[dict] = []
    started = time.strftime("%Y-%m-%d %H:%M:%S")
    for name in datasets:
        paths = ordered_inputs(name, orders, cache, seed)
        num_nodes = int((read_meta(paths["natural"]) or {})["num_nodes"])
        for order in orders:
            t0 = time.perf_counter()
            source = open_input(paths[order])
            degrees = compute_degrees(source.edge_shards, num_nodes)
            degree_s = time.perf_counter() - t0
            for k in ks:
                config_k = replace(base, num_parts=k, seed=seed)
                t0 = time.perf_counter()
                attr = attribute_clusters(
                    source.node_shards, num_nodes, config_k.attr_clusters, seed=seed,
                    max_passes=config_k.kmeans_max_passes, tol=config_k.kmeans_tol,
                    sample_size=config_k.kmeans_sample, projection_dim=config_k.projection_dim,
                    projection_threshold=config_k.projection_threshold,
                )
                prep_s = degree_s + time.perf_counter() - t0
                runs = [(algo, replace(config_k, algo=algo)) for algo in algos]
                # The hybrid's own result: without the two-phase fallback, which would
                # otherwise report 2PS-HDRF's RF beside the hybrid's memory.
                runs += [(hybrid_label(b), replace(config_k, algo="asep", memory_budget=int(b * degrees.num_edges),
                                                   two_phase_fallback=False))
                         for b in budgets]
                for label, config in runs:
                    t0 = time.perf_counter()
                    with partition(source, config=config, attr=attr, degrees=degrees, validate=False) as a:
                        row = _partition_row(a, config, time.perf_counter() - t0, dataset=name, order=order,
                                             num_nodes=num_nodes, prep_s=prep_s, label=label)
                    rows.append(row)
                    echo(
                        f"{name:18s} {order:8s} k={k:<3d} {label:9s} RF {row['rf']:.3f}  "
                        f"bal {row['edge_balance']:.3f}  hom {row['attr_homogeneity']:.3f}  "
                        f"{row['seconds']:.2f} s"
                    )
    _write_partition_report(rows, out, started=started, datasets=datasets, ks=ks, orders=orders, seed=seed,
                            base=base)
    return rows


def ordered_inputs(name: str, orders: tuple[str, ...], cache: Path, seed: int) -> dict[str, Path]:
    """The input of a dataset in each edge order, as ``asepr bench partition`` streams it.

    Parameters
    ----------
    name
        A shared dataset name (imported into ``cache`` once) or an input directory.
    orders
        ``"natural"`` and/or ``"shuffled"``.
    cache
        Where the imported and the shuffled copies are kept.
    seed
        The shuffle's seed (:func:`asepr.pipeline.shuffle_edges`).

    Returns
    -------
    dict
        The input directory per order (``"natural"`` always).
    """
    natural = resolve_dataset(name, cache)
    paths = {"natural": natural}
    if "shuffled" in orders:
        # Key the cached copy by the source's absolute path too: two inputs may share a
        # directory name.
        source_key = hashlib.sha256(str(Path(natural).resolve()).encode()).hexdigest()[:8]
        shuffled = cache / f"{Path(natural).name}-{source_key}-shuffled-{seed}"
        if not (shuffled / "meta.json").exists():
            shuffle_edges(natural, shuffled, seed=seed, overwrite=True)
        paths["shuffled"] = shuffled
    return paths


def algo_order(algo: str) -> tuple:
    """Report order: ``asep``, its hybrids by budget, then the baselines by name."""
    if algo.startswith("asep hybrid "):
        return (1, float(algo.split()[2]), algo)
    return (0 if algo == "asep" else 2, 0.0, algo)


def hybrid_label(bytes_per_edge: float) -> str:
    """The ``algo`` of ASEP's hybrid at a budget of ``bytes_per_edge`` in the partition benchmark."""
    return f"asep hybrid {bytes_per_edge:g} B/e"


def _partition_row(a, config: PartitionConfig, seconds: float, *, dataset: str, order: str, num_nodes: int,
                   prep_s: float, label: str) -> dict:
    """One row of the partition benchmark: run ``a`` of ``config`` (as given), its quality and speed."""
    m = a.metrics
    kernel = a.timings.get("assignment kernel", 0.0)
    streaming = kernel + a.timings.get("clustering kernel", 0.0)
    return {
        "dataset": dataset, "order": order, "k": config.num_parts, "algo": label,
        "nodes": num_nodes, "edges": a.num_edges,
        "rf": m["replication_factor"], "edge_balance": m["edge_balance"],
        "vertex_balance": m["vertex_balance"],
        "attr_homogeneity": m["attribute_homogeneity"],
        "one_hop_locality": m["one_hop_locality"],
        "label_entropy": m["label_entropy_mean"],
        "seconds": seconds, "prep_s": prep_s,
        "kernel_edges_per_s": a.num_edges / kernel if kernel > 0 else float("nan"),
        "streaming_edges_per_s": a.num_edges / streaming if streaming > 0 else float("nan"),
        "peak_rss_mib": peak_rss_bytes() / 2**20,
        "attr_clusters": a.attr.num_clusters, "alpha": config.alpha,
        "beta": config.beta, "scoring": config.scoring, "seed": config.seed,
        # ASEP's own stream and whether the two-phase fallback replaced it (NaN / "" otherwise).
        "asep_stream_rf": m.get("two_phase_fallback", {}).get("asep_rf", float("nan")),
        "kept": m.get("two_phase_fallback", {}).get("chosen", ""),
        # The assignment's memory: the kernel's per-vertex rows plus what the hybrid held.
        "assignment_mib": m.get("assignment_memory_bytes", 0) / 2**20,
        "memory_budget_mib": config.memory_budget / 2**20,
    }


def _write_partition_report(rows: list[dict], out: Path, *, started: str, datasets: list[str], ks: list[int],
                            orders: tuple[str, ...], seed: int, base: PartitionConfig) -> None:
    """``partition.parquet``, ``partition.md`` (table, plots) and ``partition-summary.md``."""
    table = pa.Table.from_pylist(rows)
    pq.write_table(table, out / "partition.parquet")
    columns = ["dataset", "order", "k", "algo", "rf", "edge_balance", "vertex_balance",
               "attr_homogeneity", "one_hop_locality", "label_entropy", "seconds", "prep_s",
               "kernel_edges_per_s", "streaming_edges_per_s", "assignment_mib", "peak_rss_mib"]
    info = machine_info()
    text = [
        "# asepr bench partition",
        "",
        f"Run {started}; seed {seed}; command: `asepr bench partition` "
        f"({', '.join(datasets)}; k = {', '.join(map(str, ks))}; orders {', '.join(orders)}).",
        f"Configuration (k varies; C = {base.num_attr_clusters or 'k'}): "
        f"{json.dumps({k: v for k, v in base.to_dict().items() if k not in ('num_parts', 'num_attr_clusters', 'extra')}, default=str)}.",
        f"Machine: {json.dumps(info)}.",
        "`kernel_edges_per_s` is the assignment kernel alone and `streaming_edges_per_s` "
        "clustering plus assignment kernels (Parquet decoding excluded, JIT warm). "
        "`seconds` is the partition() call with degrees and attribute clusters precomputed "
        "(their time is `prep_s`, shared by all algorithms); `peak_rss_mib` is the process "
        "high-water mark so far; `assignment_mib` is the assignment's own memory (the kernel's "
        "per-vertex rows plus what a hybrid held).",
        "",
        markdown_table(rows, columns),
        "",
    ]
    plots = partition_plots(rows, out) + partition_memory_plots(rows, out, reference_rf())
    text += [f"![{name}]({name})" for name in plots] + [""]
    (out / "partition.md").write_text("\n".join(text))
    (out / "partition-summary.md").write_text(partition_summary(rows, reference_rf(), tuned_on=TUNING_SET))


def partition_plots(rows: list[dict], out: Path) -> list[str]:
    """One PNG per dataset and edge order: replication factor against k, a line per
    algorithm (log-scaled k axis). Returns the file names written (none without matplotlib)."""
    plt = pyplot()
    if plt is None:
        return []
    names = []
    for dataset, order in dict.fromkeys((r["dataset"], r["order"]) for r in rows):
        cell = [r for r in rows if r["dataset"] == dataset and r["order"] == order]
        fig, ax = plt.subplots(figsize=(6.4, 4.2))
        for algo in sorted({r["algo"] for r in cell}, key=algo_order):
            points = sorted((r["k"], r["rf"]) for r in cell if r["algo"] == algo)
            ax.plot([k for k, _ in points], [rf for _, rf in points], marker="o", markersize=3, label=algo,
                    linewidth=2.2 if algo == "asep" else 1.2)
        ks = sorted({r["k"] for r in cell})
        ax.set_xscale("log", base=2)
        ax.set_xticks(ks, [str(k) for k in ks])
        ax.set_xlabel("k (partitions)")
        ax.set_ylabel("replication factor (lower is better)")
        label = Path(str(dataset)).name  # an input given as a path is named by its directory
        ax.set_title(f"{label}, {order} edge order")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
        name = f"partition-{label}-{order}-rf.png"
        save_figure(fig, out / name, dpi=100)
        names.append(name)
    return names


def _hybrid_lines(cells: dict, algos: list[str], reference: dict, order: str) -> list[str]:
    """Per hybrid budget: cells with RF <= HEP-1's and <= 1.1 x HEP-100's (reference file)."""
    lines = []
    for algo in (a for a in algos if a.startswith("asep hybrid ")):
        for ref_algo, factor in (("hep-1 (in memory)", 1.0), ("hep-100 (in memory)", 1.1)):
            hits = [round(c[algo]["rf"], 4) <= factor * reference[(d, order, k, ref_algo)]
                    for (d, k), c in sorted(cells.items()) if algo in c and (d, order, k, ref_algo) in reference]
            if hits:
                bound = ref_algo.split()[0].upper() + ("'s" if factor == 1.0 else f"'s x {factor:g}")
                lines.append(f"{algo}: RF no higher than {bound} in {sum(hits)} of {len(hits)} cells.")
    return lines


def partition_memory_plots(rows: list[dict], out: Path, reference: dict) -> list[str]:
    """One PNG per dataset and edge order, a panel per k: RF against the assignment's
    memory (the kernel's per-vertex rows plus what the hybrid held; log scale), a point
    per algorithm, ASEP's streaming and hybrid runs joined, and HEP's published RF
    (reference file) as horizontal lines (its memory on these graphs is not measured here)."""
    plt = pyplot()
    if plt is None or not any(r.get("assignment_mib") for r in rows):
        return []
    from matplotlib.ticker import FuncFormatter
    names = []
    for dataset, order in dict.fromkeys((r["dataset"], r["order"]) for r in rows):
        cell = [r for r in rows if r["dataset"] == dataset and r["order"] == order]
        ks = sorted({r["k"] for r in cell})
        cols = min(2, len(ks))
        fig, axes = plt.subplots(-(-len(ks) // cols), cols, figsize=(5.2 * cols, 3.8 * -(-len(ks) // cols)),
                                 squeeze=False)
        for ax, k in zip(axes.flat, ks):
            here = sorted((r for r in cell if r["k"] == k), key=lambda r: algo_order(r["algo"]))
            for r in here:
                ax.scatter(r["assignment_mib"], r["rf"], s=18)
                ax.annotate(r["algo"].replace("asep hybrid ", "hybrid "), (r["assignment_mib"], r["rf"]),
                            fontsize=6, xytext=(3, 2), textcoords="offset points")
            asep = sorted(((r["assignment_mib"], r["rf"]) for r in here if r["algo"].startswith("asep")))
            ax.plot([x for x, _ in asep], [y for _, y in asep], linewidth=1.5, color="black", alpha=0.6)
            for ref_algo, style in (("hep-1 (in memory)", "--"), ("hep-100 (in memory)", ":")):
                if (dataset, order, k, ref_algo) in reference:
                    ax.axhline(reference[(dataset, order, k, ref_algo)], linestyle=style, color="tab:red",
                               linewidth=1, label=f"{ref_algo.split()[0].upper()} (published RF)")
            ax.set_xscale("log")
            plain = FuncFormatter(lambda x, _: f"{x:g}")
            ax.xaxis.set_major_formatter(plain)
            ax.xaxis.set_minor_formatter(plain)
            ax.tick_params(axis="x", which="both", labelsize=6)
            ax.set_title(f"k = {k}", fontsize=9)
            ax.set_xlabel("assignment memory, MiB (log)", fontsize=8)
            ax.set_ylabel("replication factor", fontsize=8)
            ax.grid(alpha=0.3)
            if ax.get_legend_handles_labels()[0]:
                ax.legend(fontsize=6)
        for ax in list(axes.flat)[len(ks):]:
            ax.set_visible(False)
        label = Path(str(dataset)).name
        fig.suptitle(f"{label}, {order} edge order: RF against memory", fontsize=10)
        name = f"partition-{label}-{order}-memory.png"
        save_figure(fig, out / name, dpi=100)
        names.append(name)
    return names


#: Reference columns of :func:`partition_summary` (algorithm names in the reference file).
REFERENCE_ALGOS = ("2ps-hdrf", "hep-1 (in memory)", "hep-100 (in memory)")


def partition_summary(rows: list[dict], reference: dict | None = None, tuned_on: tuple[str, ...] = ()) -> str:
    """Replication factor per algorithm, ASEP against the best structural baseline.

    One table per edge order: rows dataset × k, a column per algorithm, then whether
    ASEP's RF is no higher than the best of 2ps-l, 2ps-hdrf and hdrf, and ASEP's
    attribute homogeneity as a multiple of hash's. With ``reference``
    (:func:`asepr.workflows.datasets.reference_rf`), the published algorithms' RF on the same
    stream where it has them (``ref ...`` columns) and whether ASEP is no higher than
    the original 2PS-HDRF. With ASEP's two-phase fallback, ASEP's own stream's RF and
    which stream was kept. Datasets in ``tuned_on`` (ASEP's defaults were chosen on
    them) are marked.
    """
    reference = reference or {}
    out = ["# Replication factor by algorithm (lower is better)", ""]
    algos = sorted({r["algo"] for r in rows}, key=algo_order)
    for order in sorted({r["order"] for r in rows}, reverse=True):
        cells: dict = {}
        for r in rows:
            if r["order"] == order:
                cells.setdefault((r["dataset"], r["k"]), {})[r["algo"]] = r
        refs = [a for a in REFERENCE_ALGOS if any((d, order, k, a) in reference for d, k in cells)]
        fallback = any(c.get("asep", {}).get("kept") for c in cells.values())
        header = ["dataset", "k", *algos, *(["asep's own stream", "kept"] if fallback else []),
                  "asep <= best of 2ps-l/2ps-hdrf/hdrf", "homogeneity asep/hash",
                  *[f"ref {a}" for a in refs], *(["asep <= ref 2ps-hdrf"] if "2ps-hdrf" in refs else [])]
        lines = [f"## {order} edge order", "", "| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
        wins = hom = total = ref_wins = ref_total = replaced = 0
        for (dataset, k), c in sorted(cells.items()):
            base = [c[a]["rf"] for a in ("2ps-l", "2ps-hdrf", "hdrf") if a in c]
            win = "asep" in c and bool(base) and c["asep"]["rf"] <= min(base)
            ratio = (
                c["asep"]["attr_homogeneity"] / c["hash"]["attr_homogeneity"]
                if "asep" in c and "hash" in c and c["hash"]["attr_homogeneity"] > 0
                else float("nan")
            )
            wins += win
            hom += ratio >= 1.5
            total += 1
            values = [f"{c[a]['rf']:.3f}" if a in c else "" for a in algos]
            if fallback:
                own = c.get("asep", {})
                values += [f"{own.get('asep_stream_rf', float('nan')):.3f}", own.get("kept", "")]
                replaced += own.get("kept") == "2ps-hdrf"
            values += [f"{'yes' if win else 'no'}", f"{ratio:.2f}"]
            values += [f"{reference[(dataset, order, k, a)]:.3f}" if (dataset, order, k, a) in reference else ""
                       for a in refs]
            if "2ps-hdrf" in refs:
                ref = reference.get((dataset, order, k, "2ps-hdrf"))
                # At the file's precision (4 decimals).
                ok = ref is not None and "asep" in c and round(c["asep"]["rf"], 4) <= ref
                ref_wins += ok
                ref_total += ref is not None and "asep" in c
                values.append("" if ref is None else ("yes" if ok else "no"))
            name = f"{dataset} (tuned on)" if dataset in tuned_on else dataset
            lines.append(f"| {name} | {k} | " + " | ".join(values) + " |")
        lines += ["", f"ASEP no higher than the best baseline in {wins} of {total} cells; "
                      f"homogeneity at least 1.5x hash in {hom} of {total}."]
        if fallback:
            lines.append(f"The two-phase fallback replaced ASEP's own stream in {replaced} of {total} cells.")
        if ref_total:
            lines.append(f"ASEP no higher than the original 2PS-HDRF (reference file) in {ref_wins} of {ref_total} cells.")
        lines += _hybrid_lines(cells, algos, reference, order)
        out += lines + [""]
    return "\n".join(out)
