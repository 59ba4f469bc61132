"""Loading a partition as a local graph: masters, edges, features and isolation."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from asepr.storage.errors import StoreError
from asepr.training.centralized import load_input_graph
from asepr.training.graph.data import load_local_graph, rank_partitions

REPO = Path(__file__).resolve().parents[2]


def _input_edges(graph) -> set[tuple[int, int]]:
    g = graph.global_nid.numpy()
    e = graph.own_edges.numpy()
    return set(zip(g[e[0]].tolist(), g[e[1]].tolist()))


@pytest.mark.parametrize("halo", [0, 1])
def test_partitions_cover_the_input_once(cora_input, cora_parts, halo):
    full = load_input_graph(cora_input)
    out = cora_parts(4, halo)
    graphs = [load_local_graph(out, [p]) for p in range(4)]
    masters = np.concatenate([g.global_nid[g.is_master].numpy() for g in graphs])
    assert np.array_equal(np.sort(masters), np.arange(full.num_nodes))  # each node mastered exactly once
    own = [_input_edges(g) for g in graphs]
    assert sum(len(o) for o in own) == full.own_edges.shape[1]  # each input edge owned once
    assert set().union(*own) == _input_edges(full)
    for g in graphs:
        gid = g.global_nid
        assert torch.all(gid[1:] > gid[:-1])
        assert torch.equal(g.x, full.x[gid]) and torch.equal(g.y, full.y[gid])
        assert torch.equal(g.split, full.split[gid])
        # Undirected input: every message-passing edge has its reverse.
        ei = g.edge_index
        fwd = set(zip(ei[0].tolist(), ei[1].tolist()))
        assert fwd == {(v, u) for u, v in fwd}
        # Masks select masters of each split only.
        for mask, split in ((g.train_mask, 0), (g.val_mask, 1), (g.test_mask, 2)):
            assert torch.equal(mask, g.is_master & (g.split == split))
        data = g.to_data()
        assert data.num_nodes == g.num_nodes and data.edge_index.shape[1] == ei.shape[1]
    if halo:
        # with halo 1 every master's input neighbours are present locally
        full_ei = full.edge_index
        for g in graphs:
            local = set(g.global_nid.tolist())
            masters_here = g.global_nid[g.is_master]
            sel = torch.isin(full_ei[1], masters_here)
            assert set(full_ei[0][sel].tolist()) <= local


def test_several_partitions_per_rank_merge_into_one_graph(cora_input, cora_parts):
    out = cora_parts(4)
    assert rank_partitions(4, 1, 2) == [1, 3]
    merged = load_local_graph(out, [1, 3])
    parts = [load_local_graph(out, [p]) for p in (1, 3)]
    assert torch.equal(merged.global_nid, torch.unique(torch.cat([p.global_nid for p in parts])))
    assert int(merged.is_master.sum()) == sum(int(p.is_master.sum()) for p in parts)
    assert _input_edges(merged) == _input_edges(parts[0]) | _input_edges(parts[1])
    full = load_input_graph(cora_input)
    assert torch.equal(merged.x, full.x[merged.global_nid])


def test_more_ranks_than_partitions_is_refused():
    with pytest.raises(StoreError, match="at most 2 ranks"):
        rank_partitions(2, 0, 3)


_AUDIT = r"""
import json, os, sys
opened = []
def hook(event, args):
    if event == "open" and isinstance(args[0], (str, bytes, os.PathLike)):
        opened.append(os.path.abspath(os.fsdecode(args[0])))
    elif event in ("os.listdir", "os.scandir") and args and isinstance(args[0], (str, os.PathLike)):
        opened.append(os.path.abspath(os.fsdecode(args[0])))
import torch, zarr, numpy  # imports happen before the hook: only data files are recorded
from asepr.training.graph.data import load_local_graph
sys.addaudithook(hook)
g = load_local_graph(sys.argv[1], [int(sys.argv[2])])
print(json.dumps({"opened": opened, "nodes": g.num_nodes}))
"""


def test_a_rank_reads_only_its_own_store_and_the_manifest(cora_parts):
    out = cora_parts(4).resolve()
    env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    res = subprocess.run([sys.executable, "-c", _AUDIT, str(out), "2"], capture_output=True, text=True, env=env,
                         cwd=REPO, check=True)
    record = json.loads(res.stdout.strip().splitlines()[-1])
    assert record["nodes"] > 0
    inside = [p for p in record["opened"] if p == str(out) or p.startswith(str(out) + os.sep)]
    assert inside, "the audit hook saw no file of the output"
    own = str(out / "part-00002.zarr")
    allowed = {str(out / "manifest.json"), str(out)}
    strays = [p for p in inside if p not in allowed and p != own and not p.startswith(own + os.sep)]
    assert not strays, f"rank 2 touched files outside its store: {strays[:5]}"
    assert any(p.startswith(own + os.sep) for p in inside)
