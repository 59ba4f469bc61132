"""The shared published datasets by name, imported once into a cache directory."""

from __future__ import annotations

import csv
import logging
import os
from pathlib import Path

from asepr.storage.errors import InputNotFoundError, format_problem
from asepr.storage.importers import import_dataset

__all__ = ["SHARED_DATASETS", "datasets_dir", "reference_rf", "resolve_dataset"]

log = logging.getLogger(__name__)

# name -> (importer format, path inside the shared datasets folder)
SHARED_DATASETS: dict[str, tuple[str, str]] = {
    "cora": ("gnn-npz", "cora"),
    "amazon-photo": ("gnn-npz", "amazon-photo"),
    "amazon-computers": ("gnn-npz", "amazon-computers"),
    "coauthor-cs": ("gnn-npz", "coauthor-cs"),
    "coauthor-physics": ("gnn-npz", "coauthor-physics"),
    "tolokers": ("hetero-npz", "tolokers"),
    "squirrel": ("hetero-npz", "squirrel"),
    "facebook-pagepage": ("musae", "facebook-pagepage"),
    "twitch-de": ("musae", "twitch-de"),
}


def datasets_dir() -> Path:
    """``$ASEPR_DATASETS``, else ``../shared/datasets`` from here or from the repository."""
    env = os.environ.get("ASEPR_DATASETS")
    candidates = [Path(env)] if env else []
    candidates += [
        Path.cwd().parent / "shared" / "datasets",
        Path(__file__).resolve().parents[2] / "shared" / "datasets",
    ]
    for path in candidates:
        if path.is_dir():
            return path
    raise InputNotFoundError(
        format_problem(
            "the shared datasets folder",
            "a directory ../shared/datasets or $ASEPR_DATASETS",
            f"none of {[str(c) for c in candidates]}",
            "set ASEPR_DATASETS to the folder that holds cora/, amazon-computers/, ...",
        )
    )


def resolve_dataset(name_or_path: str, cache: Path) -> Path:
    """An input directory for a shared dataset name (imported into ``cache`` once) or a path."""
    if name_or_path not in SHARED_DATASETS:
        path = Path(name_or_path)
        if not path.exists():
            raise InputNotFoundError(
                format_problem(
                    f"dataset {name_or_path}",
                    f"an input directory or one of {', '.join(SHARED_DATASETS)}",
                    "neither",
                    "import it first with `asepr import`.",
                )
            )
        return path
    fmt, sub = SHARED_DATASETS[name_or_path]
    out = cache / name_or_path
    if not (out / "meta.json").exists():
        log.info("importing %s into %s", name_or_path, out)
        import_dataset(fmt, datasets_dir() / sub, out, overwrite=True)
    return out


def reference_rf(path: str | Path | None = None) -> dict[tuple[str, str, int, str], float]:
    """The published partitioners' replication factors on ``asepr bench partition``'s streams.

    ``(dataset, order, k, algorithm) -> RF`` from ``path``, else ``$ASEPR_REFERENCE_RF``,
    else ``anchors/reference-rf.csv`` beside the shared datasets folder; empty when there
    is none (the benchmark then reports without the reference column).
    """
    if path is None:
        path = os.environ.get("ASEPR_REFERENCE_RF")
    if path is None:
        try:
            path = datasets_dir().parent / "anchors" / "reference-rf.csv"
        except InputNotFoundError:
            return {}
    path = Path(path)
    if not path.is_file():
        return {}
    out = {}
    with open(path, newline="") as f:
        for row in csv.DictReader(f):
            out[(row["dataset"], row["order"], int(row["k"]), row["algorithm"])] = float(row["replication_factor"])
    return out
