"""The output directory of ``asepr partition``: created, checked, locked, emptied again.

An output directory holds only what asepr writes (manifest, stores, node map, state,
staging, lock, decoded copies); a directory holding anything else is refused rather
than mixed with a partition output.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

from asepr.pipeline.store.commit import disk_errors, local_output
from asepr.storage.commit.lock import OutputLock
from asepr.storage.errors import StoreError, format_problem
from asepr.storage.inputs.decoded import DECODED_PREFIX
from asepr.storage.partitions.manifest import LOCK_NAME, MANIFEST_NAME, NODE_MAP_NAME, STAGING_NAME
from asepr.storage.partitions.state import STATE_NAME

__all__ = ["decoded_copy", "prepare_output_dir", "remove_if_empty", "writable_output"]


def _owned_name(name: str) -> bool:
    return (
        name in (MANIFEST_NAME, NODE_MAP_NAME, STAGING_NAME, STATE_NAME)
        or name.startswith((LOCK_NAME, f".{MANIFEST_NAME}.", f"{MANIFEST_NAME}.partial-", DECODED_PREFIX))
        or (name.startswith("part-") and name.endswith(".zarr"))
    )


def prepare_output_dir(out: Path) -> bool:
    """Create ``out`` if needed; return whether it was created.

    Raises
    ------
    StoreError
        ``out`` is a file, cannot be created, is not writable, or holds files that no
        asepr output has (it is refused rather than mixed with a partition output).
    """
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


def remove_if_empty(out: Path) -> None:
    """Remove the directory ``out`` if it is empty (a run that created it and failed)."""
    with contextlib.suppress(OSError):
        out.rmdir()


@contextlib.contextmanager
def writable_output(out: str | Path, storage_options: dict | None) -> Iterator[Path]:
    """The local output directory, created if needed, locked, with disk errors explained.

    A directory this run created is removed again when the run leaves it empty.
    """
    out_path = local_output(out, storage_options)
    created = prepare_output_dir(out_path)
    try:
        with OutputLock(out_path), disk_errors(out_path):
            yield out_path
    finally:
        if created:
            remove_if_empty(out_path)


@contextlib.contextmanager
def decoded_copy(out: Path) -> Iterator[Path]:
    """A new directory in the (locked) output for the validator's decoded edge copy
    (:mod:`asepr.storage.inputs.decoded`), removed on the way out, as are those of killed runs."""
    for stale in out.glob(f"{DECODED_PREFIX}*"):
        if stale.is_dir() and not stale.is_symlink():
            shutil.rmtree(stale, ignore_errors=True)
    path = Path(tempfile.mkdtemp(prefix=DECODED_PREFIX, dir=out))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)
