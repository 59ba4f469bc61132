"""The commit protocol of an output on an object store: one prefix per generation, one
pointer written last.

An object store has no rename of a directory (S3 copies every object, one at a time),
so a remote output never moves anything. Each generation is written where it stays::

    OUT/
      manifest.json                  the pointer: written last, in one PUT
      .asepr.lease                   the writer's lease (asepr.storage.commit.lease)
      gen-00003-1f2e3d4c/            generation 3
        run.json                     run key and generation (resumption), assignment digest
        part-00000.zarr/ ...         written by whoever builds them (Dask tasks)
        node_map.parquet  state.zarr/
      gen-00002-9a8b7c6d/            generation 2: retired (deleted) once 3 is committed

A reader opens ``manifest.json`` and follows its paths (each relative to ``OUT``, each
confined to it: :func:`asepr.storage.partitions.output_stores.resolve_store_url`); it never lists the
output, so a half-written prefix is invisible. The commit (:meth:`RemoteStaging.publish`)
uploads the node map and state from the local scratch, reads the lease back (a writer
that lost it never commits), writes ``manifest.json`` in one PUT (an object store
replaces an object atomically: a reader gets the old manifest or the new one), then
deletes every generation prefix the new manifest does not name. Where the store honours
conditional writes (:mod:`asepr.storage.commit.conditional`), that PUT is a compare-and-swap on
the manifest's ETag read just after the lease was taken, so a writer paused past its
lease between the read-back and the PUT cannot overwrite the commit of the writer that
took the lease over. A writer killed before
that PUT leaves the previous manifest and every prefix it names untouched. The same
command resumes: :func:`begin_remote_run` finds the abandoned prefix whose ``run.json``
has the same run key and generation and reuses its finished stores (those whose
checksums verify, and only for the same assignment); any other unnamed prefix is
deleted.

The spill files and the decoded input copy go to a local scratch directory
(``--scratch``, by default a new directory under the system's temporary directory,
removed after the run); the stores themselves never touch the local disk.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import re
import secrets
import shutil
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from asepr.pipeline.store.commit import RUN_NAME, Staging
from asepr.storage.commit import failpoints
from asepr.storage.commit.atomic import dumps_json
from asepr.storage.commit.conditional import (
    PROBE_PREFIX,
    conditional_writes,
    manifest_etag,
    put_if_unchanged,
)
from asepr.storage.commit.lease import LEASE_NAME, Lease
from asepr.storage.errors import AseprError, StoreError, format_problem
from asepr.storage.locations.fs import join, resolve, url_of
from asepr.storage.locations.location import is_local, remove_tree
from asepr.storage.locations.remote import remote_errors_as_problems
from asepr.storage.partitions.manifest import MANIFEST_NAME, part_name, read_manifest, write_manifest

__all__ = ["GENERATION_PATTERN", "RemoteOutput", "RemoteStaging", "begin_remote_run", "generation_dir",
           "named_prefixes", "remote_output"]

log = logging.getLogger(__name__)

#: The name of a generation's prefix: ``gen-<generation, 5 digits>-<random hex>``.
GENERATION_PATTERN = re.compile(r"gen-\d{5,}-[0-9a-f]{8,}")
#: The names of a local output's layout, in an output copied to the store by hand: its
#: manifest names them without a prefix, and a later generation retires them.
LOCAL_LAYOUT = re.compile(r"part-\d{5,}\.zarr|node_map\.parquet|state\.zarr")


def generation_dir(generation: int) -> str:
    """A new prefix name for ``generation`` (random, so two attempts never share one)."""
    return f"gen-{int(generation):05d}-{secrets.token_hex(4)}"


@dataclass(frozen=True)
class RemoteOutput:
    """An output prefix on an object store: the filesystem, the path, the options."""

    fs: Any
    path: str
    storage_options: dict | None

    @property
    def url(self) -> str:
        return url_of(self.fs, self.path)

    def url_of(self, *parts: str) -> str:
        """The URL of ``parts`` below the output."""
        return url_of(self.fs, join(self.path, *parts))

    def names(self) -> list[str]:
        """The names directly under the output."""
        try:
            return sorted(p.rstrip("/").rpartition("/")[2]
                          for p in self.fs.ls(self.path, detail=False, refresh=True))
        except FileNotFoundError:
            return []

    def prefixes(self) -> list[str]:
        """The generation prefixes present under the output (names, not paths)."""
        return [n for n in self.names() if GENERATION_PATTERN.fullmatch(n)]

    def read_json(self, *parts: str) -> dict | None:
        """The JSON object at ``parts`` below the output; None when absent or not an object."""
        try:
            value = json.loads(self.fs.cat(join(self.path, *parts)))
        except (FileNotFoundError, ValueError):
            return None
        return value if isinstance(value, dict) else None

    def write_json(self, obj: Any, *parts: str) -> None:
        """Write ``obj`` as one object (one PUT) at ``parts`` below the output."""
        self.fs.pipe(join(self.path, *parts), dumps_json(obj))


def named_prefixes(manifest: dict[str, Any] | None) -> set[str]:
    """The first components of a manifest's paths: the generation prefixes they lie in
    (or, for an output copied from a local disk, the top-level names of its layout)."""
    if not manifest:
        return set()
    paths = [e.get("path") for e in manifest.get("partitions", []) if isinstance(e, dict)]
    paths += [(manifest.get(k) or {}).get("path") for k in ("node_map", "state")]
    return {p.split("/", 1)[0] for p in paths if isinstance(p, str) and p}


class RemoteStaging(Staging):
    """A run's staging for a remote output: spill files and the assignment in the local
    scratch directory (as :class:`~asepr.pipeline.store.commit.Staging` has them), the stores
    in the generation's prefix of the output.

    Parameters
    ----------
    target
        The output.
    scratch
        The local directory for spill files (``scratch/.asepr-staging``).
    lease
        The writer's lease, held for the whole run.
    fenced
        Whether the store honours conditional writes: the manifest is then committed
        only if it is still the version ``began_from`` (its ETag; None: no manifest).
    """

    def __init__(self, target: RemoteOutput, scratch: Path, lease: Lease, *, fenced: bool = False,
                 began_from: str | None = None):
        super().__init__(scratch)
        self.target, self.lease = target, lease
        self.storage_options = target.storage_options
        self.gen_dir: str | None = None
        self.fenced, self.began_from = fenced, began_from

    def store(self, p: int) -> str:
        """Where partition ``p``'s store is written, and stays: in the generation's prefix."""
        if self.gen_dir is None:
            raise RuntimeError("RemoteStaging.store: no generation begun")
        return self.target.url_of(self.gen_dir, part_name(p))

    def partial_store(self, p: int) -> str:
        """The same as :meth:`store`: a remote store is finished by its attributes, not a rename."""
        return self.store(p)

    def bind_assignment(self, digest: str) -> None:
        """Record the assignment the generation's stores are built from; stores of
        another assignment (an interrupted run that decided differently) are deleted."""
        run = self.target.read_json(self.gen_dir, RUN_NAME) or {}
        if run.get("assignment") not in (None, digest):
            log.warning("discarding the stores of %s: built from another assignment", self.target.url_of(self.gen_dir))
            for name in self.target.fs.ls(join(self.target.path, self.gen_dir), detail=False, refresh=True):
                if name.rstrip("/").rpartition("/")[2].startswith("part-"):
                    remove_tree(url_of(self.target.fs, name), self.storage_options)
        self.target.write_json({**run, "assignment": digest}, self.gen_dir, RUN_NAME)

    def discard(self) -> None:
        """Delete the generation's prefix (a run that decided to commit nothing)."""
        remove_tree(self.target.url_of(self.gen_dir), self.storage_options)

    def _upload(self, local: Path, name: str) -> None:
        """Copy the local file or tree ``local`` to ``name`` in the generation's prefix."""
        dest = join(self.target.path, self.gen_dir, name)
        remove_tree(url_of(self.target.fs, dest), self.storage_options)
        if local.is_file():
            self.target.fs.put_file(str(local), dest)
            return
        for root, _, files in os.walk(local):
            rel = os.path.relpath(root, local)
            for f in files:
                self.target.fs.put_file(os.path.join(root, f), join(dest, *([] if rel == "." else [rel]), f))

    def publish(self, manifest: dict[str, Any], generation: int) -> dict[str, Any]:
        """Commit ``manifest``: upload the node map and state, check the lease, write
        ``manifest.json`` (one PUT), retire the prefixes it no longer names.

        The entries of ``manifest`` written in ``generation`` (partitions, node map,
        state) name paths relative to the generation's prefix; they are rewritten
        relative to the output. Returns the committed manifest.
        """
        manifest = json.loads(json.dumps(manifest))
        for entry in manifest["partitions"]:
            if int(entry.get("generation", generation)) == generation:
                entry["path"] = f"{self.gen_dir}/{entry['path']}"
        self._upload(self.node_map, manifest["node_map"]["path"])
        manifest["node_map"]["path"] = f"{self.gen_dir}/{manifest['node_map']['path']}"
        state = manifest.get("state")
        if state and int(state.get("generation", -1)) == generation:
            self._upload(self.state_path, state["path"])
            state["path"] = f"{self.gen_dir}/{state['path']}"
        manifest["generation_prefix"] = self.gen_dir
        failpoints.failpoint("manifest")
        self.lease.check_held()
        failpoints.failpoint("commit-put")
        if self.fenced:
            began = f"ETag {self.began_from}" if self.began_from else "no manifest yet"
            put_if_unchanged(self.target.fs, join(self.target.path, MANIFEST_NAME), dumps_json(manifest),
                             self.began_from, began=began)
        else:
            write_manifest(self.target.url, manifest, storage_options=self.storage_options)
        keep = named_prefixes(manifest)
        for name in self.target.names():
            if name not in keep and (GENERATION_PATTERN.fullmatch(name) or LOCAL_LAYOUT.fullmatch(name)):
                log.info("retiring generation prefix %s", self.target.url_of(name))
                remove_tree(self.target.url_of(name), self.storage_options)
        self.clear()
        return manifest


