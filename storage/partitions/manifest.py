"""``manifest.json``: what a partition output holds, written last and atomically.

An output directory is trusted only through its manifest: a reader opens the stores
the manifest lists and nothing else, and a store whose ``generation`` attribute
differs from the manifest's is not part of that generation. The manifest is replaced
in one rename locally, in one PUT on an object store (:func:`write_manifest`), so a
reader sees the previous generation or the next one, never a mix. On an object store
its paths name the generation's prefix (``gen-00003-1f2e3d4c/part-00000.zarr``,
:mod:`asepr.pipeline.store.generations`).

Document shape (``format_version`` 1)::

    {
      "format": "asepr-partitions",
      "format_version": 1,
      "generation": 3,                  # 1 for the first run, +1 per committed run
      "created": "2026-01-31T12:00:00+00:00",
      "num_parts": 4, "num_nodes": 2708, "num_edges": 5278, "feat_dim": 1433,
      "undirected": true, "halo": 0,
      "algorithm": "asep",
      "config": {...},                  # PartitionConfig.to_dict() as it ran
      "input": {"url": "...", "edges": [{"url", "rows", "sha256"}], "nodes": [...]},
      "metrics": {...}, "timings": {...},
      "node_map": {"path": "node_map.parquet", "sha256": "..."},
      "partitions": [{"part_id": 0, "path": "part-00000.zarr", "generation": 3,
                      "checksum": "sha256:...", "counts": {...}, "bytes": 123}, ...],
      "run_key": "..."                  # hash of format, config and input fingerprints
    }

Names of the other bookkeeping entries of an output directory (the lock file, the
staging directory of a run in progress) live here too, so that readers and the
writer agree on them.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from asepr.storage.commit.atomic import dumps_json, write_bytes_atomic
from asepr.storage.errors import StoreError, format_problem
from asepr.storage.locations.fs import join, resolve, url_of
from asepr.storage.locations.remote import remote_error_problem, remote_errors_as_problems

__all__ = [
    "JOURNAL_NAME",
    "LOCK_NAME",
    "MANIFEST_FORMAT",
    "MANIFEST_NAME",
    "MANIFEST_VERSION",
    "NODE_MAP_NAME",
    "OLD_DIR",
    "STAGING_NAME",
    "part_name",
    "read_manifest",
    "write_manifest",
]

MANIFEST_NAME = "manifest.json"
MANIFEST_FORMAT = "asepr-partitions"
MANIFEST_VERSION = 1
NODE_MAP_NAME = "node_map.parquet"
#: The lock file of the (single) writer.
LOCK_NAME = ".asepr.lock"
#: Everything a run in progress writes lives below this hidden directory.
STAGING_NAME = ".asepr-staging"
#: During a commit, the previous generation's stores wait here until the new manifest lands.
OLD_DIR = "old"
#: The commit journal: the manifest about to be written, present only while swapping.
JOURNAL_NAME = "commit.json"

_REQUIRED = ("format", "format_version", "generation", "num_parts", "partitions")
#: The most partitions an output can have (``PartitionConfig`` allows no more).
MAX_PARTS = 32767
#: The largest manifest read: one of the most partitions and many thousands of input
#: shards takes a few MiB, and a crafted one must not exhaust memory.
MAX_MANIFEST_BYTES = 64 << 20


def part_name(part_id: int) -> str:
    """The directory name of partition ``part_id`` (``part-00007.zarr``)."""
    return f"part-{int(part_id):05d}.zarr"


def read_manifest(
    out: str | Path, *, storage_options: dict | None = None, missing_ok: bool = False
) -> dict[str, Any] | None:
    """Read and check the manifest of the output directory ``out``.

    Parameters
    ----------
    out
        The output directory (path or fsspec URL).
    missing_ok
        Return None instead of raising when there is no manifest.

    Raises
    ------
    StoreError
        No manifest (unless ``missing_ok``), unreadable JSON, or a manifest of another
        format or a newer format version.
    """
    fs, path = resolve(out, storage_options)
    with remote_errors_as_problems(url_of(fs, path), doing="reading"):
        return _read_manifest(fs, path, missing_ok)


def _read_manifest(fs, path: str, missing_ok: bool) -> dict[str, Any] | None:
    mpath = join(path, MANIFEST_NAME)
    url = url_of(fs, mpath)
    if not fs.exists(mpath):
        if missing_ok:
            return None
        staging = fs.exists(join(path, STAGING_NAME))
        raise StoreError(
            format_problem(
                f"output {url_of(fs, path)}",
                f"a committed partition output with a {MANIFEST_NAME}",
                "no manifest" + (" (a run was interrupted before its first commit)" if staging else ""),
                "run `asepr partition INPUT OUT -k K` (it resumes an interrupted run).",
            )
        )
    try:
        with fs.open(mpath, "rb") as fh:
            raw = fh.read(MAX_MANIFEST_BYTES + 1)
    except OSError as exc:
        if remote_error_problem(exc, url) is not None:
            raise  # the store did not answer: named by the caller's wrapper, nothing is wrong with the output
        raise StoreError(format_problem(
            f"file {url}", "a readable manifest", f"a read error ({exc})",
            "check the file's permissions and the disk, then rerun the same command.")) from exc
    try:
        if len(raw) > MAX_MANIFEST_BYTES:
            raise ValueError(f"more than {MAX_MANIFEST_BYTES:,} bytes")
        manifest = json.loads(raw)
    except (ValueError, RecursionError) as exc:
        found = ("JSON nested too deeply" if isinstance(exc, RecursionError) else
                 str(exc) if len(raw) > MAX_MANIFEST_BYTES else f"unreadable content ({exc})")
        raise StoreError(
            format_problem(
                f"file {url}",
                "a JSON manifest",
                found[:300],
                "the manifest was damaged or crafted; restore it from a copy, or re-run "
                "`asepr partition ... --overwrite` to rewrite the output.",
            )
        ) from None
    if not isinstance(manifest, dict) or any(k not in manifest for k in _REQUIRED):
        found = sorted(manifest) if isinstance(manifest, dict) else type(manifest).__name__
        raise StoreError(
            format_problem(
                f"file {url}",
                f"a JSON object with the keys {list(_REQUIRED)}",
                f"{found}",
                "this is not an asepr partition manifest; point at the output of `asepr partition`.",
            )
        )
    if manifest["format"] != MANIFEST_FORMAT:
        raise StoreError(
            format_problem(
                f"file {url}, key 'format'", f'"{MANIFEST_FORMAT}"', repr(manifest["format"]),
                "point at the output directory of `asepr partition`.",
            )
        )
    _check_fields(manifest, url)
    if manifest["format_version"] > MANIFEST_VERSION:
        raise StoreError(
            format_problem(
                f"file {url}, key 'format_version'",
                f"a version <= {MANIFEST_VERSION}",
                str(manifest["format_version"]),
                "upgrade asepr to read this output.",
            )
        )
    _check_partitions(manifest, url)
    return manifest


#: The integer fields of a manifest and their least values (the optional ones may be absent).
_INTEGERS = {"format_version": 1, "generation": 1}
_OPTIONAL_INTEGERS = {"num_nodes": 0, "num_edges": 0, "feat_dim": 0, "input_generation": 0}
_FIX = "the manifest was edited or damaged; restore it from a copy, or rerun `asepr partition ... --overwrite`."


def _integer(value: object, low: int) -> bool:
    return not isinstance(value, bool) and isinstance(value, int) and value >= low


def _field_problem(url: str, key: str, expected: str, value: object) -> StoreError:
    return StoreError(format_problem(f"file {url}, key '{key}'", expected, repr(value)[:60], _FIX))


def _check_fields(manifest: dict[str, Any], url: str) -> None:
    """The types every reader relies on: counts and generations are integers, paths and
    checksums text, ``counts`` an object of integers (a crafted ``"generation": "3"``
    would otherwise fail as a ValueError deep in a reader)."""
    for key, low in _INTEGERS.items():
        if not _integer(manifest[key], low):
            raise _field_problem(url, key, f"an integer >= {low}", manifest[key])
    for key, low in _OPTIONAL_INTEGERS.items():
        if key in manifest and not _integer(manifest[key], low):
            raise _field_problem(url, key, f"an integer >= {low}", manifest[key])
    entries = manifest["partitions"] if isinstance(manifest["partitions"], list) else []
    named = [(f"partitions[{i}]", e) for i, e in enumerate(entries)]
    named += [(key, manifest[key]) for key in ("node_map", "state") if manifest.get(key) is not None]
    for where, entry in named:
        if not isinstance(entry, dict):
            raise _field_problem(url, where, "an object", entry)
        if "generation" in entry and not _integer(entry["generation"], 1):
            raise _field_problem(url, f"{where}.generation", "an integer >= 1", entry["generation"])
        for text in ("path", "checksum", "sha256"):
            # A null is left to the reader that needs the value, which names what is missing.
            if entry.get(text) is not None and not isinstance(entry[text], str):
                raise _field_problem(url, f"{where}.{text}", "text", entry[text])
        counts = entry.get("counts", {})
        if not isinstance(counts, dict) or not all(_integer(v, 0) for v in counts.values()):
            raise _field_problem(url, f"{where}.counts", "an object of integers >= 0", counts)


def _check_partitions(manifest: dict[str, Any], url: str) -> None:
    """``num_parts`` in range and one entry per partition, ``part_id`` 0, 1, .. in order.

    Checked once here so that no reader sizes an array by a crafted ``num_parts`` or
    looks up a partition the entries do not hold.
    """
    fix = "the manifest was edited or damaged; rerun `asepr partition ... --overwrite` to rewrite the output."
    k = manifest["num_parts"]
    if isinstance(k, bool) or not isinstance(k, int) or not 1 <= k <= MAX_PARTS:
        raise StoreError(format_problem(f"file {url}, key 'num_parts'", f"an integer from 1 to {MAX_PARTS}",
                                        repr(k)[:60], fix))
    entries = manifest["partitions"]
    if not isinstance(entries, list) or len(entries) != k:
        found = f"{len(entries)} entries" if isinstance(entries, list) else type(entries).__name__
        raise StoreError(format_problem(f"file {url}, key 'partitions'",
                                        f"a list of {k} entries (one per partition, as 'num_parts' says)",
                                        found, fix))
    for i, entry in enumerate(entries):
        part_id = entry.get("part_id") if isinstance(entry, dict) else None
        if isinstance(part_id, bool) or part_id != i:
            raise StoreError(format_problem(
                f"file {url}, key 'partitions[{i}].part_id'",
                f"{i} (the entries are unique and in partition order)",
                repr(part_id)[:60] if isinstance(entry, dict) else f"an entry that is no object ({type(entry).__name__})",
                fix,
            ))


def write_manifest(out: str | Path, manifest: dict[str, Any], *, storage_options: dict | None = None) -> None:
    """Replace ``out/manifest.json`` atomically (:func:`asepr.storage.commit.atomic.write_bytes_atomic`).

    Raises
    ------
    StoreError
        ``out/manifest.json`` is a symbolic link (refused, never followed).
    """
    fs, path = resolve(out, storage_options)
    write_bytes_atomic(join(path, MANIFEST_NAME), dumps_json(manifest), fs=fs)
