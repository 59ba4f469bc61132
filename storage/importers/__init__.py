"""Dataset importers: published graph formats into the asepr input format.

Every importer writes through :class:`asepr.storage.inputs.writer.InputWriter`, so the output
appears at OUT only when the import (and its validation) succeeded::

    OUT/
      edges/part-*.parquet    src, dst int64 [, weight float32, ts int64]
      nodes/part-*.parquet    id 0..N-1 in order, feat fixed_size_list<float32>[d],
                              label int64 (-1 unknown), split int8 (-1/0/1/2)
      meta.json               name, undirected, num_classes, source, split, counts, ...
      label_map.json          when string / bool labels were mapped to class ids
      id_map.parquet          edgelist only, when ids were remapped to 0..N-1

Formats (:data:`FORMATS`):

``gnn-npz``     gnn-benchmark npz (Cora, Amazon, Coauthor): symmetrised, stratified split
``hetero-npz``  heterophilous-graphs npz (Tolokers, Squirrel): published split ``split_index``
``musae``       MUSAE csv + json directory (Facebook, Twitch): symmetrised, stratified split
``edgelist``    csv / tsv / blank-separated edge lists, streamed, optional node table
``ogb``         an Open Graph Benchmark dataset folder (ogbn-*, ogbl-*), streamed, published split
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from pathlib import Path
from typing import Any

from asepr.storage.errors import InputError, format_problem
from asepr.storage.importers.edgelist import import_edgelist
from asepr.storage.importers.gnn_npz import import_gnn_npz
from asepr.storage.importers.hetero_npz import import_hetero_npz
from asepr.storage.importers.musae import import_musae
from asepr.storage.importers.ogb import import_ogb
from asepr.storage.importers.target import CommonOptions

__all__ = [
    "FORMATS",
    "format_options",
    "import_dataset",
    "import_edgelist",
    "import_gnn_npz",
    "import_hetero_npz",
    "import_musae",
    "import_ogb",
]

FORMATS: dict[str, Callable[..., dict[str, Any]]] = {
    "gnn-npz": import_gnn_npz,
    "hetero-npz": import_hetero_npz,
    "musae": import_musae,
    "edgelist": import_edgelist,
    "ogb": import_ogb,
}

def _quoted(names) -> str:
    return ", ".join(f'"{n}"' for n in names)


def format_options(fmt: str) -> tuple[str, ...]:
    """The format-specific option names ``fmt`` accepts (besides the common ones,
    :class:`~asepr.storage.importers.target.CommonOptions`)."""
    params = inspect.signature(FORMATS[fmt]).parameters
    return tuple(name for name, p in params.items() if p.kind is p.KEYWORD_ONLY)


def import_dataset(fmt: str, src: str | Path, out: str | Path, **options: Any) -> dict[str, Any]:
    """Import ``src`` in format ``fmt`` into the input directory ``out``.

    Parameters
    ----------
    fmt
        One of :data:`FORMATS`.
    src
        The source file or directory (path or fsspec URL).
    out
        The input directory to write; must not exist unless ``overwrite``.
    **options
        The options every format takes (:class:`~asepr.storage.importers.target.ImportTarget`:
        ``shard_rows``, ``seed``, ``overwrite``, ``storage_options``) and the format's own
        (see :func:`format_options`), e.g. ``split_index`` for ``hetero-npz``,
        ``label_column`` for ``musae``, ``header`` or ``node_table`` for ``edgelist``.

    Returns
    -------
    dict
        The ``meta.json`` that was committed.

    Raises
    ------
    InputError
        Unknown format or option, or bad input (InputNotFoundError when ``src`` is
        missing); SchemaError for a file of the wrong layout; StoreError when ``out``
        exists.
    """
    if fmt not in FORMATS:
        raise InputError(f'Unsupported format "{fmt}". Valid choices are {_quoted(FORMATS)}.')
    valid = format_options(fmt) + tuple(CommonOptions.__annotations__)
    unknown = sorted(set(options) - set(valid))
    if unknown:
        raise InputError(
            format_problem(
                f'options for format "{fmt}"',
                f"only {_quoted(valid)}",
                _quoted(unknown),
                "drop the options this format does not use.",
            )
        )
    return FORMATS[fmt](src, out, **options)
