"""Turn an assignment into committed partition stores: staging, resume, commit.

:func:`partition_to_store` is the whole ``asepr partition`` run (validate, partition,
write); :func:`write_partitions` writes the stores of an :class:`~pipeline.Assignment`
you already have. Both hold the output's lock (:class:`storage.lock.OutputLock`) and
work inside ``OUT/.asepr-staging/`` until the commit::

    OUT/
      manifest.json  part-*.zarr/  node_map.parquet     previous generation (untouched)
      .asepr.lock                                       owner pid, host, command
      .asepr-staging/
        run.json                    run key (format, config, halo, input sha256s), generation
        work/                       edge-parts-*.npy, master.npy, assignment.json (saved last)
        route/  gather/             spill files (pipeline.store.route), one writer each
        gids/part-*.npy             each partition's sorted global_nid, for the node gather
        .part-*.zarr.partial/       a store being written
        part-*.zarr/                a finished store (renamed from .partial; checksummed)
        node_map.parquet
        commit.json                 the journal: the manifest about to be committed
        old/                        previous-generation stores, while swapping

Stages (Dask graphs, one task per shard or partition): route edges (one task per edge
shard) → finalize edges (per partition) → gather node rows (per node shard) →
finalize nodes (per partition: rows, attrs, checksum, rename) → node map → commit.

Commit: write the journal, then for each store move the old one into ``old/`` and the
new one into place, then replace ``manifest.json`` atomically, then delete the
staging directory. Readers trust the manifest and look in ``old/`` for a store of the
manifest's generation (:func:`storage.partition_store.resolve_store_url`), so the
previous generation stays readable until the new manifest lands.

Scratch space inside the staging directory: about 18 bytes per edge (2 for the
assignment, 16 for the routed spill; twice that for halo copies) plus
``RF·N·(17 + 4d)`` bytes of gathered node rows, next to the new stores.

A rerun after a crash, with the same run key (same input bytes, config and halo):

* finds a journal → completes the commit (or, for another run key, rolls it back);
* otherwise reuses the saved assignment, the routed shards and every finished store
  whose checksums verify, and redoes the rest. With another run key, or an assignment
  that differs bit for bit, it discards the staging directory and starts clean, so a
  generation never mixes partitions of two runs.
"""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import hashlib
import json
import logging
import os
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import dask
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from pipeline.config import PartitionConfig
from pipeline.store.finalize import finalize_edges, finalize_nodes
from pipeline.store.route import (
    edge_spill_paths,
    gather_node_shard,
    node_spill_paths,
    pause_point,
    route_edge_shard,
)
from storage.errors import AseprError, StoreError, format_problem
from storage.fs import Shard, discover_shards, fingerprint, resolve, url_of
from storage.lock import OutputLock
from storage.manifest import (
    JOURNAL_NAME,
    LOCK_NAME,
    MANIFEST_FORMAT,
    MANIFEST_NAME,
    MANIFEST_VERSION,
    NODE_MAP_NAME,
    OLD_DIR,
    STAGING_NAME,
    dumps_json,
    part_name,
    read_manifest,
    write_manifest,
)
from storage.partition_store import STORE_VERSION, checksum_problems, open_store, store_bytes
from storage.resources import peak_rss_bytes, stage
from storage.schema import check_node_schema, feature_matrix
from storage.state import STATE_NAME, state_entry, state_identity
from storage.input import input_paths, open_parquet, read_meta
from storage.validate import validate_input

__all__ = ["Progress", "partition_to_store", "write_partitions"]

log = logging.getLogger(__name__)

#: ``progress(stage_name, total_tasks)`` returns a context manager with ``update(n)``
#: (a ``tqdm`` bar fits); ``workflows`` supplies it, the pipeline draws nothing itself.
Progress = Callable[[str, int], Any]


# --- output directory ------------------------------------------------------------------


