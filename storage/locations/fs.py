"""Filesystem access through fsspec: one normaliser and shard discovery.

Every path a user gives (a local path, ``file://``, ``memory://`` or any fsspec URL)
goes through :func:`resolve` once, which returns ``(fs, path)``. Code after that works
on the pair and never parses URLs again.
"""

from __future__ import annotations

import errno
import hashlib
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import fsspec
from fsspec.core import url_to_fs

from asepr.storage.errors import InputError, InputNotFoundError, format_problem

__all__ = ["copy_file", "copy_side_files", "Shard", "resolve", "join", "discover_shards", "fingerprint", "url_of"]

_GLOB_CHARS = re.compile(r"[*?\[]")


@dataclass(frozen=True)
class Shard:
    """One input file, addressed through its filesystem.

    Attributes
    ----------
    fs
        The fsspec filesystem holding the file.
    path
        The path inside ``fs`` (no protocol).
    url
        The path as the user would write it, for messages.
    size
        The file size in bytes.
    decoded
        An edge shard's decoded copy, ``(src path, dst path, id dtype name)`` of raw id
        files (:mod:`asepr.storage.inputs.decoded`), which the edge stream reads instead of the
        Parquet file; None (default) without one.
    """

    fs: Any
    path: str
    url: str
    size: int
    decoded: tuple[str, str, str] | None = field(default=None, compare=False)

    def open(self, mode: str = "rb"):
        return self.fs.open(self.path, mode)


def resolve(
    url: str | Path, storage_options: dict | None = None
) -> tuple[fsspec.AbstractFileSystem, str]:
    """Normalise a path or fsspec URL into ``(fs, path)``."""
    fs, path = url_to_fs(str(url), **(storage_options or {}))
    return fs, path


def join(path: str, *parts: str) -> str:
    """Join path parts with ``/``, the separator every fsspec filesystem uses."""
    out = path.rstrip("/")
    for part in parts:
        out = f"{out}/{part.strip('/')}"
    return out


def url_of(fs: fsspec.AbstractFileSystem, path: str) -> str:
    """The user-facing spelling of ``path`` on ``fs`` (plain for local files)."""
    protocol = fs.protocol if isinstance(fs.protocol, str) else fs.protocol[0]
    if protocol in ("file", "local"):
        return path
    return fs.unstrip_protocol(path)


def _natural_key(path: str) -> list:
    return [int(tok) if tok.isdigit() else tok for tok in re.split(r"(\d+)", path)]


def discover_shards(
    url: str | Path,
    *,
    suffix: str = ".parquet",
    what: str = "input",
    storage_options: dict | None = None,
) -> list[Shard]:
    """List the shards a directory, glob or single file stands for.

    Parameters
    ----------
    url
        A directory (every ``*suffix`` file below it, recursively), a glob, or one file.
    suffix
        The file suffix that marks a shard when ``url`` is a directory.
    what
        How to name the input in messages (``"edge shards"``, ...).
    storage_options
        Passed to fsspec.

    Returns
    -------
    list of Shard
        In natural sort order (``part-2`` before ``part-10``), so that stream order is
        reproducible.

    Raises
    ------
    InputNotFoundError
        The path does not exist, the glob matches nothing, or the directory holds no
        ``*suffix`` file.
    InputError
        An entry cannot be listed or read (a symbolic link loop, a broken link, no
        permission); the message names it.
    """
    fs, path = resolve(url, storage_options)
    try:
        paths = _list_shard_paths(fs, path, url, suffix, what)
        infos = [fs.info(p) for p in paths]
    except InputError:
        raise
    except OSError as exc:
        raise _listing_problem(url, what, exc) from exc
    return [
        Shard(fs=fs, path=p, url=url_of(fs, p), size=int(info.get("size") or 0))
        for p, info in zip(paths, infos)
    ]


