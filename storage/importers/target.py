"""Where an importer writes, and the one path by which every importer writes there.

Every importer takes the same four options besides its source and output: the rows per
shard, the seed of a drawn split, whether an existing output may be replaced, and the
fsspec options of both paths. :class:`ImportTarget` holds them, checks the output before
any work (an existing ``OUT`` without ``overwrite`` is refused at once, not after reading
a large source), resolves the source, and opens the one
:class:`~asepr.storage.inputs.writer.InputWriter` that writes the input. Importers that hold a
whole graph in memory (the npz and MUSAE formats) write it with :func:`write_in_memory`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypedDict

import fsspec
import numpy as np

import asepr.storage.importers._common as _common
from asepr.storage.errors import InputError, format_problem
from asepr.storage.inputs.writer import InputWriter
from asepr.storage.progress import expect

__all__ = ["CommonOptions", "ImportTarget", "write_in_memory"]


class CommonOptions(TypedDict, total=False):
    """The options every importer takes (see :class:`ImportTarget`)."""

    shard_rows: int
    seed: int
    overwrite: bool
    storage_options: dict | None


@dataclass(frozen=True)
class ImportTarget:
    """An importer's output and the options every importer shares.

    Attributes
    ----------
    out
        The input directory to write; it must not exist unless ``overwrite``.
    shard_rows
        Rows per Parquet shard (edges; node shards follow the writer's rule).
    seed
        Seed of a drawn split (formats that publish a split ignore it).
    overwrite
        Replace an existing ``out`` (only once the import succeeded).
    storage_options
        fsspec options for the source and ``out``.
    """

    out: str | Path
    shard_rows: int = 1_000_000
    seed: int = 0
    overwrite: bool = False
    storage_options: dict | None = None

    @classmethod
    def of(cls, out: str | Path, common: dict[str, Any]) -> ImportTarget:
        """The target of ``out`` and an importer's ``**common`` keywords; an unknown keyword
        is a TypeError, as for any Python call."""
        unknown = sorted(set(common) - set(CommonOptions.__annotations__))
        if unknown:
            raise TypeError(f"unexpected keyword argument(s) {', '.join(map(repr, unknown))}")
        target = cls(out, **common)
        if isinstance(target.seed, bool) or not isinstance(target.seed, int):
            raise InputError(format_problem("option seed", "an integer", repr(target.seed)))
        rows = target.shard_rows
        if isinstance(rows, bool) or not isinstance(rows, int) or rows < 1:
            raise InputError(format_problem("option shard_rows", "a positive row count", repr(rows)))
        _common.check_out(out, target.storage_options, target.overwrite)
        return target

    def source(self, src: str | Path, what: str) -> tuple[fsspec.AbstractFileSystem, str, str]:
        """``(fs, path, url)`` of the existing source ``src``, described as ``what`` in errors."""
        return _common.resolve_src(src, self.storage_options, what)

    def writer(self, feat_dim: int, **columns: Any) -> InputWriter:
        """The writer of this target (``columns``: the writer's extra edge or node columns)."""
        return InputWriter(self.out, feat_dim=feat_dim, shard_rows=self.shard_rows, overwrite=self.overwrite,
                           storage_options=self.storage_options, **columns)


def write_in_memory(target: ImportTarget, feat_dim: int, src_nid: np.ndarray, dst_nid: np.ndarray,
                    write_nodes: Callable[[InputWriter], None], meta: dict[str, Any]) -> dict[str, Any]:
    """Write a graph held in memory: its edges, then ``write_nodes(writer)`` (node rows and
    any side file), then commit ``meta``. Returns the committed ``meta.json``."""
    expect(len(src_nid))  # the import's progress counts the rows written (the nodes' writers add theirs)
    with target.writer(feat_dim) as writer:
        writer.write_edges(src_nid, dst_nid)
        write_nodes(writer)
        return writer.commit(meta)