def begin_remote_run(staging: RemoteStaging, run_key: str, overwrite: bool,
                     command: str = "partition") -> tuple[int, dict | None]:
    """Open a run's generation on a remote output: ``(generation, old manifest)``.

    A prefix the current manifest does not name is the leftover of a killed writer:
    the one whose ``run.json`` has this run key and the next generation is resumed,
    every other one is deleted.

    Raises
    ------
    StoreError
        A committed output without ``overwrite`` (partition only).
    """
    target = staging.target
    old = read_manifest(target.url, storage_options=target.storage_options, missing_ok=True)
    if old is not None and not overwrite:
        raise StoreError(format_problem(
            f"output {target.url}", "no committed output (or --overwrite)",
            f"generation {old['generation']} with {old['num_parts']} partitions",
            "pass --overwrite to write the next generation (the current one stays readable "
            "until the new one is committed), or choose another output."))
    generation = int(old["generation"]) + 1 if old else 1
    named = named_prefixes(old)
    resumed = None
    for name in target.prefixes():
        if name in named:
            continue
        run = target.read_json(name, RUN_NAME) or {}
        if resumed is None and run.get("run_key") == run_key and run.get("generation") == generation:
            resumed = name
            log.warning("resuming the interrupted %s of generation %d in %s", command, generation,
                        target.url_of(name))
            continue
        log.warning("deleting %s: a generation never committed", target.url_of(name))
        remove_tree(target.url_of(name), target.storage_options)
    staging.gen_dir = resumed or generation_dir(generation)
    if resumed is None:
        target.write_json({"run_key": run_key, "generation": generation,
                           "started": time.strftime("%Y-%m-%dT%H:%M:%S%z")}, staging.gen_dir, RUN_NAME)
    staging.open_run(run_key, generation, command)
    return generation, old