def _list_shard_paths(fs, path: str, url: str | Path, suffix: str, what: str) -> list[str]:
    """The shard paths of a glob, directory or file, in natural order."""
    if _GLOB_CHARS.search(path):
        paths = [p for p in fs.glob(path) if fs.isfile(p)]
        if not paths:
            raise InputNotFoundError(
                format_problem(
                    f"{what} glob {url}",
                    "at least one matching file",
                    "no match",
                    "check the pattern and that the files exist.",
                )
            )
    elif not fs.exists(path):
        raise InputNotFoundError(
            format_problem(
                f"{what} path {url}",
                "an existing directory, glob or file",
                "nothing at that path",
                "check the spelling, or run `asepr import` to create the input.",
            )
        )
    elif fs.isdir(path):
        root = path.rstrip("/") + "/"
        # Skip hidden and underscore files *and directories* (_temporary/, .staging/,
        # _SUCCESS): other writers keep partial files there.
        paths = [
            p
            for p in fs.find(path)
            if p.endswith(suffix)
            and not any(part.startswith((".", "_")) for part in p[len(root):].split("/"))
        ]
        if not paths:
            raise InputNotFoundError(
                format_problem(
                    f"{what} directory {url}",
                    f"at least one *{suffix} file",
                    "an empty directory" if not fs.ls(path) else f"no *{suffix} file",
                    f"put the {what} there as Parquet files, or point at another directory.",
                )
            )
    else:
        paths = [path]
    return sorted(set(paths), key=_natural_key)


def _listing_problem(url: str | Path, what: str, exc: OSError) -> InputError:
    """An OS error met while listing shards (a link loop, a broken link, no permission)."""
    entry = f", entry {exc.filename}" if exc.filename else ""
    if exc.errno == errno.ELOOP:
        found, fix = "a symbolic link loop", "remove the link or point it at a real file."
    elif exc.errno == errno.ENOENT:
        found, fix = "a broken symbolic link or a vanished file", "remove the link or point it at a real file."
    else:
        found, fix = "an entry that cannot be read", "fix its permissions, or remove it."
    return InputError(
        format_problem(
            f"{what} {url}{entry}",
            "readable Parquet files and directories",
            f"{found} ({exc.strerror or exc})",
            fix,
        )
    )


def fingerprint(shard: Shard, chunk_bytes: int = 8 << 20) -> str:
    """Content hash (sha256, hex) of a shard, read in bounded chunks."""
    digest = hashlib.sha256()
    try:
        with shard.open("rb") as fh:
            while True:
                block = fh.read(chunk_bytes)
                if not block:
                    break
                digest.update(block)
    except OSError as exc:
        raise InputError(
            format_problem(
                f"file {shard.url}",
                "a readable file",
                f"a read error ({exc})",
                "check permissions and that the file is not being written.",
            )
        ) from exc
    return digest.hexdigest()


def copy_file(shard: Shard, fs_out, path_out: str, chunk_bytes: int = 8 << 20) -> None:
    """Copy a shard to ``path_out`` on ``fs_out`` in bounded chunks."""
    with shard.open("rb") as src, fs_out.open(path_out, "wb") as dst:
        while True:
            block = src.read(chunk_bytes)
            if not block:
                break
            dst.write(block)


def copy_side_files(fs_in, dir_in: str, fs_out, dir_out: str, skip: tuple[str, ...] = ()) -> list[str]:
    """Copy the plain files directly inside ``dir_in`` (``id_map.parquet``, ...) to ``dir_out``.

    Hidden files and the names in ``skip`` stay behind; subdirectories are not copied.
    """
    copied = []
    for entry in fs_in.ls(dir_in, detail=True):
        base = entry["name"].rstrip("/").rpartition("/")[2]
        if entry["type"] != "file" or base.startswith(".") or base in skip:
            continue
        side = Shard(fs=fs_in, path=entry["name"], url=base, size=int(entry.get("size") or 0))
        copy_file(side, fs_out, join(dir_out, base))
        copied.append(base)
    return copied
