"""``state.zarr``: the partitioner state that incremental ingest continues from.

The state is a format, not an algorithm: this module writes, reads and checks the
arrays and attributes below and knows nothing of what a kernel does with them (the
pipeline fills the opaque ``config`` and ``kernel`` attributes). Everything is
O(N) or smaller; nothing here grows with the number of edges.

Layout of ``OUT/state.zarr`` (``N`` nodes = the next free node id, ``k`` partitions,
``W = ceil(k/64)`` replica words, ``C`` attribute clusters, ``d`` feature width,
``d'`` embedded width)::

    state.zarr/
      zarr.json                     group attrs: format, format_version, generation, num_nodes,
                                    num_parts, num_edges, replica_words, feat_dim, algorithm,
                                    config, kernel, locality, shards, array_checksums, checksum
      vertices/
        degree           int64    [N]       exact degree d(v) over every ingested edge
        attr_cluster_id  int32    [N]       attribute cluster of v
        master           int32    [N]       master partition of v
        label            int64    [N]       label of v (-1 unknown), for the metrics
        replicas         uint64   [N, W]    A(v): bit p set when partition p holds an edge of v
        community_id     int64    [N]       (optional) community of v (a founding vertex id)
      communities/
        volume           int64    [N]       (optional) volume of community c (indexed by c)
        part_id          int32    [N]       (optional) partition of community c, -1 when empty
      partitions/
        loads            int64    [k]       edges assigned to each partition
      attributes/
        home             int32    [C]       home partition of each attribute cluster, -1 none
        centroids        float32  [C, d']   (optional) k-means centroids, unit rows
        projection       float32  [d, d']   (optional) the random projection before them

``shards`` lists every ingested input shard, over all generations:
``{"generation", "kind" ("edges" | "nodes"), "url", "rows", "sha256"}``; ingest skips
a shard whose ``sha256`` is listed. Checksums are over content, as in the partition
stores (:func:`asepr.storage.partitions.store.array_digest`).

Commit protocol: the state is written into the run's staging directory and swapped
into place by the same journal as the partition stores; ``manifest.json`` records
``"state": {"path", "generation", "checksum"}``. A reader trusts the manifest: it
opens the ``state.zarr`` (in ``OUT/`` or, during a swap, in the staging directory's
``old/``) whose generation and checksum are the manifest's, and refuses any other
(:func:`read_state`). So the state is never ahead of the manifest nor behind it.
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import zarr
from zarr.codecs import BloscCodec

from asepr.storage.commit.confine import confined_join
from asepr.storage.errors import StoreError, format_problem
from asepr.storage.locations.fs import join, resolve, url_of
from asepr.storage.partitions.manifest import MANIFEST_NAME, OLD_DIR, STAGING_NAME, read_manifest
from asepr.storage.partitions.store import (
    CHUNK_BYTES,
    array_digest,
    combine_digests,
    open_finished_group,
    open_group_readonly,
    zarr_array_digest,
)

__all__ = [
    "OPTIONAL_STATE_ARRAYS",
    "REQUIRED_STATE_ARRAYS",
    "STATE_FORMAT",
    "STATE_NAME",
    "STATE_VERSION",
    "PartitionerState",
    "ingested_fingerprints",
    "open_state",
    "read_state",
    "read_state_attrs",
    "resolve_state_url",
    "state_entry",
    "state_identity",
    "state_problems",
    "write_state",
]

STATE_NAME = "state.zarr"
STATE_FORMAT = "asepr-state"
STATE_VERSION = 1

#: name -> (dtype, ndim); shapes are checked against num_nodes / num_parts on write.
REQUIRED_STATE_ARRAYS: dict[str, tuple[np.dtype, int]] = {
    "vertices/degree": (np.dtype(np.int64), 1),
    "vertices/attr_cluster_id": (np.dtype(np.int32), 1),
    "vertices/master": (np.dtype(np.int32), 1),
    "vertices/label": (np.dtype(np.int64), 1),
    "vertices/replicas": (np.dtype(np.uint64), 2),
    "partitions/loads": (np.dtype(np.int64), 1),
    "attributes/home": (np.dtype(np.int32), 1),
}
OPTIONAL_STATE_ARRAYS: dict[str, tuple[np.dtype, int]] = {
    "vertices/community_id": (np.dtype(np.int64), 1),
    "communities/volume": (np.dtype(np.int64), 1),
    "communities/part_id": (np.dtype(np.int32), 1),
    "attributes/centroids": (np.dtype(np.float32), 2),
    "attributes/projection": (np.dtype(np.float32), 2),
}
_PER_NODE = ("vertices/", "communities/")
_GROUPS = ("vertices", "communities", "partitions", "attributes")


@dataclass
class PartitionerState:
    """A loaded ``state.zarr``: its attributes and its arrays (in memory, O(N)).

    Attributes
    ----------
    generation, num_nodes, num_parts, num_edges
        From the attributes; ``num_nodes`` is also the next free node id.
    attrs
        Every group attribute (``config``, ``kernel``, ``shards``, ``checksum``, ...).
    arrays
        Layout name (``"vertices/degree"``, ...) -> numpy array.
    path
        Where it was read from.
    """

    generation: int
    num_nodes: int
    num_parts: int
    num_edges: int
    attrs: dict[str, Any]
    arrays: dict[str, np.ndarray] = field(repr=False)
    path: str = ""

    def __getitem__(self, name: str) -> np.ndarray:
        return self.arrays[name]

    def get(self, name: str) -> np.ndarray | None:
        return self.arrays.get(name)

    @property
    def checksum(self) -> str:
        return str(self.attrs.get("checksum"))

    @property
    def shards(self) -> list[dict[str, Any]]:
        return list(self.attrs.get("shards", []))


def _codec() -> BloscCodec:
    return BloscCodec(cname="lz4", clevel=5, shuffle="shuffle")


def _chunks(shape: tuple[int, ...], itemsize: int) -> tuple[int, ...]:
    row = itemsize * int(np.prod(shape[1:], dtype=np.int64)) if len(shape) > 1 else itemsize
    rows = max(1, CHUNK_BYTES // max(1, row))
    return (max(1, min(rows, shape[0])),) + tuple(max(1, s) for s in shape[1:])


def _check_arrays(arrays: dict[str, np.ndarray], num_nodes: int, num_parts: int) -> None:
    layout = {**REQUIRED_STATE_ARRAYS, **OPTIONAL_STATE_ARRAYS}
    missing = sorted(set(REQUIRED_STATE_ARRAYS) - set(arrays))
    unknown = sorted(set(arrays) - set(layout))
    if missing or unknown:
        raise StoreError(
            format_problem(
                "state arrays", f"the layout's arrays (required: {sorted(REQUIRED_STATE_ARRAYS)})",
                f"missing {missing}, unknown {unknown}",
            )
        )
    for name, data in arrays.items():
        dtype, ndim = layout[name]
        if data.dtype != dtype or data.ndim != ndim:
            raise StoreError(
                format_problem(f"state array {name}", f"{dtype.name} with {ndim} dimension(s)",
                               f"{data.dtype.name} with shape {data.shape}")
            )
        if name.startswith(_PER_NODE) and len(data) != num_nodes:
            raise StoreError(
                format_problem(f"state array {name}", f"{num_nodes:,} rows (one per node)", f"{len(data):,}")
            )
    if len(arrays["partitions/loads"]) != num_parts:
        raise StoreError(
            format_problem("state array partitions/loads", f"{num_parts} entries", str(len(arrays["partitions/loads"])))
        )


def write_state(
    path: str | Path,
    arrays: dict[str, np.ndarray],
    attrs: dict[str, Any],
) -> str:
    """Write a complete ``state.zarr`` at the local ``path``; return its checksum.

    The store is written under a temporary name beside ``path`` and renamed into
    place, so ``path`` holds a finished state or nothing. ``attrs`` must hold
    ``generation``, ``num_nodes``, ``num_parts`` and ``num_edges``; ``format``,
    ``format_version``, ``array_checksums`` and ``checksum`` are added here.

    Raises
    ------
    StoreError
        An array that does not fit the layout.
    """
    path = Path(path)
    for key in ("generation", "num_nodes", "num_parts", "num_edges"):
        if key not in attrs:
            raise StoreError(format_problem("state attrs", f"a '{key}' attribute", f"keys {sorted(attrs)}"))
    num_nodes, num_parts = int(attrs["num_nodes"]), int(attrs["num_parts"])
    arrays = {name: np.ascontiguousarray(a) for name, a in arrays.items()}
    _check_arrays(arrays, num_nodes, num_parts)
    tmp = path.with_name(f".{path.name}.partial")
    shutil.rmtree(tmp, ignore_errors=True)
    group = zarr.open_group(str(tmp), mode="w")
    for name in _GROUPS:
        group.create_group(name)
    digests = {}
    for name, data in sorted(arrays.items()):
        array = group.create_array(
            name, shape=data.shape, dtype=data.dtype, chunks=_chunks(data.shape, data.dtype.itemsize),
            compressors=_codec(), fill_value=0, config={"write_empty_chunks": True},
        )
        if data.size:
            array[...] = data
        digests[name] = array_digest(name, data)
    checksum = combine_digests(digests)
    group.attrs.update(
        {
            **attrs,
            "format": STATE_FORMAT,
            "format_version": STATE_VERSION,
            "replica_words": int(arrays["vertices/replicas"].shape[1]),
            "array_checksums": digests,
            "checksum": checksum,
        }
    )
    shutil.rmtree(path, ignore_errors=True)
    os.rename(tmp, path)
    return checksum


def _group_or_error(url: str, storage_options: dict | None) -> zarr.Group:
    group = open_finished_group(
        url, storage_options, what="state", fmt=STATE_FORMAT, noun="state",
        written_by="a state.zarr written by `asepr partition` or `asepr ingest`",
        fix_unreadable="rerun `asepr partition ... --overwrite` to rewrite the output and its state.",
        fix_unfinished="the state is unfinished or foreign; rerun `asepr partition --overwrite`.",
    )
    attrs = dict(group.attrs)
    if int(attrs.get("format_version", 0)) > STATE_VERSION:
        raise StoreError(
            format_problem(f"state {url}, attrs format_version", f"a version <= {STATE_VERSION}",
                           str(attrs.get("format_version")), "upgrade asepr to read this output.")
        )
    return group


def _array_names(group: zarr.Group) -> list[str]:
    names = []
    for name in (*REQUIRED_STATE_ARRAYS, *OPTIONAL_STATE_ARRAYS):
        try:
            group[name]
        except KeyError:
            continue
        names.append(name)
    return names


def state_problems(path: str | Path, *, storage_options: dict | None = None) -> list[str]:
    """Recompute every array's content digest of a state; describe each mismatch."""
    url = str(path)
    try:
        group = _group_or_error(url, storage_options)
    except StoreError as exc:
        return [str(exc)]
    attrs = dict(group.attrs)
    recorded = dict(attrs.get("array_checksums") or {})
    names = _array_names(group)
    problems = []
    missing = sorted(set(REQUIRED_STATE_ARRAYS) - set(names))
    if missing:
        problems.append(f"state {url}: arrays {missing} are missing")
    if sorted(recorded) != sorted(names):
        problems.append(f"state {url}: attrs array_checksums cover {sorted(recorded)}, the store holds {names}")
    for name in names:
        try:
            digest = zarr_array_digest(name, group[name])
        except Exception as exc:  # noqa: BLE001 - a missing or corrupt chunk is what we look for
            problems.append(f"state {url}: array {name} is unreadable ({type(exc).__name__}: {exc})")
            continue
        if name in recorded and digest != recorded[name]:
            problems.append(f"state {url}: array {name} has content sha256 {digest[:16]}…, "
                            f"attrs say {recorded[name][:16]}…")
    if recorded and combine_digests(recorded) != attrs.get("checksum"):
        problems.append(f"state {url}: attrs checksum does not combine the array checksums")
    return problems


