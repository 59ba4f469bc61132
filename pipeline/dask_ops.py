"""Dask plumbing shared by the pipeline stages: keys, tree sums, compute, errors.

Stages build ``dask.delayed`` graphs with one task per shard and combine the results
with :func:`tree_reduce`, whose fixed shape makes sums bit-identical under any
scheduler. :func:`compute` runs a graph on a ``distributed.Client`` or, without one,
on the local thread pool.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import dask

from asepr.storage.errors import AseprError

if TYPE_CHECKING:
    import distributed

__all__ = ["captured", "compute", "first_error", "share", "task_prefix", "tree_reduce"]


def task_prefix(stage_name: str) -> str:
    """A readable, unique key prefix for one run of a stage (``degrees-1a2b3c4d``)."""
    return f"{stage_name}-{uuid.uuid4().hex[:12]}"


def tree_reduce(parts: Sequence[Any], combine: Callable[[Any, Any], Any], prefix: str) -> Any:
    """Combine delayed ``parts`` pairwise, level by level, into one delayed value.

    The shape of the tree depends only on ``len(parts)``, so floating-point sums come
    out bit-identical under any scheduler and any number of workers. ``prefix`` (from
    :func:`task_prefix`) names the keys.
    """
    if not parts:
        raise ValueError("tree_reduce needs at least one part")
    level = list(parts)
    depth = 0
    while len(level) > 1:
        nxt = [
            dask.delayed(combine)(
                level[i], level[i + 1], dask_key_name=f"{prefix}-sum-{depth}-{i // 2}"
            )
            for i in range(0, len(level) - 1, 2)
        ]
        if len(level) % 2:
            nxt.append(level[-1])
        level = nxt
        depth += 1
    return level[0]


def compute(value: Any, client: distributed.Client | None) -> Any:
    """Compute a delayed value (or a list of them) on ``client``, or on local threads."""
    if client is not None:
        return client.gather(client.compute(value))
    (result,) = dask.compute(value, scheduler="threads")
    return result


def share(value: Any, client: distributed.Client | None, name: str) -> Any:
    """One graph node (or one scattered future) for a value every task reads."""
    if client is not None:
        return client.scatter(value, broadcast=True, hash=False)
    return dask.delayed(value, name=name)


def captured(fn, *args):
    """Run ``fn``; return ``(None, result)``, or ``(error, None)`` for an asepr error.

    Scans run in parallel, so the first error to surface would depend on timing; the
    client raises the error of the first shard in order instead.
    """
    try:
        return None, fn(*args)
    except AseprError as exc:
        return exc, None


def first_error(results: list[tuple[AseprError | None, Any]]) -> list[Any]:
    for error, _ in results:
        if error is not None:
            raise error
    return [value for _, value in results]
