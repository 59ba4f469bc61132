"""The files of a run directory, on the local disk or on an object store.

:class:`asepr.training.rundir.checkpoint.RunDir` names its files relative to the run directory and
leaves how they are written to a :class:`RunFiles`:

* **Local** (a path): every file is replaced atomically by a rename
  (:func:`asepr.storage.commit.atomic.write_bytes_atomic`), and a symbolic link where a directory of
  the run is expected is refused (it would take the checkpoints elsewhere).
* **Remote** (an fsspec URL such as ``s3://bucket/runs/cora``): an object store has no
  rename, but a PUT is atomic (the object appears whole or not at all), so each file is
  one PUT (``fs.pipe``). Each round is written under a prefix of its own, and the
  pointer object (``checkpoints/latest.json``) is written last, so the round a resume
  follows is always complete. Listings are read afresh (another process, another rank,
  may have written since), and a request that failed after the client's retries is the
  project's :class:`asepr.storage.locations.remote.RemoteStoreError`, naming the object.
"""

from __future__ import annotations

import contextlib
import os
import shutil
from collections.abc import Iterator
from pathlib import Path

from asepr.storage.commit.atomic import refuse_symlink, write_bytes_atomic
from asepr.storage.commit.confine import confined_join
from asepr.storage.locations.fs import join, resolve, url_of
from asepr.storage.locations.location import is_local
from asepr.storage.locations.remote import remote_errors_as_problems

__all__ = ["RunFiles"]


class RunFiles:
    """Reads and writes below one run directory (``root``: a path or an fsspec URL)."""

    def __init__(self, root: str | Path, storage_options: dict | None = None):
        self.storage_options = dict(storage_options or {})
        self.fs, self.base = resolve(root, self.storage_options)
        self.local = is_local(self.fs)
        #: The run directory as a user names it: a Path locally, the URL otherwise.
        self.path: Path | str = Path(root) if self.local else url_of(self.fs, self.base)

    def where(self, relative: str) -> Path | str:
        """``relative`` below the run directory, as messages name it."""
        return self.path / relative if self.local else url_of(self.fs, join(self.base, relative))

    def confined(self, directory: str, relative: object, *, what: str) -> str:
        """``directory/relative``, refused unless it stays inside ``directory`` (a path read from a file)."""
        return confined_join(self.fs, join(self.base, directory), relative, what=what)[len(self.base) + 1:]

    @contextlib.contextmanager
    def _remote(self, relative: str, doing: str) -> Iterator[None]:
        with remote_errors_as_problems(str(self.where(relative)), doing=doing):
            yield

    def write(self, relative: str, data: bytes, *, refuse_links: tuple[str, ...] = ()) -> None:
        """Replace the file ``relative`` with ``data`` (atomically: a rename, or one PUT)."""
        if not self.local:
            with self._remote(relative, "writing"):
                self.fs.pipe(join(self.base, relative), data)
            return
        for directory in refuse_links:
            refuse_symlink(self.path / directory)
        target = self.path / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        write_bytes_atomic(target, data)

    def read(self, relative: str) -> bytes:
        """The content of ``relative``; FileNotFoundError when there is none."""
        if self.local:
            return (self.path / relative).read_bytes()
        with self._remote(relative, "reading"):
            self.fs.invalidate_cache(join(self.base, relative))
            return self.fs.cat_file(join(self.base, relative))

    def exists(self, relative: str) -> bool:
        if self.local:
            return (self.path / relative).exists()
        with self._remote(relative, "reading"):
            self.fs.invalidate_cache(join(self.base, relative))
            return bool(self.fs.exists(join(self.base, relative)))

    def subdirectories(self, relative: str, prefix: str) -> list[str]:
        """Names of the directories (prefixes) directly below ``relative`` that start with ``prefix``, sorted."""
        if self.local:
            d = self.path / relative
            return sorted(p.name for p in d.glob(f"{prefix}*")) if d.is_dir() else []
        with self._remote(relative, "listing"):
            path = join(self.base, relative)
            self.fs.invalidate_cache(path)
            try:
                entries = self.fs.ls(path, detail=True)
            except FileNotFoundError:
                return []
        names = [e["name"].rstrip("/").rpartition("/")[2] for e in entries if e.get("type") == "directory"]
        return sorted(n for n in names if n.startswith(prefix))

    def remove(self, relative: str, *, refuse_link: bool = False) -> None:
        """Delete the file or tree ``relative`` when there is one."""
        if self.local:
            target = self.path / relative
            if refuse_link:
                refuse_symlink(target)
            if target.is_dir() and not target.is_symlink():
                shutil.rmtree(target, ignore_errors=True)
            elif target.exists():
                os.remove(target)
            return
        with self._remote(relative, "deleting"):
            path = join(self.base, relative)
            self.fs.invalidate_cache(path)
            with contextlib.suppress(FileNotFoundError):
                self.fs.rm(path, recursive=True)
