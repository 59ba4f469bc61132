"""The published two-phase baselines (``2ps-l``, ``2ps-hdrf``): rules and reference quality."""

from __future__ import annotations

import csv
import math
from pathlib import Path

import numpy as np
import pytest

from asepr.pipeline import partition
from asepr.pipeline.stages.attr_cluster import AttrClusters
from asepr.pipeline.stages.degrees import compute_degrees
from asepr.storage.inputs.directory import open_input, read_meta
from tests.pipeline.test_assign import community_terms, run_kernel

TWO_PHASE = ["2ps-l", "2ps-hdrf"]


def planted_graph(seed: int, n: int, m: int, groups: int, inside: float) -> tuple[np.ndarray, np.ndarray]:
    """``m`` edges over ``n`` vertices in ``groups`` groups (``v % groups``), a share ``inside`` within one."""
    rng = np.random.default_rng(seed)
    src = rng.integers(0, n, m)
    dst = rng.integers(0, n, m)
    same = rng.random(m) < inside
    dst[same] = dst[same] - dst[same] % groups + src[same] % groups
    dst[dst >= n] -= groups
    return src, dst


def reference_two_phase(algo, src, dst, part, volume, degree, k, cap):
    """The two phases written plainly, edge by edge (the rules of asepr.pipeline.assign.twophase)."""
    loads = [0] * k
    replicas = [set() for _ in degree]
    out = [-1] * len(src)

    def fallback(u, v):
        p = (u if degree[u] > degree[v] else v) % k
        return p if loads[p] < cap else loads.index(min(loads))

    def place(i, p):
        out[i] = p
        loads[p] += 1
        replicas[src[i]].add(p)
        replicas[dst[i]].add(p)

    for i, (u, v) in enumerate(zip(src, dst)):
        if part[u] == part[v]:
            place(i, part[u] if loads[part[u]] < cap else fallback(u, v))
    for i, (u, v) in enumerate(zip(src, dst)):
        if part[u] == part[v]:
            continue
        g = {x: 1.0 + (1.0 - degree[x] / (degree[u] + degree[v])) for x in (u, v)}
        if algo == "2ps-l":
            if loads[part[u]] >= cap or loads[part[v]] >= cap:
                place(i, fallback(u, v))
                continue
            scores = []
            for p in (part[u], part[v]):
                s = 0.0
                for x in (u, v):
                    if p in replicas[x]:
                        s += g[x] + (volume[x] / (volume[u] + volume[v]) if part[x] == p else 0.0)
                scores.append(s)
            place(i, part[v] if scores[1] >= scores[0] else part[u])
        else:
            top = max(loads)
            scores = [sum(g[x] for x in (u, v) if p in replicas[x]) + (top - loads[p]) / max(top, 1)
                      if loads[p] < cap else -1.0 for p in range(k)]
            place(i, scores.index(max(scores)))
    return out


@pytest.mark.parametrize("algo", TWO_PHASE)
def test_two_phase_matches_a_plain_reference_on_a_cora_sized_graph(algo):
    # 2708 vertices, 10556 edges (cora's size) in 16 planted groups.
    n, k = 2708, 8
    src, dst = planted_graph(7, n, 10556, 16, 0.9)
    out, state, cap, degree = run_kernel(algo, src, dst, n, k, batch=1000)
    part, volume, _ = community_terms(algo, src, dst, n, k, batch=1000)
    loads = np.bincount(out, minlength=k)
    assert loads.tolist() == state.loads.tolist()
    assert loads.max() <= cap == math.ceil(1.05 * len(src) / k)
    assert (part[src] == part[dst]).mean() > 0.3  # phase 1 has work to do
    expected = reference_two_phase(algo, src.tolist(), dst.tolist(), part.tolist(), volume.tolist(),
                                   degree.tolist(), k, cap)
    assert out.tolist() == expected
    # The same stream gives the same assignment, whatever the batch size.
    again, _, _, _ = run_kernel(algo, src, dst, n, k, batch=333)
    assert again.tolist() == out.tolist()


def _reference(datasets_dir: Path) -> dict[tuple[str, str, int, str], float]:
    path = datasets_dir.parent / "anchors" / "reference-rf.csv"
    if not path.exists():
        pytest.skip(f"needs the reference replication factors {path}, kept beside the published datasets "
                    f"($ASEPR_DATASETS/../anchors/reference-rf.csv)")
    with open(path, newline="") as fh:
        return {(r["dataset"], r["order"], int(r["k"]), r["algorithm"]): float(r["replication_factor"])
                for r in csv.DictReader(fh)}


#: (dataset, order, k): two graphs, two values of k each, both orders.
CELLS = [
    ("amazon-computers", "natural", 8), ("amazon-computers", "shuffled", 32),
    ("tolokers", "shuffled", 4), ("tolokers", "shuffled", 16),
]


def test_two_phase_matches_the_reference_rf(datasets_dir, tmp_path_factory, monkeypatch):
    from asepr.workflows.bench.partition import ordered_inputs

    monkeypatch.setenv("ASEPR_DATASETS", str(datasets_dir))
    reference = _reference(datasets_dir)
    cache = tmp_path_factory.mktemp("two-phase-inputs")
    misses = []
    for name in sorted({c[0] for c in CELLS}):
        paths = ordered_inputs(name, ("natural", "shuffled"), cache, seed=0)  # bench partition's streams
        num_nodes = int(read_meta(paths["natural"])["num_nodes"])
        attr = AttrClusters(np.zeros(num_nodes, np.int32), None, 1, 0, 0.0, True, "none")
        for order in ("natural", "shuffled"):
            source = open_input(paths[order])
            degrees = compute_degrees(source.edge_shards, num_nodes)
            for _, _, k in [c for c in CELLS if c[:2] == (name, order)]:
                for algo in TWO_PHASE:
                    with partition(source, k, algo=algo, attr=attr, degrees=degrees, validate=False) as a:
                        rf = a.metrics["replication_factor"]
                        balance = a.loads.max() / (a.loads.sum() / k)
                    expected = reference[(name, order, k, algo)]
                    if abs(rf / expected - 1) > 0.02 or balance > 1.05 + k / a.loads.sum():
                        misses.append(f"{name} {order} k={k} {algo}: RF {rf:.4f} (reference {expected:.4f}), "
                                      f"balance {balance:.4f}")
    assert not misses, "\n".join(misses)
