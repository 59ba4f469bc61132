"""Score a run's final global model on the whole graph with its held-out edges ranked
against 100 negatives drawn (a) uniformly among all vertices (the centralized run's
evaluation) and (b) among the vertices of the partition that holds the edge (what the
exact evaluation did before this change: each rank drew among its own rows).

Usage: python eval_diag.py INPUT PARTITION_OUT RUN_DIR...
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

import torch

from storage import read_manifest
from training.centralized import load_input_graph
from training.config import TrainConfig, load_config
from training.data import load_local_graph, prepare_features
from training.distributed import global_weights
from training.models import build_model, unflatten_into
from training.tasks import LinkTask


def mrr(z: torch.Tensor, pos: torch.Tensor, neg: torch.Tensor) -> float:
    p = (z[pos[0]] * z[pos[1]]).sum(-1, keepdim=True)
    q = (z[pos[0]].unsqueeze(1) * z[neg]).sum(-1)
    rank = 0.5 * ((q > p).sum(1) + (q >= p).sum(1)).double() + 1
    return round(float((1 / rank).mean()), 4)


def run_config(run: str) -> TrainConfig:
    """RUN/config.json, or (a centralized run writes none) the config in RUN/run.json."""
    path = Path(run) / "config.json"
    if path.exists():
        return load_config(path)
    return TrainConfig.from_dict(json.loads((Path(run) / "run.json").read_text())["config"])


def main(inp: str, part_out: str, runs: list[str]) -> None:
    parts = [load_local_graph(part_out, [p]) for p in range(int(read_manifest(part_out)["num_parts"]))]
    owner = {}  # unordered global edge -> the partition storing it
    for p, g in enumerate(parts):
        for a, b in g.global_nid[g.own_edges].t().tolist():
            owner[min(a, b), max(a, b)] = p
    for run in runs:
        config = run_config(run)
        graph = load_input_graph(inp)
        graph.x = prepare_features(graph.x, config)
        task = LinkTask(graph, config)
        model = build_model(config, graph.x.shape[1], task.out_dim)
        unflatten_into(model, global_weights(run))
        model.eval()
        with torch.no_grad():
            z = model(graph.x, task.mp)
        gen = torch.Generator().manual_seed(123)
        out = {}
        for name, pos in (("val", task.val_pos), ("test", task.test_pos)):
            uniform = torch.randint(0, graph.num_nodes, (pos.shape[1], 100), generator=gen)
            local = torch.empty_like(uniform)
            for i, (a, b) in enumerate(pos.t().tolist()):
                gid = parts[owner[min(a, b), max(a, b)]].global_nid
                local[i] = gid[torch.randint(0, len(gid), (100,), generator=gen)]
            out[f"{name}_uniform"], out[f"{name}_own_partition"] = mrr(z, pos, uniform), mrr(z, pos, local)
        print(run, out)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], sys.argv[3:])