def open_state(path: str | Path, *, verify: bool = True, storage_options: dict | None = None) -> PartitionerState:
    """Load a ``state.zarr`` directly (no manifest): the writer's resume and the tests.

    With ``verify``, every array's checksum is recomputed from the loaded bytes.

    Raises
    ------
    StoreError
        Not a finished state, or an array whose content does not match its checksum.
    """
    url = str(path)
    group = _group_or_error(url, storage_options)
    attrs = dict(group.attrs)
    recorded = dict(attrs.get("array_checksums") or {})
    arrays = {}
    for name in _array_names(group):
        try:
            data = group[name][...]
        except Exception as exc:  # a lost chunk file, a corrupt one
            raise StoreError(
                format_problem(f"state {url}, array {name}", "readable chunks",
                               f"{type(exc).__name__}: {exc}",
                               "the state is damaged; rerun `asepr partition ... --overwrite`.")
            ) from exc
        if verify and array_digest(name, data) != recorded.get(name):
            raise StoreError(
                format_problem(
                    f"state {url}, array {name}", f"content sha256 {str(recorded.get(name))[:16]}… (attrs)",
                    f"{array_digest(name, data)[:16]}…",
                    "the state is damaged; rerun `asepr partition ... --overwrite` to rebuild it.",
                )
            )
        arrays[name] = data
    missing = sorted(set(REQUIRED_STATE_ARRAYS) - set(arrays))
    if missing:
        raise StoreError(
            format_problem(f"state {url}", f"the arrays {sorted(REQUIRED_STATE_ARRAYS)}", f"{missing} missing",
                           "the state is damaged; rerun `asepr partition ... --overwrite`.")
        )
    if verify and combine_digests(recorded) != attrs.get("checksum"):
        raise StoreError(
            format_problem(f"state {url}, attrs checksum", "the combination of the array checksums",
                           str(attrs.get("checksum")), "the state is damaged; rerun `asepr partition ... --overwrite`.")
        )
    return PartitionerState(
        generation=int(attrs["generation"]), num_nodes=int(attrs["num_nodes"]),
        num_parts=int(attrs["num_parts"]), num_edges=int(attrs["num_edges"]),
        attrs=attrs, arrays=arrays, path=url,
    )