def _owned(name: str) -> bool:
    return name in (MANIFEST_NAME, LEASE_NAME) or name.startswith(PROBE_PREFIX) or bool(
        GENERATION_PATTERN.fullmatch(name) or LOCAL_LAYOUT.fullmatch(name))


def _check_prefix(target: RemoteOutput) -> None:
    """Refuse an output prefix that holds objects no asepr output has."""
    foreign = [n for n in target.names() if not _owned(n)]
    if foreign:
        raise StoreError(format_problem(
            f"output {target.url}", "an empty prefix or the output of `asepr partition`",
            f"other objects, e.g. {foreign[:3]}", "choose a new or empty output prefix."))


@contextlib.contextmanager
def remote_output(out: str | Path, storage_options: dict | None, scratch: str | Path | None = None, *,
                  command: str | None = None) -> Iterator[RemoteStaging]:
    """A remote output, leased for the run, with its local scratch directory.

    ``scratch`` None: a new directory under the system's temporary directory, removed
    on the way out; a given directory is kept (a rerun with the same one resumes the
    spill files too), the run working in a subdirectory named by the output's URL.

    Raises
    ------
    StoreError
        The prefix holds foreign objects, another writer holds the lease, or a store
        request failed (naming the output; the committed generation is intact).
    """
    fs, path = resolve(out, storage_options)
    if is_local(fs):
        raise ValueError(f"remote_output: {out} is a local path")
    target = RemoteOutput(fs=fs, path=path.rstrip("/"), storage_options=storage_options)
    own = scratch is None
    scratch_dir = Path(tempfile.mkdtemp(prefix="asepr-scratch-")) if own else Path(scratch)
    try:
        scratch_dir.mkdir(parents=True, exist_ok=True)
        with _store_errors(target.url), remote_errors_as_problems(target.url, doing="writing"):
            _check_prefix(target)
            lease = Lease(fs, join(target.path, LEASE_NAME), target.url_of(LEASE_NAME), command=command)
            # One directory per output: two runs given the same --scratch never share spills.
            local = scratch_dir / hashlib.sha256(target.url.encode()).hexdigest()[:16]
            local.mkdir(exist_ok=True)
            with lease:
                # The ETag before any read of the manifest's content (asepr.storage.commit.conditional).
                fenced = conditional_writes(fs, target.path)
                began_from = manifest_etag(fs, join(target.path, MANIFEST_NAME)) if fenced else None
                yield RemoteStaging(target, local, lease, fenced=fenced, began_from=began_from)
    finally:
        if own:
            shutil.rmtree(scratch_dir, ignore_errors=True)


@contextlib.contextmanager
def _store_errors(url: str) -> Iterator[None]:
    """An OSError of the store (unreachable, denied, out of space) as a StoreError that
    names the output and says that the committed generation is intact."""
    try:
        yield
    except AseprError:
        raise
    except OSError as exc:
        raise StoreError(format_problem(
            f"output {url}", "store requests that succeed", f"{type(exc).__name__}: {exc}",
            "check the URL, the credentials (--storage-options) and that the store is reachable, then rerun "
            "the same command: finished partitions are resumed, and the committed generation is intact.",
        )) from exc
