"""Where an output's trees live: a local directory or a prefix of an object store.

A partition store, the node map and the state are written by the same code whether
the output is a local directory or an fsspec URL (``s3://``, ``gs://``, ``memory://``):
the functions here take the URL (or path) and the ``storage_options`` and do the one
thing that differs, going through :class:`zarr.storage.FsspecStore` for a remote Zarr
group and through the filesystem's own calls otherwise.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import zarr
from zarr.storage import FsspecStore

from asepr.storage.locations.fs import resolve
from asepr.storage.partitions.chunk_stores import local_store

__all__ = ["create_group", "is_local", "is_local_url", "open_group_rw", "remove_tree", "tree_bytes",
           "tree_exists"]


def is_local(fs) -> bool:
    """Whether ``fs`` is the local filesystem."""
    protocol = fs.protocol if isinstance(fs.protocol, str) else fs.protocol[0]
    return protocol in ("file", "local")


def is_local_url(url: str | Path, storage_options: dict | None = None) -> bool:
    """Whether ``url`` (a path or fsspec URL) is on the local filesystem."""
    return is_local(resolve(url, storage_options)[0])


def open_group_rw(url: str | Path, storage_options: dict | None = None, *, mode: str = "r+") -> zarr.Group:
    """Open (``"r+"``) or create afresh (``"w"``) the Zarr group at ``url`` for writing."""
    fs, path = resolve(url, storage_options)
    if is_local(fs):  # chunk files past the page cache where the filesystem allows
        return zarr.open_group(store=local_store(path), mode=mode)
    store = FsspecStore.from_url(str(url), storage_options=storage_options, read_only=False)
    return zarr.open_group(store=store, mode=mode)


def create_group(url: str | Path, storage_options: dict | None = None) -> zarr.Group:
    """An empty partition store (``nodes/`` and ``edges/`` groups) at ``url``."""
    group = open_group_rw(url, storage_options, mode="w")
    group.create_group("nodes")
    group.create_group("edges")
    return group


def remove_tree(url: str | Path, storage_options: dict | None = None) -> None:
    """Delete the file or tree at ``url`` if there is one."""
    fs, path = resolve(url, storage_options)
    if is_local(fs):
        if os.path.isdir(path) and not os.path.islink(path):
            shutil.rmtree(path, ignore_errors=True)
        elif os.path.lexists(path):
            os.unlink(path)
        return
    try:
        fs.rm(path, recursive=True)
    except FileNotFoundError:
        pass


def tree_exists(url: str | Path, storage_options: dict | None = None) -> bool:
    """Whether anything is at ``url``."""
    fs, path = resolve(url, storage_options)
    return bool(fs.exists(path))


def tree_bytes(url: str | Path, storage_options: dict | None = None) -> int:
    """Bytes of the files below ``url``."""
    fs, path = resolve(url, storage_options)
    if is_local(fs):
        total = 0
        for root, _, files in os.walk(path):
            for f in files:
                try:
                    total += os.path.getsize(os.path.join(root, f))
                except OSError:
                    pass
        return total
    try:
        return int(fs.du(path, total=True))
    except FileNotFoundError:
        return 0
