"""Inputs for the incremental tests: a graph's edge stream cut into a base and an increment.

:func:`split_case` writes, from one synthetic graph,

* ``base/``: the first ``frac`` of the edge stream (without the edges that touch the
  held-out new nodes) and the node rows of the nodes that exist from the start;
* ``inc/edges``, ``inc/nodes``: every other edge, in stream order, and the rows of the
  ``new_nodes`` held-out nodes (ids ``N0 .. N-1``);
* ``full/``: base then increment edges (the same stream), all node rows: what a full
  repartition of everything reads.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from asepr.pipeline.inputs.synth import SynthConfig, generate
from asepr.storage.partitions.manifest import read_manifest
from asepr.storage.partitions.output_stores import open_partition


def read_all(root: Path, kind: str) -> pa.Table:
    files = sorted((root / kind).glob("*.parquet"))
    return pa.concat_tables([pq.read_table(f) for f in files])


def write_shards(table: pa.Table, directory: Path, shards: int, prefix: str = "part") -> None:
    directory.mkdir(parents=True, exist_ok=True)
    for i, idx in enumerate(np.array_split(np.arange(table.num_rows), shards)):
        pq.write_table(table.take(pa.array(idx, type=pa.int64())), directory / f"{prefix}-{i:05d}.parquet")


def split_input(source: Path, out: Path, *, frac: float = 0.9, new_nodes: int = 0, base_shards: int = 3,
                inc_shards: int = 2) -> dict:
    """Cut ``source`` (an input dir) into ``out/base``, ``out/inc`` and ``out/full`` (see the module)."""
    edges = read_all(source, "edges")
    nodes = read_all(source, "nodes")
    nodes = nodes.take(pa.array(np.argsort(nodes.column("id").to_numpy())))
    meta = json.loads((source / "meta.json").read_text())
    n = nodes.num_rows
    n0 = n - new_nodes
    src, dst = edges.column("src").to_numpy(), edges.column("dst").to_numpy()
    cut = int(len(src) * frac)
    base_mask = np.zeros(len(src), dtype=bool)
    base_mask[:cut] = True
    base_mask &= (src < n0) & (dst < n0)
    base_e, inc_e = edges.filter(pa.array(base_mask)), edges.filter(pa.array(~base_mask))
    write_shards(base_e, out / "base" / "edges", base_shards)
    write_shards(nodes.slice(0, n0), out / "base" / "nodes", 1)
    write_shards(inc_e, out / "inc" / "edges", inc_shards)
    if new_nodes:
        write_shards(nodes.slice(n0), out / "inc" / "nodes", 1)
    write_shards(base_e, out / "full" / "edges", base_shards, prefix="a")
    write_shards(inc_e, out / "full" / "edges", inc_shards, prefix="b")
    write_shards(nodes, out / "full" / "nodes", 1)
    meta = {k: v for k, v in meta.items() if k not in ("shards", "num_edges", "num_nodes")}
    (out / "base" / "meta.json").write_text(json.dumps({**meta, "num_nodes": n0}))
    (out / "full" / "meta.json").write_text(json.dumps({**meta, "num_nodes": n}))
    return {"n0": n0, "n": n, "base_edges": base_e.num_rows, "inc_edges": inc_e.num_rows,
            "undirected": bool(meta.get("undirected", False))}


def split_case(root: Path, *, nodes: int = 3000, edges: int = 24_000, classes: int = 8, dim: int = 8,
               frac: float = 0.9, new_nodes: int = 0, seed: int = 0) -> dict:
    generate(root / "source", SynthConfig(num_nodes=nodes, num_edges=edges, num_classes=classes, dim=dim,
                                          seed=seed), shard_rows=max(1, edges // 4))
    info = split_input(root / "source", root, frac=frac, new_nodes=new_nodes)
    return {**info, "root": root}


def edge_multiset(out: Path) -> Counter:
    """The (non-halo) edges of every partition of ``out``, as global ids."""
    manifest = read_manifest(out)
    edges: Counter = Counter()
    for p in range(manifest["num_parts"]):
        data = open_partition(out, p).to_numpy()
        global_nid = data["nodes/global_nid"]
        src = global_nid[np.repeat(np.arange(len(global_nid)), np.diff(data["edges/indptr"]))]
        dst = global_nid[data["edges/indices"]]
        keep = ~data.get("edges/is_halo", np.zeros(len(dst), bool))
        edges.update(zip(src[keep].tolist(), dst[keep].tolist()))
    return edges


def input_edges(*dirs: Path) -> Counter:
    out: Counter = Counter()
    for d in dirs:
        t = read_all(d.parent, d.name) if d.name == "edges" else read_all(d, "edges")
        out.update(zip(t.column("src").to_numpy().tolist(), t.column("dst").to_numpy().tolist()))
    return out


def skewed_edges(out: Path, directory: Path, count: int = 5000, seed: int = 1) -> Path:
    """Intra-community edges for the small communities of the partition holding the most.

    They grow that partition's community volume past the cap (its largest community
    is left alone, so that smaller ones can move): the drift a rebalance repairs.
    """
    from asepr.storage.partitions.state import read_state
    from tests.storage.helpers import edge_table

    state = read_state(out)
    volume, part_of = state["communities/volume"], state["communities/part_id"]
    community = state["vertices/community_id"]
    k = len(state["partitions/loads"])
    counts = [np.count_nonzero((part_of == p) & (volume > 0)) for p in range(k)]
    p = int(np.argmax(counts))
    mine = np.flatnonzero((part_of == p) & (volume > 0))
    nodes = np.flatnonzero((part_of[community] == p) & (community != mine[np.argmax(volume[mine])]))
    rng = np.random.default_rng(seed)
    src = rng.choice(nodes, count)
    by = nodes[np.argsort(community[nodes], kind="stable")]
    lo = np.searchsorted(community[by], community[src])
    hi = np.searchsorted(community[by], community[src], side="right")
    dst = by[lo + (rng.random(len(src)) * (hi - lo)).astype(np.int64)]
    directory.mkdir(parents=True)
    pq.write_table(edge_table(src, dst), directory / "skewed.parquet")
    return directory
