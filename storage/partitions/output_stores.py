"""The committed stores of an output: where each manifest entry's store is, and opening it.

A trainer opens its own partition and nothing else (:func:`open_partition`); ingest and
rebalance check every store before they rewrite it (:func:`committed_store_urls`). A
path read from the manifest must stay inside the output, and the store found there must
be the one the entry names (part id, generation and checksum); the store itself is
opened and checked by :func:`asepr.storage.partitions.store.open_store`.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

from asepr.storage.commit.confine import confined_path
from asepr.storage.errors import StoreError, format_problem
from asepr.storage.integrity.store_values import VALUE_FIX, store_rules
from asepr.storage.locations.fs import join, resolve, url_of
from asepr.storage.locations.remote import remote_error_problem
from asepr.storage.partitions.manifest import MANIFEST_NAME, OLD_DIR, STAGING_NAME, read_manifest
from asepr.storage.partitions.store import NODE_ARRAYS, PartitionStore, open_group_readonly, open_store

__all__ = ["committed_store_urls", "open_entry_store", "open_partition", "resolve_store_url"]


def _store_generation(url: str, storage_options: dict | None) -> int | None:
    try:
        attrs = open_group_readonly(url, storage_options).attrs
        return int(attrs["generation"]) if "checksum" in attrs else None
    except Exception as exc:  # any unreadable store simply is not this generation,
        problem = remote_error_problem(exc, url)
        if problem is not None:  # unless the store did not answer: that is no missing store
            raise problem from exc
        return None


def _confine(fs, root: str, relative: object, what: str) -> None:
    """Refuse a path read from the manifest that leads outside ``root``.

    Local paths go through :func:`asepr.storage.commit.confine.confined_path` (symlinks followed);
    on other filesystems the path must be relative and free of ``..`` components.
    """
    protocol = fs.protocol if isinstance(fs.protocol, str) else fs.protocol[0]
    if protocol in ("file", "local"):
        confined_path(root, relative, what=what)
        return
    parts = relative.split("/") if isinstance(relative, str) else []
    if not parts or any(p in ("", ".", "..") or "\x00" in p for p in parts):
        raise StoreError(format_problem(
            what, f"a path inside {root}", f"the entry {relative!r}",
            "the manifest was damaged or crafted; restore it from a trusted copy."))


def resolve_store_url(
    out: str | Path, manifest: dict[str, Any], entry: dict[str, Any], storage_options: dict | None = None
) -> str:
    """Where the store of a manifest entry is, for the entry's generation.

    Normally ``OUT/<entry path>``. While a new generation is being swapped in (a
    commit in progress or interrupted), a store of the manifest's generation may
    wait in ``OUT/.asepr-staging/old/``; readers keep reading it from there.

    Raises
    ------
    StoreError
        The entry's path leads outside ``out`` (``..``, an absolute path, a symlink
        pointing out), or no store of the entry's generation is there.
    """
    fs, base = resolve(out, storage_options)
    # An incremental generation rewrites only the partitions it changed: each entry
    # records the generation its store was written in (the manifest's by default).
    want = int(entry.get("generation", manifest["generation"]))
    what = f"{url_of(fs, join(base, MANIFEST_NAME))}, the path of partition {entry.get('part_id')}"
    _confine(fs, base, entry.get("path"), what)
    _confine(fs, base, f"{STAGING_NAME}/{OLD_DIR}/{entry['path']}", what)
    candidates = [join(base, entry["path"]), join(base, STAGING_NAME, OLD_DIR, entry["path"])]
    found = []
    for cand in candidates:
        url = url_of(fs, cand)
        gen = _store_generation(url, storage_options)
        if gen == want:
            return url
        found.append(f"{url}: " + ("missing or unfinished" if gen is None else f"generation {gen}"))
    raise StoreError(
        format_problem(
            f"partition {entry.get('part_id')} of output {url_of(fs, base)}",
            f"a store of generation {want} (as the manifest says)",
            "; ".join(found),
            "rerun `asepr partition ... --overwrite` to rewrite the output.",
        )
    )


def open_partition(
    out: str | Path, part_id: int, *, storage_options: dict | None = None
) -> PartitionStore:
    """Open partition ``part_id`` of the output ``out``, lazily.

    Reads the manifest and that partition's store only (never another partition's
    files, nor ``node_map.parquet``).

    Parameters
    ----------
    out
        The output directory of ``asepr partition`` (path or fsspec URL).
    part_id
        ``0 <= part_id < num_parts``.

    Returns
    -------
    PartitionStore
        With :class:`CheckedArray` s that read (and check) on access; ``to_numpy()``
        loads them all.

    Raises
    ------
    StoreError
        No manifest, no such partition, or a store that does not match the manifest.
    """
    manifest = read_manifest(out, storage_options=storage_options)
    entries = {int(e["part_id"]): e for e in manifest["partitions"]}
    if int(part_id) not in entries:
        raise StoreError(
            format_problem(
                f"output {out}",
                f"a partition id in [0, {manifest['num_parts']})",
                f"part_id {part_id}",
                f"use one of the {manifest['num_parts']} partitions listed in its manifest.",
            )
        )
    store = open_entry_store(out, manifest, entries[int(part_id)], storage_options=storage_options)
    return replace(store, manifest=manifest)


def open_entry_store(out: str | Path, manifest: dict[str, Any], entry: dict[str, Any], *,
                     storage_options: dict | None = None) -> PartitionStore:
    """Open the store of one manifest entry and check that it is the one the entry names.

    The entry's path must stay inside ``out`` (:func:`resolve_store_url`), its checksum
    must be set, and the store's ``part_id`` and ``checksum`` must be the entry's. The
    arrays are :class:`CheckedArray` s.

    Raises
    ------
    StoreError
        Naming ``manifest.json`` and the entry, or the store.
    """
    part_id = int(entry["part_id"])
    url = resolve_store_url(out, manifest, entry, storage_options)
    if not isinstance(entry.get("checksum"), str):
        raise StoreError(format_problem(
            f"{join(str(out), MANIFEST_NAME)}, the entry of partition {part_id}", 'a checksum "sha256:..."',
            repr(entry.get("checksum")),
            "the manifest was damaged; rerun `asepr partition ... --overwrite`."))
    store = open_store(url, storage_options=storage_options)
    _check_layout(store, int(manifest["num_nodes"]))
    if store.part_id != part_id or store.checksum_mismatch(entry):
        raise StoreError(
            format_problem(
                f"partition store {url}",
                f"part_id {part_id} with checksum {entry.get('checksum')} (from the manifest)",
                f"part_id {store.part_id} with checksum {store.attrs.get('checksum')}",
                "the output is inconsistent; rerun `asepr partition ... --overwrite`.",
            )
        )
    return store


def _check_layout(store: PartitionStore, num_nodes: int) -> None:
    """The arrays' shapes fit one another (rows of ``nodes/*`` = n, ``indptr`` n + 1,
    ``is_halo`` m), and node ids are bounded by the output's ``num_nodes`` on every read.

    A reader sizes what it builds by these shapes: a store whose ``indptr`` has a row
    too many would otherwise fail deep in the trainer's load with a numpy error.
    """
    n, m = store.num_nodes, store.num_edges
    expected = {name: n for name in NODE_ARRAYS} | {"edges/indptr": n + 1, "edges/is_halo": m}
    for name, array in store.arrays.items():
        if name in expected and len(array) != expected[name]:
            raise StoreError(format_problem(
                f"{array.where}, array {name}", f"{expected[name]} rows (the store has {n} nodes and {m} edges)",
                f"{len(array)} rows", VALUE_FIX))
    store.arrays["nodes/global_nid"].rule = store_rules(n, m, global_nodes=num_nodes)["nodes/global_nid"]


def committed_store_urls(out: str | Path, manifest: dict[str, Any], *,
                         storage_options: dict | None = None) -> dict[int, str]:
    """``part_id -> store URL`` of every manifest entry, each checked by :func:`open_entry_store`.

    Ingest and rebalance rewrite these stores: each must lie inside ``out`` and be the
    store its entry names (part id and checksum) before a row of it is read.
    """
    return {
        int(entry["part_id"]): open_entry_store(out, manifest, entry, storage_options=storage_options).path
        for entry in manifest["partitions"]
    }
