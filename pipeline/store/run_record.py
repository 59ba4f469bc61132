"""What a partition run records to be found again: its input, its key, its assignment.

The run key names a run by its input's bytes, its config and its halo; a rerun with the
same key resumes. The assignment (edge partition ids, masters, metrics) is saved in the
staging directory for that resumption::

    OUT/.asepr-staging/work/    edge-parts-*.npy, master.npy, assignment.json (saved last)
"""

from __future__ import annotations

import dataclasses
import hashlib
import logging
import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from asepr.pipeline.assign import edge_parts_path
from asepr.pipeline.store.commit import Staging, file_sha256, read_json_object
from asepr.storage.commit.atomic import dumps_json, save_npy_atomic, write_json_atomic
from asepr.storage.errors import StoreError
from asepr.storage.inputs.directory import open_parquet
from asepr.storage.inputs.schema import check_node_schema, feature_matrix
from asepr.storage.locations.fs import Shard, fingerprint, resolve, url_of
from asepr.storage.partitions.manifest import MANIFEST_VERSION
from asepr.storage.partitions.state import state_identity
from asepr.storage.partitions.store import STORE_VERSION
from asepr.storage.resources import stage

__all__ = ["SavedAssignment", "assignment_digest", "check_halo", "input_info_from_report", "input_info_from_shards",
           "load_assignment", "parts_files", "run_key_of", "save_assignment", "stage_state", "staged_state_ok"]

log = logging.getLogger(__name__)


# --- the assignment, saved for resumption ----------------------------------------------


@dataclass
class SavedAssignment:
    num_nodes: int
    num_edges: int
    num_parts: int
    config: dict[str, Any]
    undirected: bool
    metrics: dict[str, Any]
    timings: dict[str, float]
    edge_shards: list[Shard]
    node_shards: list[Shard]
    workdir: Path
    digest: str

    def parts_path(self, i: int) -> str:
        return str(edge_parts_path(self.workdir, i))

    @property
    def master_path(self) -> str:
        return str(self.workdir / "master.npy")


def assignment_digest(master: np.ndarray, parts_files: list[Path]) -> str:
    h = hashlib.sha256(np.ascontiguousarray(master, dtype=np.int32).tobytes())
    for f in parts_files:
        file_sha256(f, h)
    return h.hexdigest()


def parts_files(workdir: str | Path, count: int) -> list[Path]:
    return [edge_parts_path(workdir, i) for i in range(count)]


def save_assignment(assignment, work: Path, run_key: str, halo: int) -> SavedAssignment:
    """Persist what the write stages and a resumption need (assignment.json goes last)."""
    count = len(assignment.edge_shards)
    src_files = parts_files(assignment.workdir, count)
    dst_files = parts_files(work, count)
    for src, dst in zip(src_files, dst_files):
        if src.resolve() == dst.resolve():
            continue
        dst.unlink(missing_ok=True)
        try:
            os.link(src, dst)
        except OSError:
            shutil.copyfile(src, dst)
    master = np.ascontiguousarray(assignment.master, dtype=np.int32)
    save_npy_atomic(work / "master.npy", master)
    digest = assignment_digest(master, dst_files)
    config = assignment.config
    saved = SavedAssignment(
        num_nodes=int(assignment.num_nodes),
        num_edges=int(assignment.num_edges),
        num_parts=int(config.num_parts),
        config=config.to_dict(),
        undirected=bool(config.undirected),
        metrics=dict(assignment.metrics),
        timings=dict(assignment.timings),
        edge_shards=list(assignment.edge_shards),
        node_shards=list(assignment.node_shards),
        workdir=work,
        digest=digest,
    )
    record = {
        "run_key": run_key, "halo": halo, "digest": digest,
        **{f.name: getattr(saved, f.name) for f in dataclasses.fields(saved)
           if f.name not in ("edge_shards", "node_shards", "workdir")},
        "edge_shards": [s.url for s in saved.edge_shards],
        "node_shards": [s.url for s in saved.node_shards],
    }
    write_json_atomic(work / "assignment.json", record)
    return saved


