"""Reads of a committed output that an ingest or a rebalance may be replacing meanwhile.

:func:`read_node_column` streams one node column into an O(N) array indexed by node
id. :func:`read_committed` runs a read of an output's stores (a trainer loading its
partitions) so that a commit swapping in the next generation during the read is not
taken for a damaged store: the read starts again on the new generation.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import numpy as np

from asepr.storage.errors import StoreError, format_problem
from asepr.storage.inputs.directory import open_parquet
from asepr.storage.locations.fs import Shard, join, resolve, url_of
from asepr.storage.locations.remote import remote_error_problem, remote_errors_as_problems
from asepr.storage.partitions.manifest import JOURNAL_NAME, STAGING_NAME, read_manifest

__all__ = ["read_committed", "read_node_column"]

log = logging.getLogger(__name__)

T = TypeVar("T")

#: How many times a read starts again while commits replace the output under it.
READ_ATTEMPTS = 8
#: The pause before a read starts again (doubled each time), for the commit to finish.
RETRY_WAIT_S = 0.05


def read_node_column(
    node_shards: list[Shard],
    num_nodes: int,
    column: str,
    *,
    dtype=np.int64,
    default=-1,
    batch_rows: int = 1 << 20,
) -> np.ndarray:
    """``out[id] = value`` for one scalar node column; ``default`` where the column is absent."""
    out = np.full(num_nodes, default, dtype=dtype)
    for shard in node_shards:
        pf = open_parquet(shard)
        if column not in pf.schema_arrow.names:
            continue
        for batch in pf.iter_batches(batch_size=batch_rows, columns=["id", column]):
            ids = batch.column("id").to_numpy()
            out[ids] = batch.column(column).to_numpy(zero_copy_only=False)
    return out


def _commit_state(out: str | Path, storage_options: dict | None) -> tuple[int | None, bool]:
    """The committed generation (None without a manifest) and whether a commit is under way."""
    fs, path = resolve(out, storage_options)
    manifest = read_manifest(out, storage_options=storage_options, missing_ok=True)
    committing = fs.exists(join(path, STAGING_NAME, JOURNAL_NAME))
    return (None if manifest is None else int(manifest["generation"])), committing


def read_committed(out: str | Path, read: Callable[[], T], *, storage_options: dict | None = None) -> T:
    """``read()``, started again when a commit replaced the output while it ran.

    ``read`` reads the manifest and the stores it names; the stores are checked against
    the manifest as they are read, so a store swapped away mid-read fails the read.
    When ``read`` fails with a :class:`StoreError` (or an ``OSError``: a file moved away) and meanwhile the committed
    generation changed, or a commit is under way (its journal is in the staging
    directory), the read starts again on the generation committed then, up to
    :data:`READ_ATTEMPTS` times. A failure with no commit around it is raised as it is.

    On an object store, a request that failed after the client's retries (the store
    does not answer, a timeout) ends the read with a :class:`RemoteStoreError` naming
    the output and the object (:func:`asepr.storage.locations.remote.remote_errors_as_problems`).

    Raises
    ------
    StoreError
        The read's own error, or, after the last attempt, one that says a commit was
        under way the whole time.
    RemoteStoreError
        The store did not answer.
    """
    with remote_errors_as_problems(url_of(*resolve(out, storage_options))):
        return _read_committed(out, read, storage_options)


def _read_committed(out: str | Path, read: Callable[[], T], storage_options: dict | None) -> T:
    wait = RETRY_WAIT_S
    for attempt in range(READ_ATTEMPTS):
        before = _commit_state(out, storage_options)
        try:
            return read()
        except (StoreError, OSError) as exc:
            if remote_error_problem(exc, str(out)) is not None:
                raise  # the store did not answer: no commit to wait for
            after = _commit_state(out, storage_options)
            if after == before and not after[1]:
                raise
            last = exc
        log.info("output %s: generation %s was replaced during the read (now %s%s); reading again",
                 out, before[0], after[0], ", a commit under way" if after[1] else "")
        if attempt + 1 < READ_ATTEMPTS:
            time.sleep(wait)
            wait *= 2
    raise StoreError(format_problem(
        f"output {out}", "a committed generation that stays in place while it is read",
        f"a commit (ingest or rebalance) under way or interrupted during {READ_ATTEMPTS} attempts; "
        f"the last read failed with: {last}",
        "wait for the running `asepr ingest` or `asepr rebalance` to finish (rerun it if it was killed; "
        "it completes the commit), then load again.",
    )) from last
