"""Confinement: a path read from a file inside an output must stay inside that output.

Manifests, commit journals, ``run.json`` and state references name files by paths
relative to the output directory. A crafted or damaged file could name
``../victim`` or a symlink pointing elsewhere, and a commit would then move, read or
delete something outside the output. :func:`confined_path` is the one check every
reader of such a path goes through: it resolves symlinks, then requires the result to
lie strictly inside the (resolved) root. :func:`confined_join` does the same for a
directory given as an fsspec filesystem and path (a lexical check off the local disk,
where there are no symlinks to resolve).
"""

from __future__ import annotations

import posixpath
from pathlib import Path

import fsspec

from asepr.storage.errors import StoreError, format_problem
from asepr.storage.locations.fs import join

__all__ = ["confined_join", "confined_path"]


def confined_path(root: str | Path, relative: object, *, what: str) -> Path:
    """Resolve ``root / relative`` and require it to lie inside ``root``.

    Parameters
    ----------
    root
        The directory the path must stay in (an output directory, a staging directory).
    relative
        The path as read from the file: a non-empty string, normally relative.
    what
        The file and field it came from, for the message, e.g.
        ``"OUT/.asepr-staging/commit.json (retire)"``.

    Returns
    -------
    Path
        The resolved absolute path (symlinks followed), inside the resolved ``root``.

    Raises
    ------
    StoreError
        ``relative`` is not a non-empty string, or it resolves to ``root`` itself or to
        a path outside it (``..`` components, an absolute path elsewhere, a symlink
        pointing out). The message names ``what`` and the offending entry.
    """
    base = Path(root).resolve()
    fix = (f"the file was damaged or crafted: remove it (or restore it from a trusted copy); "
           f"asepr never reads, writes or deletes outside {base}.")
    if not isinstance(relative, str) or not relative or "\x00" in relative:
        raise StoreError(format_problem(what, f"a path relative to {base}", f"{relative!r}", fix))
    target = (base / relative).resolve()
    if target == base or base not in target.parents:
        raise StoreError(
            format_problem(what, f"a path inside {base}",
                           f"the entry {relative!r}, which resolves to {target}", fix)
        )
    return target


def confined_join(fs: fsspec.AbstractFileSystem, base: str, relative: object, *, what: str) -> str:
    """``base/relative`` on ``fs``, after checking that it stays inside ``base``.

    On a local filesystem this is :func:`confined_path` (symlinks resolved); elsewhere
    ``relative`` must be a relative path that does not climb out of ``base`` (no
    leading ``/``, no ``..`` above it). The lexical join is returned, not the resolved
    path, so URLs and messages keep the form the caller gave.

    Parameters
    ----------
    fs, base
        The directory (as from :func:`asepr.storage.locations.fs.resolve`).
    relative
        The path as read from a file inside ``base``.
    what
        The file and field it came from, for the message.

    Raises
    ------
    StoreError
        As :func:`confined_path`.
    """
    protocol = fs.protocol if isinstance(fs.protocol, str) else fs.protocol[0]
    if protocol in ("file", "local"):
        confined_path(base, relative, what=what)
    else:
        normal = posixpath.normpath(relative) if isinstance(relative, str) and relative else ""
        # A URL (``s3://another-bucket/...``) names another store or bucket, not a path below ``base``.
        if not normal or normal == "." or normal.startswith(("/", "../")) or normal == ".." or "\x00" in normal \
                or "://" in relative or ":" in normal.split("/", 1)[0]:
            raise StoreError(
                format_problem(what, f"a path inside {base}", f"the entry {relative!r}",
                               "the file was damaged or crafted: remove it (or restore it from a trusted copy).")
            )
    return join(base, relative)
