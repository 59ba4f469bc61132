"""The commit protocol: staging, journal, recovery, resumption, finished stores, node map.

``asepr partition`` (:mod:`asepr.pipeline.store.write`), ``asepr ingest`` and ``asepr
rebalance`` (:mod:`asepr.pipeline.increment.generation`) write a new generation of an output
the same way. Holding the output's lock (:class:`asepr.storage.commit.lock.OutputLock`), they work
inside ``OUT/.asepr-staging/`` until the commit::

    OUT/
      manifest.json  part-*.zarr/  node_map.parquet  state.zarr/   generation g (untouched)
      .asepr.lock                                       owner pid, host, command
      .asepr-staging/                                   :class:`Staging`
        run.json                    run key and generation (resumption)
        work/                       the run's decision (assignment or plan), saved last
        route/  gather/  fetch/     spill files (asepr.pipeline.store.route), one writer each
        global_nid/part-*.npy       each partition's sorted global_nid, for the node gather
        .part-*.zarr.partial/       a store being written
        part-*.zarr/                a finished store (renamed from .partial; checksummed)
        node_map.parquet  state.zarr/
        commit.json                 the journal: the manifest about to be committed
        old/                        generation g's replaced files, while swapping

Commit (:func:`commit`): write the journal, then for each item move the old one into
``old/`` and the new one into place, then replace ``manifest.json`` atomically, then
delete the staging directory. Readers trust the manifest and look in ``old/`` for a
store of the manifest's generation (:func:`asepr.storage.partitions.output_stores.resolve_store_url`),
so generation g stays readable until the new manifest lands.

A rerun after a crash first finishes or undoes an interrupted commit
(:func:`recover_journal`), then resumes the staged run when its run key and
generation match, or discards it (:meth:`Staging.open_run`), and reuses every finished
store whose checksums verify (:func:`finished_entries`).

Every path a journal names must lie inside the output (:func:`check_journal`), and
no file or directory of the protocol may be a symbolic link: a crafted or damaged
staging directory is refused before anything is moved or deleted.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import logging
import os
import shutil
import time
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from asepr.pipeline.planning.needs import MIB, Need, RunShape
from asepr.storage.commit import failpoints
from asepr.storage.commit.atomic import atomic_file, refuse_symlink, write_json_atomic
from asepr.storage.commit.confine import confined_path
from asepr.storage.errors import AseprError, StoreError, format_problem, os_error_problem
from asepr.storage.inputs.npy import load_npy
from asepr.storage.locations.fs import resolve, url_of
from asepr.storage.locations.location import remove_tree, tree_bytes, tree_exists
from asepr.storage.partitions.manifest import (
    JOURNAL_NAME,
    MANIFEST_NAME,
    NODE_MAP_NAME,
    OLD_DIR,
    STAGING_NAME,
    part_name,
    read_manifest,
    write_manifest,
)
from asepr.storage.partitions.state import STATE_NAME
from asepr.storage.partitions.store import checksum_problems, open_store

__all__ = [
    "NODE_MAP_BYTES",
    "RUN_NAME",
    "Staging",
    "apply_journal",
    "check_journal",
    "commit",
    "disk_errors",
    "file_sha256",
    "finished_entries",
    "finished_entry",
    "local_output",
    "read_json_object",
    "recover_journal",
    "node_map_from_ids",
    "node_map_needs",
    "write_node_map",
]

log = logging.getLogger(__name__)

#: The staged run's identity (run key, generation), for resumption.
RUN_NAME = "run.json"
#: ``node_map.parquet`` (zstd) per node: the sequential ids compress away, the part ids
#: and part-local ids do not.
NODE_MAP_BYTES = 5.0


# --- the output directory ------------------------------------------------------------------


def local_output(out: str | Path, storage_options: dict | None, what: str = "`asepr ingest` of a text edge list",
                 fix: str = "ingest it into a local copy of the output, or give Parquet shards in the output's "
                            "node ids") -> Path:
    """The output directory as a local path, for what writes only local outputs (an
    ingest of a text edge list, which also appends to the input's id map); a remote
    URL is refused naming ``what`` and ``fix``.

    Raises
    ------
    StoreError
        ``out`` is not on a local (or mounted) filesystem.
    """
    fs, path = resolve(out, storage_options)
    protocol = fs.protocol if isinstance(fs.protocol, str) else fs.protocol[0]
    if protocol not in ("file", "local"):
        raise StoreError(
            format_problem(
                f"output {url_of(fs, path)}",
                f"a local (or mounted shared) directory: {what} does not write to an object store yet",
                f"a {protocol}:// URL", f"{fix}.",
            )
        )
    return Path(path)



@contextlib.contextmanager
def disk_errors(out: Path) -> Iterator[None]:
    """Turn an OSError (disk full, permissions) into a StoreError that says the old output is safe."""
    try:
        yield
    except AseprError:
        raise
    except OSError as exc:
        problem = os_error_problem(exc, within=f"output {out}",
                                   then="rerun the same command: finished partitions are resumed. The "
                                        "previously committed generation (if any) is intact")
        if problem is not None:
            raise problem from exc
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


# --- small files of the protocol ------------------------------------------------------------


def read_json_object(path: Path) -> dict | None:
    """The JSON object in ``path``; None when it is missing, unreadable or not an object.

    Raises
    ------
    StoreError
        ``path`` is a symbolic link (refused, never followed).
    """
    refuse_symlink(path)
    try:
        value = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return value if isinstance(value, dict) else None


def file_sha256(path: Path, digest=None):
    """Feed the bytes of ``path`` into ``digest`` (default: a new sha256); return the digest."""
    digest = digest if digest is not None else hashlib.sha256()
    with open(path, "rb") as fh:
        while block := fh.read(8 << 20):
            digest.update(block)
    return digest


# --- the staging directory -------------------------------------------------------------------


class Staging:
    """The staging directory ``OUT/.asepr-staging`` of a run, and the paths inside it.

    Parameters
    ----------
    out
        The (local) output directory.

    Raises
    ------
    StoreError
        The staging directory is a symbolic link.
    """

    #: Options of the filesystem the stores are written to (a remote output's).
    storage_options: dict | None = None

    def __init__(self, out: Path):
        self.out = Path(out)
        self.root = self.out / STAGING_NAME
        refuse_symlink(self.root)
        self.work = self.root / "work"
        self.route = self.root / "route"
        self.gather = self.root / "gather"
        self.fetch = self.root / "fetch"
        self.global_nid_dir = self.root / "global_nid"
        self.old = self.root / OLD_DIR
        self.node_map = self.root / NODE_MAP_NAME
        self.state_path = self.root / STATE_NAME
        self.journal_path = self.root / JOURNAL_NAME

    def exists(self) -> bool:
        """Whether a staging directory exists (a run in progress or interrupted)."""
        return self.root.exists()

    def clear(self) -> None:
        """Delete the staging directory and everything in it."""
        refuse_symlink(self.root)
        shutil.rmtree(self.root, ignore_errors=True)

    def _make_dirs(self) -> None:
        for d in (self.root, self.work, self.route, self.gather, self.fetch, self.global_nid_dir):
            refuse_symlink(d)
            d.mkdir(parents=True, exist_ok=True)

    def open_run(self, run_key: str, generation: int, command: str) -> None:
        """Open the staged run of ``generation``: the one implementation of resumption.

        An interrupted run of the same ``run_key`` and ``generation`` is resumed (its
        files are kept); anything else staged is discarded and the run starts clean.

        Parameters
        ----------
        run_key
            The identity of the run (command, configuration, input fingerprints).
        generation
            The generation being written.
        command
            ``"partition"``, ``"ingest"`` or ``"rebalance"``, for the log.
        """
        run = self.run_record()
        if run and run.get("run_key") == run_key and run.get("generation") == generation:
            log.warning("resuming the interrupted %s of generation %d in %s", command, generation, self.out)
        else:
            if self.exists():
                log.warning("discarding an interrupted run in %s (another command, configuration or input); "
                            "starting clean", self.out)
            self.clear()
        self._make_dirs()
        write_json_atomic(self.root / RUN_NAME, {"run_key": run_key, "generation": generation,
                                                 "started": time.strftime("%Y-%m-%dT%H:%M:%S%z")})

    def restart(self, run_key: str, generation: int, command: str) -> None:
        """Discard everything staged and open a clean run of ``generation``."""
        self.clear()
        self.open_run(run_key, generation, command)

    def reset_work(self) -> None:
        """Empty ``work/`` (the run's decision is made again)."""
        refuse_symlink(self.work)
        shutil.rmtree(self.work, ignore_errors=True)
        self.work.mkdir(parents=True)

    def run_record(self) -> dict | None:
        """The staged ``run.json`` (run key, generation), if any."""
        return read_json_object(self.root / RUN_NAME)

    def journal(self) -> dict | None:
        """The commit journal, checked (:func:`check_journal`); None when there is none."""
        journal = read_json_object(self.journal_path)
        return None if journal is None else check_journal(self, journal)

    def partial_store(self, p: int) -> Path:
        """Where partition ``p``'s store is written."""
        return self.root / f".{part_name(p)}.partial"

    def store(self, p: int) -> Path:
        """Where partition ``p``'s finished store waits for the commit."""
        return self.root / part_name(p)

    def global_nid_path(self, p: int) -> Path:
        """The sorted ``global_nid`` array (``.npy``) of partition ``p``, for the node gather."""
        return self.global_nid_dir / f"part-{p:05d}.npy"


# --- finished stores and the node map --------------------------------------------------------


def finished_entry(staging: Staging, p: int, attrs: dict[str, Any]) -> dict[str, Any] | None:
    """The manifest entry of partition ``p``'s finished store in staging, if it verifies.

    A store whose attributes differ from ``attrs`` (another run) or whose checksums
    fail is deleted, and None is returned: the partition is written again.
    """
    path, options = staging.store(p), staging.storage_options
    if not tree_exists(path, options):
        return None
    try:
        store = open_store(path, storage_options=options)
        same = all(store.attrs.get(k) == v for k, v in attrs.items()) and store.part_id == p
        problems = checksum_problems(store) if same else ["attributes of another run"]
    except AseprError as exc:
        problems = [str(exc)]
    if problems:
        log.warning("discarding the unfinished or damaged store %s: %s", path, "; ".join(problems))
        remove_tree(path, options)
        return None
    return {"part_id": p, "checksum": store.attrs["checksum"], "counts": store.attrs["counts"],
            "bytes": tree_bytes(path, options)}


def finished_entries(staging: Staging, parts: Iterable[int], attrs: dict[str, Any]) -> dict[int, dict]:
    """:func:`finished_entry` of each of ``parts`` that has one (the partitions to resume)."""
    entries = {}
    for p in parts:
        entry = finished_entry(staging, p, attrs)
        if entry is not None:
            entries[p] = entry
    return entries


def write_node_map(staging: Staging, parts: Iterable[int], master_part: np.ndarray, part_local: np.ndarray,
                   *, fix: str) -> str:
    """Claim the masters of ``parts``' finished stores and write ``node_map.parquet``.

    Parameters
    ----------
    staging
        Where the finished stores are and the node map goes.
    parts
        The partitions whose stores are read (one at a time: O(N) memory in all).
    master_part, part_local
        ``int64 [N]`` master partition and part-local id per node, filled in place:
        -1 for the nodes that ``parts`` must claim, the previous generation's values
        for the nodes of partitions that do not change.
    fix
        The remedy named when a node is mastered twice or by no partition.

    Returns
    -------
    str
        The sha256 of the written node map.

    Raises
    ------
    StoreError
        A node is mastered by two partitions, or by none.
    """
    for p in parts:
        store = open_store(staging.store(p), storage_options=staging.storage_options)
        global_nid = store.global_nid[...]
        is_master = store.is_master[...]
        mastered = global_nid[is_master]
        if (master_part[mastered] >= 0).any():
            raise StoreError(
                format_problem(f"partition {p}", "masters not claimed by another partition",
                               "a node mastered twice", fix)
            )
        master_part[mastered] = p
        part_local[mastered] = np.flatnonzero(is_master)
    return _write_node_map_file(staging, master_part, part_local, fix)


def node_map_from_ids(staging: Staging, master_path: str, global_nid_paths: list[str], *, fix: str) -> str:
    """:func:`write_node_map` for a generation whose every store is new, from what the
    stores were built from instead of the stores themselves: the ``int32 [N]`` master
    array and each partition's sorted ``global_nid`` (``.npy``, as
    :func:`~asepr.pipeline.store.finalize.finalize_edges` saved and wrote them), so it can
    run while the stores' node rows are still being written. A node's part-local id is
    its position in its master partition's ids, as in the store's ``nodes/is_master``.
    """
    master = load_npy(master_path, mmap_mode="r")
    num_nodes = len(master)
    master_part = np.full(num_nodes, -1, dtype=np.int64)
    part_local = np.full(num_nodes, -1, dtype=np.int64)
    for p, path in enumerate(global_nid_paths):
        gid = load_npy(path, allow_pickle=False)
        if gid.ndim != 1 or (len(gid) and (gid[0] < 0 or gid[-1] >= num_nodes or (np.diff(gid) <= 0).any())):
            raise StoreError(format_problem(f"partition {p}, node id file {path}",
                                            f"increasing node ids in [0, {num_nodes:,})", f"shape {gid.shape}", fix))
        mine = np.flatnonzero(np.asarray(master[gid]) == p)
        master_part[gid[mine]] = p
        part_local[gid[mine]] = mine
    return _write_node_map_file(staging, master_part, part_local, fix)


def _write_node_map_file(staging: Staging, master_part: np.ndarray, part_local: np.ndarray, fix: str) -> str:
    """Check every node has a master and write ``node_map.parquet``; its sha256."""
    missing = np.flatnonzero(master_part < 0)
    if len(missing):
        raise StoreError(
            format_problem("node_map", "one master partition for every node",
                           f"{len(missing):,} node(s) without one, e.g. global_nid {int(missing[0])}", fix)
        )
    num_nodes = len(master_part)
    schema = pa.schema([("global_nid", pa.int64()), ("part_id", pa.int64()), ("part_local_nid", pa.int64())])
    with atomic_file(staging.node_map, durable=False) as fh, \
            pq.ParquetWriter(fh, schema, compression="zstd", use_dictionary=False) as writer:
        # No dictionary pages: on 5M nodes they halved the write speed and grew the file.
        step = 1 << 20
        for a in range(0, max(num_nodes, 1), step):
            b = min(num_nodes, a + step)
            writer.write_table(pa.table({
                "global_nid": np.arange(a, b, dtype=np.int64),
                "part_id": master_part[a:b],
                "part_local_nid": part_local[a:b],
            }, schema=schema))
    return file_sha256(staging.node_map).hexdigest()


# --- the journal ------------------------------------------------------------------------------


def _journal_problem(staging: Staging, expected: str, found: str) -> StoreError:
    return StoreError(
        format_problem(
            f"commit journal {staging.journal_path}",
            expected,
            found,
            "the file was damaged or not written by asepr: nothing was moved. Restore it, or remove "
            f"{staging.root} (the committed generation stays as the manifest says) and run `asepr verify`.",
        )
    )


def _swap_paths(staging: Staging, name: str, field: str) -> tuple[Path, Path, Path]:
    """``(staged, committed, backup)`` paths of a journal entry, each confined and no link."""
    what = f"commit journal {staging.journal_path} ({field})"
    paths = (confined_path(staging.root, name, what=what), confined_path(staging.out, name, what=what),
             confined_path(staging.old, name, what=what))
    lexical = (staging.root / name, staging.out / name, staging.old / name)
    for path in lexical:
        refuse_symlink(path)
    return paths


def check_journal(staging: Staging, journal: Any) -> dict[str, Any]:
    """Check a commit journal's shape and that every path it names stays inside the output.

    Each name in ``items`` and ``retire`` is resolved against the staging directory,
    the output and ``old/``; each must resolve inside that directory and none may be
    a symbolic link.

    Returns
    -------
    dict
        ``journal``, unchanged.

    Raises
    ------
    StoreError
        A malformed journal or an entry outside the output (the message names the
        journal file and the entry). Nothing has been moved.
    """
    shape = {"generation": int, "items": list, "retire": list, "manifest": dict}
    if not isinstance(journal, dict) or any(not isinstance(journal.get(k), t) for k, t in shape.items()):
        found = {k: type(journal.get(k)).__name__ for k in shape} if isinstance(journal, dict) else journal
        raise _journal_problem(staging, "a JSON object with generation, items, retire and manifest", f"{found}")
    for field in ("items", "retire"):
        for name in journal[field]:
            _swap_paths(staging, name, field)
    return journal


def apply_journal(staging: Staging, journal: dict[str, Any], *, forward: bool) -> None:
    """Swap the new files in (``forward``) or put the old ones back; idempotent.

    Per item the forward swap is two renames: ``OUT/x`` → ``old/x``, then
    ``staging/x`` → ``OUT/x``. Rolling back undoes them in reverse order. Whatever
    prefix of these renames a crash left done, either direction can run again.
    """
    check_journal(staging, journal)
    refuse_symlink(staging.out / MANIFEST_NAME)
    staging.old.mkdir(parents=True, exist_ok=True)
    swapped = 0
    for name in journal["items"]:
        new_src, dest, backup = _swap_paths(staging, name, "items")
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
                    failpoints.failpoint("swap")
        else:
            if not new_src.exists() and dest.exists():
                os.rename(dest, new_src)
            if backup.exists() and not dest.exists():
                os.rename(backup, dest)
    for name in journal["retire"]:
        _, dest, backup = _swap_paths(staging, name, "retire")
        if forward and dest.exists() and not backup.exists():
            os.rename(dest, backup)
        elif not forward and backup.exists() and not dest.exists():
            os.rename(backup, dest)
    if forward:
        failpoints.failpoint("manifest")
        write_manifest(staging.out, journal["manifest"])
    staging.journal_path.unlink(missing_ok=True)


def _remove(path: Path) -> None:
    if path.is_dir():
        shutil.rmtree(path)
    else:
        path.unlink()


def commit(staging: Staging, *, run_key: str, generation: int, items: list[str], retire: list[str],
           manifest: dict[str, Any]) -> None:
    """Commit generation ``generation``: journal, swap, new manifest, staging deleted.

    Parameters
    ----------
    staging
        The staging directory holding the new ``items``.
    run_key, generation
        The run's identity (a rerun of the same run completes an interrupted commit).
    items
        Names (relative to the output) of the staged files and stores to swap in.
    retire
        Names of committed files that the new generation drops (moved into ``old/``).
    manifest
        The new manifest, written last.

    Raises
    ------
    StoreError
        A name that would leave the output, or ``manifest.json`` is a symbolic link
        (nothing is written or moved).
    """
    journal = check_journal(staging, {"run_key": run_key, "generation": generation, "items": items,
                                      "retire": retire, "manifest": manifest})
    refuse_symlink(staging.out / MANIFEST_NAME)
    write_json_atomic(staging.journal_path, journal)
    apply_journal(staging, journal, forward=True)
    staging.clear()


def recover_journal(staging: Staging, run_key: str) -> dict | None:
    """Finish or undo an interrupted commit; return its manifest when it was this run's.

    A journal whose manifest already landed (``manifest.json`` has its generation) is
    always completed: only the cleanup was left, and rolling it back would leave the
    new manifest pointing at the old stores.

    Raises
    ------
    StoreError
        A malformed journal or one naming a path outside the output (:func:`check_journal`).
    """
    journal = staging.journal()
    if journal is None:
        return None
    current = read_manifest(staging.out, missing_ok=True)
    landed = current is not None and current.get("generation") == journal["generation"]
    if journal.get("run_key") == run_key or landed:
        log.warning("completing the interrupted commit of generation %d in %s", journal["generation"], staging.out)
        apply_journal(staging, journal, forward=True)
        staging.clear()
        return journal["manifest"] if journal.get("run_key") == run_key else None
    log.warning("rolling back the interrupted commit of generation %d in %s (another configuration "
                "or input)", journal["generation"], staging.out)
    apply_journal(staging, journal, forward=False)
    staging.clear()
    return None


def node_map_needs(s: RunShape) -> Need:
    """Memory and disk of :func:`node_map_from_ids` (:func:`write_node_map` on a resumed
    run): ``master_part`` and ``part_local`` int64[N], one partition's ``global_nid`` and
    masters at a time, 1M-row Parquet tables."""
    node_map = NODE_MAP_BYTES * s.n
    return Need(driver=16 * s.n + 9 * s.n_p + 16 * s.n / s.k + 48 * MIB, written=node_map, kept=node_map)