def state_entry(generation: int, checksum: str) -> dict[str, Any]:
    """The manifest's ``"state"`` entry for a state of ``generation``."""
    return {"path": STATE_NAME, "generation": int(generation), "checksum": checksum}


def state_identity(url: str | Path, storage_options: dict | None = None) -> tuple[int, str] | None:
    """``(generation, checksum)`` of a finished state at ``url``; None when there is none."""
    try:
        attrs = open_group_readonly(str(url), storage_options).attrs
        if attrs.get("format") != STATE_FORMAT:
            return None
        return int(attrs["generation"]), str(attrs.get("checksum"))
    except Exception:  # noqa: BLE001 - an unreadable state is simply not this one
        return None


def resolve_state_url(
    out: str | Path, manifest: dict[str, Any], *, storage_options: dict | None = None
) -> str:
    """Where the manifest's state is: ``OUT/state.zarr`` or, mid-swap, the staging ``old/``.

    Raises
    ------
    StoreError
        The manifest records no state, or no state of its generation and checksum exists.
    """
    fs, base = resolve(out, storage_options)
    entry = manifest.get("state")
    if not entry:
        raise StoreError(
            format_problem(
                f"output {url_of(fs, base)}",
                f"a manifest that records a partitioner state ({STATE_NAME})",
                f"generation {manifest.get('generation')} without one (written by an older asepr)",
                "rerun `asepr partition INPUT OUT -k K --overwrite` once; later generations keep the state.",
            )
        )
    want = (int(entry["generation"]), str(entry.get("checksum")))
    found = []
    manifest_url = url_of(fs, join(base, MANIFEST_NAME))
    committed = confined_join(fs, base, entry.get("path", STATE_NAME),
                              what=f"manifest {manifest_url} (state path)")
    for cand in (committed, join(base, STAGING_NAME, OLD_DIR, STATE_NAME)):
        url = url_of(fs, cand)
        ident = state_identity(url, storage_options)
        if ident == want:
            return url
        found.append(f"{url}: " + ("missing or unfinished" if ident is None else f"generation {ident[0]}"
                                   + (" with another checksum" if ident[0] == want[0] else "")))
    raise StoreError(
        format_problem(
            f"state of output {url_of(fs, base)}",
            f"a {STATE_NAME} of generation {want[0]} with checksum {want[1][:23]}… (as the manifest says)",
            "; ".join(found),
            "run the interrupted command again to complete its commit, or rerun "
            "`asepr partition ... --overwrite`.",
        )
    )