def _local_output(out: str | Path, storage_options: dict | None) -> Path:
    fs, path = resolve(out, storage_options)
    protocol = fs.protocol if isinstance(fs.protocol, str) else fs.protocol[0]
    if protocol not in ("file", "local"):
        raise StoreError(
            format_problem(
                f"output {url_of(fs, path)}",
                "a local (or mounted shared) directory: partitions are committed by renames",
                f"a {protocol}:// URL",
                "write to a local directory, then copy the committed output.",
            )
        )
    return Path(path)


def _owned_name(name: str) -> bool:
    return (
        name in (MANIFEST_NAME, NODE_MAP_NAME, STAGING_NAME, STATE_NAME)
        or name.startswith((LOCK_NAME, f"{MANIFEST_NAME}.partial-"))
        or (name.startswith("part-") and name.endswith(".zarr"))
    )


def _prepare_output_dir(out: Path) -> bool:
    """Create ``out`` if needed; return whether it was created. Refuse foreign content."""
    fix = "choose an output path you can write to (or fix its permissions)."
    if out.exists() and not out.is_dir():
        raise StoreError(
            format_problem(f"output {out}", "a directory (or a path that does not exist yet)",
                           "an existing file", "choose another output path.")
        )
    created = not out.exists()
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise StoreError(
            format_problem(f"output {out}", "a directory that can be created",
                           f"{exc.strerror or exc} ({type(exc).__name__})", fix)
        ) from exc
    foreign = sorted(n for n in os.listdir(out) if not _owned_name(n))
    if foreign:
        raise StoreError(
            format_problem(
                f"output {out}",
                "an empty directory or the output of `asepr partition`",
                f"other files, e.g. {foreign[:3]}",
                "choose a new or empty output directory.",
            )
        )
    if not os.access(out, os.W_OK):
        raise StoreError(format_problem(f"output {out}", "a writable directory", "no write permission", fix))
    return created


def _remove_if_empty(out: Path) -> None:
    with contextlib.suppress(OSError):
        out.rmdir()


# --- the staging directory -------------------------------------------------------------


class _Staging:
    def __init__(self, out: Path):
        self.out = out
        self.root = out / STAGING_NAME
        self.work = self.root / "work"
        self.route = self.root / "route"
        self.gather = self.root / "gather"
        self.gids = self.root / "gids"
        self.old = self.root / OLD_DIR
        self.node_map = self.root / NODE_MAP_NAME
        self.state_path = self.root / STATE_NAME

    def exists(self) -> bool:
        return self.root.exists()

    def clear(self) -> None:
        shutil.rmtree(self.root, ignore_errors=True)

    def begin(self, run_key: str, generation: int) -> None:
        for d in (self.work, self.route, self.gather, self.gids):
            d.mkdir(parents=True, exist_ok=True)
        _write_json_atomic(self.root / "run.json", {"run_key": run_key, "generation": generation,
                                                    "started": time.strftime("%Y-%m-%dT%H:%M:%S%z")})

    def reset_work(self) -> None:
        shutil.rmtree(self.work, ignore_errors=True)
        self.work.mkdir(parents=True)

    def state(self) -> dict | None:
        return _read_json(self.root / "run.json")

    def journal(self) -> dict | None:
        return _read_json(self.root / JOURNAL_NAME)

    def partial_store(self, p: int) -> Path:
        return self.root / f".{part_name(p)}.partial"

    def store(self, p: int) -> Path:
        return self.root / part_name(p)

    def gids_path(self, p: int) -> Path:
        return self.gids / f"part-{p:05d}.npy"


def _read_json(path: Path) -> dict | None:
    try:
        value = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return value if isinstance(value, dict) else None


def _write_json_atomic(path: Path, obj: Any) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_bytes(dumps_json(obj))
    os.replace(tmp, path)


# --- the assignment, saved for resumption ----------------------------------------------


@dataclass
class _SavedAssignment:
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
        return str(self.workdir / f"edge-parts-{i:05d}.npy")

    @property
    def master_path(self) -> str:
        return str(self.workdir / "master.npy")


def _file_sha256(path: Path, digest) -> None:
    with open(path, "rb") as fh:
        while block := fh.read(8 << 20):
            digest.update(block)


