"""Per-partition capacities: the share of the graph each partition's machine takes.

A run gets k positive capacities (``--capacities W1,...,Wk``, or a cluster file, see
:func:`read_cluster_file`), normalised to shares ``share_p = W_p / sum(W)``. Every
balance rule of the partitioner then measures a partition against its own share
(docs/design.md#streaming-assignment):

* the edge cap of partition p is ``ceil((1 + eps) * share_p * |E|)``
  (:func:`edge_caps`), its floor ``floor((1 - eps) * share_p * |E|)`` (:func:`edge_floors`), and the community volume cap of the mapping
  ``(1 + eps) * share_p * 2|E|`` (:func:`volume_caps`); drift and rebalance judge a
  partition's community volume against :func:`volume_limits`;
* loads are compared relative to capacity: ``load_p * weight_p`` with
  ``weight_p = 1 / (k * share_p)`` (:func:`load_weights`), which is ``load_p`` itself
  for equal shares, so the rules read as before;
* the hashing baselines draw a partition with probability ``share_p``
  (:func:`hash_bounds`).

Equal capacities are no capacities: :func:`normalise_capacities` turns them into None,
and every caller keeps its uniform arithmetic unchanged for None, so a run with equal
capacities is the run without them, byte for byte.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from asepr.storage.errors import InputError, format_problem

__all__ = [
    "edge_caps", "edge_floors", "hash_bounds", "load_weights", "normalise_capacities", "parse_capacities",
    "read_cluster_file", "shares_of", "volume_caps", "volume_limits",
]


_FIX = "give k positive numbers separated by commas, e.g. --capacities 2,1,1,1."


def parse_capacities(text: str, where: str = "--capacities") -> tuple[float, ...]:
    """``"2,1,1,1"`` -> ``(2.0, 1.0, 1.0, 1.0)``.

    Raises
    ------
    InputError
        An entry that is not a finite number > 0.
    """
    from asepr.storage.cluster import parse_positive_list

    try:
        return parse_positive_list(text)
    except ValueError as exc:
        raise InputError(format_problem(where, "positive numbers separated by commas",
                                        f"{str(exc)!r} in {text!r}", _FIX)) from None


def normalise_capacities(capacities: Sequence[float] | None, num_parts: int,
                         where: str = "--capacities") -> tuple[float, ...] | None:
    """Checked capacities as floats, or None when there are none or all are equal.

    Raises
    ------
    InputError
        Not ``num_parts`` of them, or one that is not a finite number > 0.
    """
    if capacities is None:
        return None
    if isinstance(capacities, str):
        capacities = parse_capacities(capacities, where)
    values = list(capacities)
    if len(values) != num_parts:
        raise InputError(format_problem(
            where, f"one capacity per partition (k = {num_parts})", f"{len(values)}: {values}",
            f"give {num_parts} capacities, one per partition, or set -k to {len(values)}."))
    out = []
    for value in values:
        try:
            number = float(value)
        except (TypeError, ValueError):
            number = math.nan
        if isinstance(value, bool) or not (math.isfinite(number) and number > 0):
            raise InputError(format_problem(where, "positive numbers", f"{value!r} in {values}", _FIX))
        out.append(number)
    if all(v == out[0] for v in out):
        return None
    return tuple(out)


def shares_of(capacities: Sequence[float] | None) -> tuple[float, ...] | None:
    """The shares ``W_p / sum(W)`` (None: equal shares)."""
    if capacities is None:
        return None
    total = float(sum(capacities))
    return tuple(float(c) / total for c in capacities)


def edge_caps(num_edges: int, num_parts: int, epsilon: float, shares: Sequence[float] | None) -> np.ndarray:
    """``int64[k]``: the hard edge cap of each partition.

    Equal shares: ``ceil((1 + eps)|E|/k)`` each (the same arithmetic as ever); else
    ``ceil((1 + eps) * share_p * |E|)``. Either way the caps sum to at least |E|.
    """
    if shares is None:
        return np.full(num_parts, int(np.ceil((1.0 + epsilon) * num_edges / num_parts)), dtype=np.int64)
    share = np.asarray(shares, dtype=np.float64)
    return np.ceil((1.0 + epsilon) * share * num_edges).astype(np.int64)


def edge_floors(num_edges: int, epsilon: float, shares: Sequence[float]) -> np.ndarray:
    """``int64[k]``: with shares, the edges partition p is filled to by the end of the
    stream, ``floor((1 - eps) * share_p * |E|)`` (the kernel's floors, :mod:`asepr.pipeline.assign.kernel`)."""
    share = np.asarray(shares, dtype=np.float64)
    return np.floor(max(0.0, 1.0 - epsilon) * share * num_edges).astype(np.int64)


def volume_caps(total_volume: float, num_parts: int, epsilon: float,
                shares: Sequence[float] | None) -> np.ndarray:
    """``float64[k]``: the community volume cap of each partition, ``(1 + eps) * share_p * 2|E|``
    (``total_volume`` is 2|E|); equal shares: ``(1 + eps) * 2|E| / k``, computed as ever."""
    if shares is None:
        return np.full(num_parts, (1.0 + epsilon) * float(total_volume) / num_parts, dtype=np.float64)
    return (1.0 + epsilon) * np.asarray(shares, dtype=np.float64) * float(total_volume)


def volume_limits(total_volume: float, num_parts: int, epsilon: float,
                  shares: Sequence[float] | None) -> np.ndarray:
    """``float64[k]``: the community volume a partition may hold before a rebalance is advised.

    Its volume cap (:func:`volume_caps`), but with shares at least ``(1 + eps) * 2|E| / k``:
    the clustering builds communities of up to ``2|E|/k`` whatever the shares (a cap of
    the smallest share's volume replicated more, ``docs/results/capacity-partition``),
    so a partition of a share below ``1/k`` may hold one such community, which no
    rebalance could split.
    """
    caps = volume_caps(total_volume, num_parts, epsilon, shares)
    if shares is None:
        return caps
    return np.maximum(caps, (1.0 + epsilon) * float(total_volume) / num_parts)


def load_weights(num_parts: int, shares: Sequence[float] | None) -> np.ndarray:
    """``float64[k]``: ``1 / (k * share_p)``, so that ``load_p * weight_p`` is a load relative to
    capacity in units of an equal share's load; exactly 1.0 for equal shares."""
    if shares is None:
        return np.ones(num_parts, dtype=np.float64)
    return 1.0 / (num_parts * np.asarray(shares, dtype=np.float64))


def hash_bounds(shares: Sequence[float] | None) -> np.ndarray:
    """``uint64[k]``: the hashing baselines' bucket bounds, empty for equal shares.

    A 64-bit hash ``h`` goes to the first p with ``h < bounds[p]``: partition p gets
    the hashes in a range of ``share_p * 2**64`` values. The last bound is the largest
    uint64, so that every hash has a partition (the one value 2**64 - 1 is never
    drawn by the last partition: a bias of 2**-64).
    """
    if shares is None:
        return np.zeros(0, dtype=np.uint64)
    cumulative = np.cumsum(np.asarray(shares, dtype=np.float64))
    bounds = np.empty(len(cumulative), dtype=np.uint64)
    for p, c in enumerate(cumulative):
        bounds[p] = min(int(c * 2.0**64), 2**64 - 1)
    bounds[-1] = np.uint64(2**64 - 1)
    return bounds


def read_cluster_file(path: str | Path) -> tuple[float, ...]:
    """The capacities of a cluster file: one per machine, in order.

    The file is the one ``asepr train --cluster`` reads (:mod:`asepr.storage.cluster`). Every
    machine gives ``compute`` (its relative speed), ``memory`` (its memory, in any one
    unit for all), or both (a key is given for every machine or for none). Each column
    is normalised to sum to 1, and a machine's capacity is the smaller of its two: a
    partition's edges cost both its machine's time in each round and its memory, so a
    machine's share follows its speed unless its memory is the tighter limit.

    Raises
    ------
    InputError
        An unreadable file, no machines, an unknown key, a key given for some machines
        only, a value that is not a positive number, or neither key.
    """
    from asepr.storage.cluster import read_cluster

    cluster = read_cluster(path)
    columns = [c for c in (cluster.column("compute"), cluster.column("memory")) if c is not None]
    if not columns:
        raise InputError(format_problem(cluster.source, "compute or memory for every machine", "neither",
                                        "write a [[machine]] table per machine with compute = SPEED and "
                                        "memory = SIZE (docs/guide/partitioning.md)."))
    normalised = [np.asarray(column) / sum(column) for column in columns]
    return tuple(float(c) for c in np.minimum.reduce(normalised))