def read_state(
    out: str | Path,
    manifest: dict[str, Any] | None = None,
    *,
    storage_options: dict | None = None,
) -> PartitionerState:
    """Load the state of the output ``out`` that its manifest names, checksums verified.

    Parameters
    ----------
    out
        The output directory.
    manifest
        The manifest already read (default: read it).

    Raises
    ------
    StoreError
        No state, a state of another generation or checksum than the manifest's, a
        damaged array, or a state whose node count disagrees with the manifest.
    """
    manifest = manifest if manifest is not None else read_manifest(out, storage_options=storage_options)
    url = resolve_state_url(out, manifest, storage_options=storage_options)
    state = open_state(url, storage_options=storage_options)
    if state.num_nodes != int(manifest.get("num_nodes", state.num_nodes)) or state.num_parts != int(
        manifest["num_parts"]
    ):
        raise StoreError(
            format_problem(
                f"state {url}",
                f"{manifest.get('num_nodes')} nodes and {manifest['num_parts']} partitions (the manifest's)",
                f"{state.num_nodes} nodes and {state.num_parts} partitions",
                "the output is inconsistent; rerun `asepr partition ... --overwrite`.",
            )
        )
    return state


def read_state_attrs(
    out: str | Path, manifest: dict[str, Any], *, storage_options: dict | None = None
) -> dict[str, Any]:
    """The attributes (not the arrays) of the manifest's state: cheap, for bookkeeping.

    Raises
    ------
    StoreError
        As :func:`resolve_state_url`.
    """
    url = resolve_state_url(out, manifest, storage_options=storage_options)
    return dict(_group_or_error(url, storage_options).attrs)


def ingested_fingerprints(manifest: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """sha256 -> ``{"generation", "kind", "url", "rows"}`` of every shard a manifest lists.

    The first partitioning's input (``manifest["input"]``) counts as generation 1 of
    its output (or the manifest's generation when it records no ``increments``); every
    later increment records its own generation.
    """
    seen: dict[str, dict[str, Any]] = {}
    base_generation = int(manifest.get("input_generation", manifest.get("generation", 1)))
    inp = manifest.get("input", {})
    for kind in ("edges", "nodes"):
        for s in inp.get(kind, []):
            seen.setdefault(s["sha256"], {"generation": base_generation, "kind": kind,
                                          "url": s["url"], "rows": s.get("rows")})
    for inc in manifest.get("increments", []):
        for kind in ("edges", "nodes"):
            for s in inc.get(kind, []):
                seen.setdefault(s["sha256"], {"generation": int(inc["generation"]), "kind": kind,
                                              "url": s["url"], "rows": s.get("rows")})
    return seen