def load_assignment(work: Path, run_key: str, edge_shards: list[Shard], node_shards: list[Shard]) -> SavedAssignment | None:
    record = read_json_object(work / "assignment.json")
    if not record or record.get("run_key") != run_key:
        return None
    if record["edge_shards"] != [s.url for s in edge_shards] or record["node_shards"] != [s.url for s in node_shards]:
        return None
    files = parts_files(work, len(edge_shards))
    if not (work / "master.npy").exists() or not all(f.exists() for f in files):
        return None
    return SavedAssignment(
        num_nodes=record["num_nodes"], num_edges=record["num_edges"], num_parts=record["num_parts"],
        config=record["config"], undirected=record["undirected"], metrics=record["metrics"],
        timings=record["timings"], edge_shards=edge_shards, node_shards=node_shards,
        workdir=work, digest=record["digest"],
    )


def stage_state(staging: Staging, assignment, generation: int, input_info: dict[str, Any],
                 close: bool = False) -> None:
    """Write the partitioner state (``state.zarr``) of this run into the staging
    directory; with ``close``, close ``assignment`` afterwards (even on an error)."""
    from asepr.pipeline.store.continuation import write_assignment_state

    try:
        with stage("state", log):
            write_assignment_state(assignment, staging.state_path, generation, input_info)
    finally:
        if close:
            assignment.close()


def staged_state_ok(staging: Staging, generation: int) -> bool:
    ident = state_identity(staging.state_path)
    return ident is not None and ident[0] == generation


# --- input identity ------------------------------------------------------------------


def _input_url(input_url, storage_options=None) -> str:
    """The input's URL as ``asepr verify`` can find it again from any directory."""
    return url_of(*resolve(input_url, storage_options))


def input_info_from_report(input_url, report, storage_options=None) -> dict[str, Any]:
    return {
        "url": _input_url(input_url, storage_options),
        "edges": [{"url": s.url, "rows": s.rows, "sha256": s.sha256} for s in report.edge_shards],
        "nodes": [{"url": s.url, "rows": s.rows, "sha256": s.sha256} for s in report.node_shards],
        "feat_dim": int(report.feat_dim),
    }


def _feat_dim(node_shards: list[Shard]) -> int:
    for shard in node_shards:
        pf = open_parquet(shard)
        layout, _, _ = check_node_schema(pf.schema_arrow, shard.url)
        if layout.dim is not None:
            return int(layout.dim)
        for batch in pf.iter_batches(batch_size=1, columns=list(layout.columns)):
            return int(feature_matrix(batch, layout).shape[1])
    return 0


def input_info_from_shards(input_url, edge_shards, node_shards) -> dict[str, Any]:
    def describe(shards):
        return [{"url": s.url, "rows": open_parquet(s).metadata.num_rows, "sha256": fingerprint(s)} for s in shards]

    return {"url": None if input_url is None else _input_url(input_url), "edges": describe(edge_shards),
            "nodes": describe(node_shards), "feat_dim": _feat_dim(node_shards)}


def run_key_of(config: dict[str, Any], halo: int, input_info: dict[str, Any]) -> str:
    # How the fallback is scheduled changes no result, so it does not make a new run.
    identity = {
        "format_version": [MANIFEST_VERSION, STORE_VERSION],
        "config": {k: v for k, v in config.items() if k != "concurrent_fallback"},
        "halo": halo,
        "edges": [s["sha256"] for s in input_info["edges"]],
        "nodes": [s["sha256"] for s in input_info["nodes"]],
    }
    return hashlib.sha256(dumps_json(identity)).hexdigest()


def check_halo(halo: int) -> int:
    if halo not in (0, 1):
        raise StoreError(f"--halo: expected 0 or 1, found {halo!r}.")
    return int(halo)

