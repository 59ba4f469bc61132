"""Attribute clustering before and after the sampled fit: seconds, inertia, and ASEP's RF.

Run once per implementation, each in its own process, then merge (see README.md)::

    PYTHONPATH=<old checkout> python compare.py run --label old
    python compare.py run --label new
    PYTHONPATH=<old checkout> python compare.py seeds --label old
    python compare.py seeds --label new
    python compare.py table

``run`` clusters every input with the arguments ``asepr partition`` passes
(``PartitionConfig`` defaults, C = k, seed 0, the threaded scheduler), timing the call
(wall, and CPU of the whole process: user + system), then partitions the benchmark graphs
with ``asep`` from those clusters, in both edge orders, and records the replication
factor. It uses only public names that both implementations have. Rows go to
``rows-<label>.json`` next to this file. ``seeds`` clusters tolokers (the benchmark graph
whose inertia varies most between seeds) with seeds 0-7 at each k, into
``seeds-<label>.json``. ``table`` writes ``kmeans.md`` from these files.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import time
from dataclasses import replace
from pathlib import Path

HERE = Path(__file__).resolve().parent
BENCH = ["amazon-computers", "coauthor-physics", "tolokers", "facebook-pagepage", "cora"]
KS = [4, 8, 16, 32]


def _cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def _cluster(path: Path, k: int, base) -> tuple[dict, object]:
    """Cluster one input as ``asepr partition`` would; the row and the clusters."""
    from pipeline import attribute_clusters
    from storage.inputs.directory import open_input, read_meta

    source = open_input(path)
    num_nodes = int(read_meta(path)["num_nodes"])
    config = replace(base, num_parts=k)
    cpu0, wall0 = _cpu(), time.perf_counter()
    attr = attribute_clusters(
        source.node_shards, num_nodes, config.attr_clusters, seed=config.seed,
        max_passes=config.kmeans_max_passes, tol=config.kmeans_tol,
        sample_size=config.kmeans_sample, projection_dim=config.projection_dim,
        projection_threshold=config.projection_threshold,
    )
    row = {"k": k, "clusters": attr.num_clusters, "nodes": num_nodes,
           "wall_s": time.perf_counter() - wall0, "cpu_s": _cpu() - cpu0,
           "inertia": attr.inertia, "passes": attr.passes, "converged": attr.converged}
    return row, attr


def _rf(path: Path, k: int, attr, base) -> float:
    from pipeline import compute_degrees, partition
    from storage.inputs.directory import open_input, read_meta

    source = open_input(path)
    degrees = compute_degrees(source.edge_shards, int(read_meta(path)["num_nodes"]))
    config = replace(base, num_parts=k, algo="asep")
    with partition(source, config=config, attr=attr, degrees=degrees, validate=False) as a:
        return float(a.metrics["replication_factor"])


def run(label: str, datasets: list[str], synthetic: list[str], cache: Path) -> None:
    import pipeline
    from pipeline import PartitionConfig
    from workflows.bench.partition import ordered_inputs

    base = PartitionConfig(num_parts=2, seed=0)
    out = HERE / f"rows-{label}.json"
    doc = {"label": label, "module": str(Path(pipeline.__file__).parent),
           "machine": {"cores": os.cpu_count(), "python": platform.python_version()}, "rows": []}
    for path in synthetic:
        row, _ = _cluster(Path(path), 16, base)
        doc["rows"].append({"dataset": Path(path).name, **row})
        print(doc["rows"][-1], flush=True)
    for name in datasets:
        paths = ordered_inputs(name, ("shuffled", "natural"), cache, 0)
        for k in KS:
            row, attr = _cluster(paths["natural"], k, base)
            for order in ("shuffled", "natural"):
                row[f"rf_{order}"] = _rf(paths[order], k, attr, base)
            doc["rows"].append({"dataset": name, **row})
            print(doc["rows"][-1], flush=True)
    out.write_text(json.dumps(doc, indent=1) + "\n")


def seeds(label: str, dataset: str, cache: Path, num_seeds: int = 8) -> None:
    from pipeline import PartitionConfig
    from workflows.bench.partition import ordered_inputs

    path = ordered_inputs(dataset, ("natural",), cache, 0)["natural"]
    rows = []
    for k in KS:
        for seed in range(num_seeds):
            row, _ = _cluster(path, k, PartitionConfig(num_parts=2, seed=seed))
            rows.append({"dataset": dataset, "seed": seed, **row})
            print(rows[-1], flush=True)
    (HERE / f"seeds-{label}.json").write_text(json.dumps({"label": label, "rows": rows}, indent=1) + "\n")


def _seed_table() -> list[str]:
    if not all((HERE / f"seeds-{x}.json").exists() for x in ("old", "new")):
        return []
    lines = ["| dataset | k=C | old: mean | old: min | old: max | new: mean | new: min | new: max | "
             "new mean / old mean - 1 |", "|---|---|---|---|---|---|---|---|---|"]
    docs = {x: json.loads((HERE / f"seeds-{x}.json").read_text())["rows"] for x in ("old", "new")}
    for dataset, k in sorted({(r["dataset"], r["k"]) for r in docs["new"]}, key=lambda t: (t[0], t[1])):
        stats = {}
        for x, rows in docs.items():
            vals = [r["inertia"] for r in rows if r["dataset"] == dataset and r["k"] == k]
            stats[x] = (sum(vals) / len(vals), min(vals), max(vals), len(vals))
        o, n = stats["old"], stats["new"]
        lines.append(f"| {dataset} | {k} | {o[0]:.5g} | {o[1]:.5g} | {o[2]:.5g} | {n[0]:.5g} | {n[1]:.5g} | "
                     f"{n[2]:.5g} | {n[0] / o[0] - 1:+.2%} |")
    return ["", f"Inertia over seeds 0-{o[3] - 1} (`compare.py seeds`):", "", *lines]


def _fmt(v, spec: str) -> str:
    return "" if v is None else format(v, spec)


def table() -> None:
    old = json.loads((HERE / "rows-old.json").read_text())
    new = json.loads((HERE / "rows-new.json").read_text())
    by_key = {(r["dataset"], r["k"]): r for r in old["rows"]}
    lines = [
        "| dataset | k=C | nodes | wall s old | wall s new | CPU s old | CPU s new | inertia old | "
        "inertia new | new/old - 1 | passes old/new | RF shuffled old | RF shuffled new | "
        "RF natural old | RF natural new |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for n in new["rows"]:
        o = by_key[(n["dataset"], n["k"])]
        rel = n["inertia"] / o["inertia"] - 1.0 if o["inertia"] else 0.0
        lines.append(
            f"| {n['dataset']} | {n['k']} | {n['nodes']:,} | {o['wall_s']:.2f} | {n['wall_s']:.2f} | "
            f"{o['cpu_s']:.2f} | {n['cpu_s']:.2f} | {o['inertia']:.6g} | {n['inertia']:.6g} | "
            f"{rel:+.3%} | {o['passes']}/{n['passes']} | {_fmt(o.get('rf_shuffled'), '.3f')} | "
            f"{_fmt(n.get('rf_shuffled'), '.3f')} | {_fmt(o.get('rf_natural'), '.3f')} | "
            f"{_fmt(n.get('rf_natural'), '.3f')} |"
        )
    notes = [
        "# Attribute clustering: old (full Lloyd passes over a spill) vs new (sampled fit, one labelling pass)",
        "",
        f"old: `{old['module']}`.",
        f"new: `{new['module']}`.",
        "",
        "Inertia is the full-data inertia of the final labels (sum over every node of the squared "
        "distance between its embedded row and its centroid). CPU is user + system of the whole "
        "process during the call (threaded scheduler). RF is `asep` at k partitions from these "
        "clusters, C = k.",
        "",
        *lines,
        *_seed_table(),
        "",
    ]
    (HERE / "kmeans.md").write_text("\n".join(notes))
    print("\n".join(notes))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run")
    r.add_argument("--label", required=True)
    r.add_argument("--datasets", nargs="*", default=BENCH)
    r.add_argument("--synthetic", nargs="*", default=["/work/scratch/s50", "/work/scratch/s20"])
    r.add_argument("--cache", type=Path, default=Path("/work/scratch/kmeans/inputs"))
    sd = sub.add_parser("seeds")
    sd.add_argument("--label", required=True)
    sd.add_argument("--dataset", default="tolokers")
    sd.add_argument("--cache", type=Path, default=Path("/work/scratch/kmeans/inputs"))
    sub.add_parser("table")
    args = parser.parse_args()
    if args.cmd == "run":
        run(args.label, args.datasets, args.synthetic, args.cache)
    elif args.cmd == "seeds":
        seeds(args.label, args.dataset, args.cache)
    else:
        table()


if __name__ == "__main__":
    main()
