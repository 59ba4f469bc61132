"""The features-alone baseline of the products-like graph: a two-layer MLP.

    python mlp.py INPUT [--epochs 30] [--seed 0]

Reads the input directory's node table (``feat``, ``label``, ``split``), normalises
each row to unit L2 norm as the trainers do by default, and trains an MLP of the GNN's
width (hidden 128, dropout 0.5, Adam at 0.01 with weight decay 5e-4, batches of 1,024)
on the training nodes. Prints one JSON line: the validation accuracy at its best epoch
and the test accuracy there, over every validation and test node. The graph is never
read: this is what the features alone can tell.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import torch


def load(input_dir: Path) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    table = pq.read_table(input_dir / "nodes", columns=["id", "feat", "label", "split"])
    order = np.argsort(table.column("id").to_numpy())
    dim = table.schema.field("feat").type.list_size
    feat = table.column("feat").combine_chunks().flatten().to_numpy().reshape(-1, dim)[order]
    feat /= np.maximum(np.linalg.norm(feat, axis=1, keepdims=True), 1e-12)
    return feat, table.column("label").to_numpy()[order], table.column("split").to_numpy()[order]


def accuracy(model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor) -> float:
    model.eval()
    with torch.no_grad():
        right = sum(int((model(x[i:i + 65536]).argmax(1) == y[i:i + 65536]).sum()) for i in range(0, len(x), 65536))
    return right / len(x)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("input", type=Path)
    parser.add_argument("--epochs", type=int, default=30)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    torch.manual_seed(args.seed)
    feat, label, split = load(args.input)
    x = {s: torch.from_numpy(np.ascontiguousarray(feat[split == s])) for s in (0, 1, 2)}
    y = {s: torch.from_numpy(label[split == s]) for s in (0, 1, 2)}
    classes = int(label.max()) + 1
    model = torch.nn.Sequential(torch.nn.Linear(feat.shape[1], 128), torch.nn.ReLU(), torch.nn.Dropout(0.5),
                                torch.nn.Linear(128, classes))
    opt = torch.optim.Adam(model.parameters(), lr=0.01, weight_decay=5e-4)
    best = (-1.0, 0.0, 0)
    for epoch in range(1, args.epochs + 1):
        model.train()
        for batch in torch.randperm(len(x[0])).split(1024):
            opt.zero_grad()
            torch.nn.functional.cross_entropy(model(x[0][batch]), y[0][batch]).backward()
            opt.step()
        val = accuracy(model, x[1], y[1])
        if val > best[0]:
            best = (val, accuracy(model, x[2], y[2]), epoch)
    print(json.dumps({"model": "mlp", "best_val": best[0], "test_at_best_val": best[1], "best_epoch": best[2],
                      "train": len(x[0]), "val": len(x[1]), "test": len(x[2]), "epochs": args.epochs}))


if __name__ == "__main__":
    main()
