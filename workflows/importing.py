"""`asepr import`: an importer, then (on request) the duplicate-dropping clean step."""

from __future__ import annotations

import logging
import shutil
import tempfile
from pathlib import Path
from typing import Any

from asepr.storage.importers import import_dataset
from asepr.storage.inputs.clean import clean_input

__all__ = ["run_import"]

log = logging.getLogger(__name__)


def run_import(
    fmt: str,
    src: str | Path,
    out: str | Path,
    *,
    shard_rows: int = 1_000_000,
    seed: int = 0,
    overwrite: bool = False,
    drop_duplicates: bool = False,
    options: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Import ``src`` into ``out``; ``options`` with value None are left at their defaults."""
    options = {k: v for k, v in (options or {}).items() if v is not None}
    if not drop_duplicates:
        return import_dataset(fmt, src, out, shard_rows=shard_rows, seed=seed,
                              overwrite=overwrite, **options)
    # Duplicates can only be found after a full pass, so import to a scratch copy first.
    scratch = tempfile.mkdtemp(prefix="asepr-import-")
    try:
        first = import_dataset(fmt, src, f"{scratch}/raw", shard_rows=shard_rows, seed=seed, **options)
        meta = clean_input(
            f"{scratch}/raw",
            out,
            drop_self_loops=bool(options.get("drop_self_loops")),
            drop_duplicates=True,
            overwrite=overwrite,
        )
        log.info("import %s: %d edges before dropping duplicates", fmt, first["num_edges"])
        return meta
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