def _assignment_digest(master: np.ndarray, parts_files: list[Path]) -> str:
    h = hashlib.sha256(np.ascontiguousarray(master, dtype=np.int32).tobytes())
    for f in parts_files:
        _file_sha256(f, h)
    return h.hexdigest()


def _parts_files(workdir: str | Path, count: int) -> list[Path]:
    return [Path(workdir) / f"edge-parts-{i:05d}.npy" for i in range(count)]


def _save_assignment(assignment, work: Path, run_key: str, halo: int) -> _SavedAssignment:
    """Persist what the write stages and a resumption need (assignment.json goes last)."""
    count = len(assignment.edge_shards)
    src_files = _parts_files(assignment.workdir, count)
    dst_files = _parts_files(work, count)
    for src, dst in zip(src_files, dst_files):
        if src.resolve() == dst.resolve():
            continue
        dst.unlink(missing_ok=True)
        try:
            os.link(src, dst)
        except OSError:
            shutil.copyfile(src, dst)
    master = np.ascontiguousarray(assignment.master, dtype=np.int32)
    np.save(work / "master.npy", master)
    digest = _assignment_digest(master, dst_files)
    config = assignment.config
    saved = _SavedAssignment(
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
    _write_json_atomic(work / "assignment.json", record)
    return saved


def _load_assignment(work: Path, run_key: str, edge_shards: list[Shard], node_shards: list[Shard]) -> _SavedAssignment | None:
    record = _read_json(work / "assignment.json")
    if not record or record.get("run_key") != run_key:
        return None
    if record["edge_shards"] != [s.url for s in edge_shards] or record["node_shards"] != [s.url for s in node_shards]:
        return None
    files = _parts_files(work, len(edge_shards))
    if not (work / "master.npy").exists() or not all(f.exists() for f in files):
        return None
    return _SavedAssignment(
        num_nodes=record["num_nodes"], num_edges=record["num_edges"], num_parts=record["num_parts"],
        config=record["config"], undirected=record["undirected"], metrics=record["metrics"],
        timings=record["timings"], edge_shards=edge_shards, node_shards=node_shards,
        workdir=work, digest=record["digest"],
    )


def _stage_state(staging: _Staging, assignment, generation: int, input_info: dict[str, Any]) -> None:
    """Write the partitioner state (``state.zarr``) of this run into the staging directory."""
    from pipeline.store.continuation import write_assignment_state

    with stage("state", log):
        write_assignment_state(assignment, staging.state_path, generation, input_info)


def _staged_state_ok(staging: _Staging, generation: int) -> bool:
    ident = state_identity(staging.state_path)
    return ident is not None and ident[0] == generation


# --- input identity ------------------------------------------------------------------


def _input_url(input_url, storage_options=None) -> str:
    """The input's URL as ``asepr verify`` can find it again from any directory."""
    return url_of(*resolve(input_url, storage_options))


def _input_info_from_report(input_url, report, storage_options=None) -> dict[str, Any]:
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


def _input_info_from_shards(input_url, edge_shards, node_shards) -> dict[str, Any]:
    def describe(shards):
        return [{"url": s.url, "rows": open_parquet(s).metadata.num_rows, "sha256": fingerprint(s)} for s in shards]

    return {"url": None if input_url is None else _input_url(input_url), "edges": describe(edge_shards),
            "nodes": describe(node_shards), "feat_dim": _feat_dim(node_shards)}


def _run_key(config: dict[str, Any], halo: int, input_info: dict[str, Any]) -> str:
    identity = {
        "format_version": [MANIFEST_VERSION, STORE_VERSION],
        "config": config,
        "halo": halo,
        "edges": [s["sha256"] for s in input_info["edges"]],
        "nodes": [s["sha256"] for s in input_info["nodes"]],
    }
    return hashlib.sha256(dumps_json(identity)).hexdigest()


def _check_halo(halo: int) -> int:
    if halo not in (0, 1):
        raise StoreError(f"--halo: expected 0 or 1, found {halo!r}.")
    return int(halo)


# --- Dask execution ----------------------------------------------------------------------


class _Counter(dask.callbacks.Callback):
    """Advances a progress bar as local-scheduler tasks of one stage finish."""

    def __init__(self, bar, prefix: str):
        super().__init__()
        self.bar, self.prefix = bar, prefix

    def _posttask(self, key, result, dsk, state, worker_id):
        name = key[0] if isinstance(key, tuple) else key
        if isinstance(name, str) and name.startswith(self.prefix):
            self.bar.update(1)


class _NoBar:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    def update(self, n: int = 1) -> None:
        pass


def _run_tasks(name: str, fn, calls: list[tuple[tuple, dict]], client, progress: Progress | None) -> list:
    """Run ``fn(*args, **kwargs)`` for each call as one Dask task each; results in order."""
    if not calls:
        return []
    prefix = f"asepr-{name.replace(' ', '-')}-{os.urandom(6).hex()}"
    tasks = [
        dask.delayed(fn, pure=False)(*args, **kwargs, dask_key_name=f"{prefix}-{i}")
        for i, (args, kwargs) in enumerate(calls)
    ]
    bar = progress(name, len(tasks)) if progress else _NoBar()
    with bar:
        if client is None:
            with _Counter(bar, prefix):
                return list(dask.compute(*tasks, scheduler="threads"))
        import distributed

        futures = client.compute(tasks)
        for _ in distributed.as_completed(futures, raise_errors=False):
            bar.update(1)
        return client.gather(futures)


def _worker_peak_rss(client) -> dict[str, int]:
    if client is None:
        return {}
    try:
        return {k: int(v) for k, v in client.run(peak_rss_bytes).items()}
    except Exception:  # noqa: BLE001 - diagnostics only
        return {}


@contextlib.contextmanager
def _timed(name: str, timings: dict[str, float], client) -> Any:
    start = time.perf_counter()
    with stage(name, log) as info:
        yield info
        workers = _worker_peak_rss(client)
        if workers:
            info["workers_peak_rss_mib"] = round(max(workers.values()) / 2**20)
    timings[name] = timings.get(name, 0.0) + time.perf_counter() - start


@contextlib.contextmanager
def _disk_errors(out: Path):
    """OSError (disk full, permissions) → StoreError that says the old output is safe."""
    try:
        yield
    except AseprError:
        raise
    except OSError as exc:
        what = os.strerror(exc.errno) if exc.errno else str(exc)
        hint = "free some disk space" if exc.errno in (errno.ENOSPC, errno.EDQUOT) else "fix the cause"
        raise StoreError(
            format_problem(
                f"output {out} (writing {getattr(exc, 'filename', None) or 'a partition'})",
                "free space and write access",
                f"{what} ({exc})",
                f"{hint} and rerun the same command: finished partitions are resumed. "
                "The previously committed generation (if any) is intact.",
            )
        ) from exc


# --- the write stages ------------------------------------------------------------------


def _finished_entry(staging: _Staging, p: int, attrs: dict[str, Any]) -> dict[str, Any] | None:
    """The manifest entry of a finished store in staging, if its checksums verify."""
    path = staging.store(p)
    if not path.exists():
        return None
    try:
        store = open_store(path)
        same = all(store.attrs.get(k) == v for k, v in attrs.items()) and store.part_id == p
        problems = checksum_problems(store) if same else ["attributes of another run"]
    except AseprError as exc:
        problems = [str(exc)]
    if problems:
        log.warning("discarding the unfinished or damaged store %s: %s", path, "; ".join(problems))
        shutil.rmtree(path, ignore_errors=True)
        return None
    return {"part_id": p, "checksum": store.attrs["checksum"], "counts": store.attrs["counts"],
            "bytes": store_bytes(path)}


def _write_node_map(staging: _Staging, num_nodes: int, num_parts: int) -> str:
    """``node_map.parquet`` from the finished stores: O(N) arrays, one partition at a time."""
    master_part = np.full(num_nodes, -1, dtype=np.int64)
    part_local = np.full(num_nodes, -1, dtype=np.int64)
    for p in range(num_parts):
        store = open_store(staging.store(p))
        global_nid = store.global_nid[...]
        is_master = store.is_master[...]
        mastered = global_nid[is_master]
        if (master_part[mastered] >= 0).any():
            raise StoreError(
                format_problem(f"partition {p}", "masters not claimed by another partition",
                               "a node mastered twice", "rerun with --overwrite to start clean.")
            )
        master_part[mastered] = p
        part_local[mastered] = np.flatnonzero(is_master)
    return _save_node_map(staging, master_part, part_local)


def _save_node_map(staging: _Staging, master_part: np.ndarray, part_local: np.ndarray) -> str:
    """Write ``node_map.parquet`` into the staging directory; return its sha256."""
    num_nodes = len(master_part)
    missing = np.flatnonzero(master_part < 0)
    if len(missing):
        raise StoreError(
            format_problem("node_map", "one master partition for every node",
                           f"{len(missing):,} node(s) without one, e.g. global_nid {int(missing[0])}",
                           "rerun with --overwrite to start clean.")
        )
    schema = pa.schema([("global_nid", pa.int64()), ("part_id", pa.int64()), ("part_local_nid", pa.int64())])
    tmp = staging.node_map.with_name(NODE_MAP_NAME + ".tmp")
    with pq.ParquetWriter(tmp, schema, compression="zstd") as writer:
        step = 1 << 20
        for a in range(0, max(num_nodes, 1), step):
            b = min(num_nodes, a + step)
            writer.write_table(pa.table({
                "global_nid": np.arange(a, b, dtype=np.int64),
                "part_id": master_part[a:b],
                "part_local_nid": part_local[a:b],
            }, schema=schema))
    os.replace(tmp, staging.node_map)
    h = hashlib.sha256()
    _file_sha256(staging.node_map, h)
    return h.hexdigest()


def _apply_journal(staging: _Staging, journal: dict[str, Any], *, forward: bool) -> None:
    """Swap the new stores in (``forward``) or put the old ones back; idempotent.

    Per item the forward swap is two renames: ``OUT/x`` → ``old/x``, then
    ``staging/x`` → ``OUT/x``. Rolling back undoes them in reverse order. Whatever
    prefix of these renames a crash left done, either direction can run again.
    """
    out, old = staging.out, staging.old
    old.mkdir(parents=True, exist_ok=True)
    swapped = 0
    for name in journal["items"]:
        new_src, dest, backup = staging.root / name, out / name, old / name
        if forward:
            if new_src.exists():
                if dest.exists():
                    if backup.exists():
                        _remove(dest)  # unknown leftover; the old copy is safe in old/
                    else:
                        os.rename(dest, backup)
                os.rename(new_src, dest)
                swapped += 1
                if swapped == 1:
                    pause_point("swap")
        else:
            if not new_src.exists() and dest.exists():
                os.rename(dest, new_src)
            if backup.exists() and not dest.exists():
                os.rename(backup, dest)
    for name in journal["retire"]:
        dest, backup = out / name, old / name
        if forward and dest.exists() and not backup.exists():
            os.rename(dest, backup)
        elif not forward and backup.exists() and not dest.exists():
            os.rename(backup, dest)
    if forward:
        pause_point("manifest")
        write_manifest(out, journal["manifest"])
    (staging.root / JOURNAL_NAME).unlink(missing_ok=True)


def _remove(path: Path) -> None:
    if path.is_dir():
        shutil.rmtree(path)
    else:
        path.unlink()


def _recover_journal(staging: _Staging, run_key: str) -> dict | None:
    """Finish or undo an interrupted commit; return its manifest when it was this run's.

    A journal whose manifest already landed (``manifest.json`` has its generation) is
    always completed: only the cleanup was left, and rolling it back would leave the
    new manifest pointing at the old stores.
    """
    journal = staging.journal()
    if journal is None:
        return None
    current = read_manifest(staging.out, missing_ok=True)
    landed = current is not None and current.get("generation") == journal["generation"]
    if journal.get("run_key") == run_key or landed:
        log.warning("completing the interrupted commit of generation %d in %s", journal["generation"], staging.out)
        _apply_journal(staging, journal, forward=True)
        staging.clear()
        return journal["manifest"] if journal.get("run_key") == run_key else None
    log.warning("rolling back the interrupted commit of generation %d in %s (another configuration "
                "or input)", journal["generation"], staging.out)
    _apply_journal(staging, journal, forward=False)
    staging.clear()
    return None


def _begin(out: Path, run_key: str, overwrite: bool) -> tuple[_Staging, int, dict | None]:
    """Recover an interrupted commit, decide resume vs clean start; return the staging."""
    staging = _Staging(out)
    committed = _recover_journal(staging, run_key)
    if committed is not None:
        return staging, int(committed["generation"]), committed
    old = read_manifest(out, missing_ok=True)
    if old is not None and not overwrite:
        raise StoreError(
            format_problem(
                f"output {out}",
                "no committed output (or --overwrite)",
                f"generation {old['generation']} with {old['num_parts']} partitions",
                "pass --overwrite to write the next generation (the current one stays readable "
                "until the new one is committed), or choose another output directory.",
            )
        )
    generation = int(old["generation"]) + 1 if old else 1
    state = staging.state()
    if state and state.get("run_key") == run_key and state.get("generation") == generation:
        log.warning("resuming the interrupted run of generation %d in %s", generation, out)
        staging.begin(run_key, generation)
    else:
        if staging.exists():
            log.warning("discarding an interrupted run in %s (another configuration or input); "
                        "starting clean", out)
        staging.clear()
        staging.begin(run_key, generation)
    return staging, generation, None


def _write_generation(
    staging: _Staging,
    saved: _SavedAssignment,
    *,
    input_info: dict[str, Any],
    run_key: str,
    generation: int,
    halo: int,
    client,
    progress: Progress | None,
    timings: dict[str, float],
) -> dict[str, Any]:
    out = staging.out
    k = saved.num_parts
    feat_dim = int(input_info["feat_dim"])
    attrs = {"num_parts": k, "generation": generation, "undirected": saved.undirected, "halo": halo}
    entries: dict[int, dict] = {}
    for p in range(k):
        entry = _finished_entry(staging, p, attrs)
        if entry is not None:
            entries[p] = entry
    resumed = sorted(entries)
    todo = [p for p in range(k) if p not in entries]
    if resumed:
        log.warning("resuming: %d of %d partitions already finished (checksums verified)", len(resumed), k)

    if todo:
        num_edge_shards = len(saved.edge_shards)
        route_spills = [edge_spill_paths(staging.route, i) for i in range(num_edge_shards)]
        with _timed("route", timings, client) as info:
            calls = [
                ((shard, i, saved.parts_path(i), str(staging.route)),
                 {"num_parts": k, "halo": halo, "undirected": saved.undirected,
                  "master_path": saved.master_path, "batch_rows": int(saved.config.get("batch_rows", 1 << 20))})
                for i, shard in enumerate(saved.edge_shards)
                if not route_spills[i][1].exists()
            ]
            _run_tasks("route", route_edge_shard, calls, client, progress)
            info.update(shards=len(calls), skipped=num_edge_shards - len(calls))
        with _timed("finalize edges", timings, client) as info:
            for p in todo:
                shutil.rmtree(staging.partial_store(p), ignore_errors=True)
            calls = [
                ((p,), {"route_spills": route_spills, "master_path": saved.master_path,
                        "store_path": str(staging.partial_store(p)),
                        "gids_path": str(staging.gids_path(p)), "halo": halo})
                for p in todo
            ]
            edge_infos = _run_tasks("finalize edges", finalize_edges, calls, client, progress)
            info.update(partitions=len(todo), edges=sum(e["counts"]["edges"] for e in edge_infos))
        with _timed("gather nodes", timings, client) as info:
            gids = {p: str(staging.gids_path(p)) for p in todo}
            calls = [((shard, j, gids, str(staging.gather)), {"feat_dim": feat_dim})
                     for j, shard in enumerate(saved.node_shards)]
            rows = _run_tasks("gather nodes", gather_node_shard, calls, client, progress)
            info.update(shards=len(calls), rows=sum(rows))
        with _timed("finalize nodes", timings, client) as info:
            gather_spills = [node_spill_paths(staging.gather, j) for j in range(len(saved.node_shards))]
            calls = [
                ((p, e), {"gather_spills": gather_spills, "store_path": str(staging.partial_store(p)),
                          "final_path": str(staging.store(p)), "feat_dim": feat_dim, "attrs": attrs})
                for p, e in zip(todo, edge_infos)
            ]
            for entry in _run_tasks("finalize nodes", finalize_nodes, calls, client, progress):
                entries[entry["part_id"]] = entry
            info.update(partitions=len(todo))

    with _timed("node map", timings, client):
        node_map_sha = _write_node_map(staging, saved.num_nodes, k)

    with _timed("commit", timings, client):
        old = read_manifest(out, missing_ok=True)
        old_names = {e["path"] for e in old["partitions"]} if old else set()
        if old and old.get("state"):
            old_names.add(STATE_NAME)
        names = [part_name(p) for p in range(k)]
        state = state_identity(staging.state_path)
        if state is not None and state[0] == generation:
            names.append(STATE_NAME)
        else:
            state = None
        workers = _worker_peak_rss(client)
        manifest = {
            "format": MANIFEST_FORMAT,
            "format_version": MANIFEST_VERSION,
            "generation": generation,
            "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            "num_parts": k,
            "num_nodes": saved.num_nodes,
            "num_edges": saved.num_edges,
            "feat_dim": feat_dim,
            "undirected": saved.undirected,
            "halo": halo,
            "algorithm": saved.config.get("algo"),
            "config": saved.config,
            "input": {k2: v for k2, v in input_info.items() if k2 != "feat_dim"},
            "input_generation": generation,
            "metrics": saved.metrics,
            "timings": {k2: round(v, 4) for k2, v in timings.items()},
            "run": {
                "resumed_partitions": resumed,
                "peak_rss_bytes": {"driver": peak_rss_bytes(), "workers": workers},
            },
            "node_map": {"path": NODE_MAP_NAME, "sha256": node_map_sha},
            "partitions": [
                {"part_id": p, "path": part_name(p), "generation": generation, **entries[p]} for p in range(k)
            ],
            "run_key": run_key,
        }
        if state is not None:
            manifest["state"] = state_entry(generation, state[1])
        journal = {
            "run_key": run_key,
            "generation": generation,
            "items": names + [NODE_MAP_NAME],
            "retire": sorted(old_names - set(names)),
            "manifest": manifest,
        }
        _write_json_atomic(staging.root / JOURNAL_NAME, journal)
        _apply_journal(staging, journal, forward=True)
        staging.clear()
    log.info("committed generation %d of %s: %d partitions", generation, out, k)
    return manifest


# --- public entry points ------------------------------------------------------------------


def _resolved_config(config: PartitionConfig, input_url, storage_options) -> PartitionConfig:
    if config.undirected is None:
        meta = read_meta(input_url, storage_options) or {}
        config = replace(config, undirected=bool(meta.get("undirected", False)))
    return config.effective()


def partition_to_store(
    input_url: str | Path,
    out: str | Path,
    config: PartitionConfig,
    *,
    halo: int = 0,
    client=None,
    overwrite: bool = False,
    progress: Progress | None = None,
    storage_options: dict | None = None,
) -> dict[str, Any]:
    """Validate, partition and write: the whole ``asepr partition`` run.

    Bad input fails in validation, before anything is written. The output gets a new
    generation only when everything succeeded; a failed or killed run leaves the
    previous one intact, and the same command resumes it.

    Parameters
    ----------
    input_url
        The input directory (``edges/``, ``nodes/``, optional ``meta.json``).
    out
        The output directory (local).
    config
        How to partition (:class:`~pipeline.config.PartitionConfig`).
    halo
        1 to copy the 1-hop in-neighbourhood of every master into its partition.
    client
        A ``distributed.Client``; None runs the Dask stages on local threads.
    overwrite
        Allow replacing a committed output (by the next generation).
    progress
        ``progress(stage, total)`` → a context manager with ``update(n)``, per stage.

    Returns
    -------
    dict
        The committed manifest.

    Raises
    ------
    InputError, SchemaError
        The input is invalid (nothing was written).
    StoreError
        The output is unusable, locked by another writer, or a disk error occurred.
    """
    from pipeline.partition import partition

    halo = _check_halo(halo)
    out_path = _local_output(out, storage_options)
    created = _prepare_output_dir(out_path)
    try:
        with OutputLock(out_path), _disk_errors(out_path):
            timings: dict[str, float] = {}
            start = time.perf_counter()
            with stage("validate", log):
                config = _resolved_config(config, input_url, storage_options)
                report = validate_input(input_url, undirected=config.undirected, check_duplicates=False,
                                        storage_options=storage_options)
            timings["validate"] = time.perf_counter() - start
            input_info = _input_info_from_report(input_url, report, storage_options)
            run_key = _run_key(config.to_dict(), halo, input_info)
            staging, generation, committed = _begin(out_path, run_key, overwrite)
            if committed is not None:
                return committed
            edges_url, nodes_url = input_paths(input_url)
            edge_shards = discover_shards(edges_url, what="edge shards", storage_options=storage_options)
            node_shards = discover_shards(nodes_url, what="node shards", storage_options=storage_options)
            saved = _load_assignment(staging.work, run_key, edge_shards, node_shards)
            if saved is not None and not _staged_state_ok(staging, generation):
                saved = None
            if saved is None:
                staging.reset_work()
                with progress("assign", 1) if progress else _NoBar() as bar:
                    assignment = partition(
                        input_url, config=config, client=client, workdir=staging.work,
                        report=report, storage_options=storage_options,
                    )
                    bar.update(1)
                try:
                    _stage_state(staging, assignment, generation, input_info)
                    saved = _save_assignment(assignment, staging.work, run_key, halo)
                finally:
                    assignment.close()
                del assignment
            else:
                log.warning("resuming: reusing the saved assignment of generation %d", generation)
            saved.timings = {**saved.timings, "validate": timings["validate"]}
            return _write_generation(
                staging, saved, input_info=input_info, run_key=run_key, generation=generation,
                halo=halo, client=client, progress=progress, timings=dict(saved.timings),
            )
    finally:
        if created:
            _remove_if_empty(out_path)


def write_partitions(
    assignment,
    out: str | Path,
    *,
    halo: int = 0,
    client=None,
    overwrite: bool = False,
    progress: Progress | None = None,
    input_url: str | Path | None = None,
) -> dict[str, Any]:
    """Write the stores of an existing :class:`~pipeline.Assignment` and commit them.

    Like :func:`partition_to_store` without the partitioning; a rerun resumes only
    when the assignment is bit-identical to the interrupted run's.

    Returns
    -------
    dict
        The committed manifest.
    """
    halo = _check_halo(halo)
    out_path = _local_output(out, None)
    created = _prepare_output_dir(out_path)
    try:
        with OutputLock(out_path), _disk_errors(out_path):
            input_info = _input_info_from_shards(input_url, assignment.edge_shards, assignment.node_shards)
            run_key = _run_key(assignment.config.to_dict(), halo, input_info)
            staging, generation, committed = _begin(out_path, run_key, overwrite)
            if committed is not None:
                return committed
            parts = _parts_files(assignment.workdir, len(assignment.edge_shards))
            digest = _assignment_digest(assignment.master, parts)
            saved = _load_assignment(staging.work, run_key, assignment.edge_shards, assignment.node_shards)
            if saved is not None and saved.digest != digest:
                log.warning("discarding an interrupted run in %s (another assignment); starting clean", out_path)
                staging.clear()
                staging.begin(run_key, generation)
                saved = None
            if saved is not None and not _staged_state_ok(staging, generation):
                saved = None
            if saved is None:
                staging.reset_work()
                _stage_state(staging, assignment, generation, input_info)
                saved = _save_assignment(assignment, staging.work, run_key, halo)
            return _write_generation(
                staging, saved, input_info=input_info, run_key=run_key, generation=generation,
                halo=halo, client=client, progress=progress, timings=dict(saved.timings),
            )
    finally:
        if created:
            _remove_if_empty(out_path)
