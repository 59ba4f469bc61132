"""Cluster → partition mapping: pack communities into k partitions by volume.

2PS-L packs communities in descending volume, each to the least-loaded partition
(ties in volume: the higher community id first, as the published code sorts).
ASEP *(our choice)* keeps the communities of one attribute cluster together: attribute
clusters are taken in descending total volume, and the communities of a cluster
(in descending volume) go to one partition (the least loaded when the cluster
starts) until it would pass the volume cap ``(1 + epsilon) * 2|E| / k``, then to the
next least-loaded partition. Each attribute cluster's *home* is the partition that
received most of its volume; the edge score rewards it (``beta``).

With shares (:mod:`asepr.pipeline.capacity`) each partition has its own volume cap
``(1 + epsilon) * share_p * 2|E|``, and "least loaded" compares volumes relative to the
shares (``volume_p / (k * share_p)``), so each partition receives community volume in
proportion to its share. Equal shares are the rules above, with the same arithmetic.

Incremental ingest (:func:`place_new_communities`) keeps every existing community
where it is and places each new one (in descending volume) on its attribute
cluster's home when that partition stays under the volume cap, else on the
partition of least community volume (2PS-L's rule).
"""

from __future__ import annotations

from dataclasses import dataclass

import numba
import numpy as np

from asepr.pipeline.capacity import load_weights, volume_caps
from asepr.pipeline.planning.needs import Need, RunShape

__all__ = ["CommunityMapping", "attr_homes", "map_communities", "mapping_needs", "place_new_communities",
           "vertex_terms"]


@dataclass(frozen=True)
class CommunityMapping:
    """``community_part[c]`` for every community id (-1 for empty ones), and ``attr_home[a]``."""

    community_part: np.ndarray
    attr_home: np.ndarray
    part_volume: np.ndarray


def vertex_terms(mapping: CommunityMapping, community_id: np.ndarray, volume: np.ndarray,
                 attr_ids: np.ndarray | None) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """The assignment kernel's per-vertex terms: ``(partition, community volume, attribute
    home or None)``, the community indirections resolved once per vertex so the kernel
    reads one row per endpoint instead of chasing community -> partition on every edge."""
    vertex_home = mapping.attr_home[attr_ids] if attr_ids is not None else None
    return mapping.community_part[community_id], volume[community_id], vertex_home


@numba.njit(cache=True, inline="always")
def _lightest(load, weight):
    """The first partition of least ``load * weight`` (the least loaded relative to its share)."""
    best = 0
    for p in range(1, load.shape[0]):
        if load[p] * weight[p] < load[best] * weight[best]:
            best = p
    return best


@numba.njit(cache=True)
def _pack(order, volume, group, caps, weight, keep_groups):
    part_of = np.full(volume.shape[0], -1, dtype=np.int32)
    load = np.zeros(caps.shape[0], dtype=np.float64)
    current = -1
    last_group = -1
    for i in range(order.shape[0]):
        c = order[i]
        vol = volume[c]
        if keep_groups:
            if group[c] != last_group or current < 0 or load[current] + vol > caps[current]:
                current = _lightest(load, weight)
                last_group = group[c]
            p = current
        else:
            p = _lightest(load, weight)
        part_of[c] = p
        load[p] += vol
    return part_of, load


def map_communities(
    volume: np.ndarray,
    attr_cluster_id: np.ndarray | None,
    num_parts: int,
    *,
    epsilon: float = 0.05,
    keep_attr_together: bool = True,
    community_id: np.ndarray | None = None,
    degree: np.ndarray | None = None,
    higher_id_first: bool = False,
    shares: tuple[float, ...] | None = None,
) -> CommunityMapping:
    """Map every non-empty community to a partition.

    Parameters
    ----------
    volume
        Volume of every community id (community ids are founding vertex ids; 0 for
        ids whose community emptied).
    attr_cluster_id
        Attribute cluster of every vertex; a community's cluster is its founder's.
        None (only without ``keep_attr_together``, whose packing ignores it): the
        mapping's ``attr_home`` is empty, for :func:`attr_homes` to fill in later.
    keep_attr_together
        ASEP's packing (True) or 2PS-L's (False).
    community_id, degree
        Community and degree of every vertex, to place attribute homes by where the
        cluster's vertices are (without them, by community founders).
    higher_id_first
        Without ``keep_attr_together``: order communities of equal volume by
        descending id (the published 2PS-L) instead of ascending.
    shares
        Each partition's share (None: equal shares), :mod:`asepr.pipeline.capacity`.
    """
    if attr_cluster_id is None and keep_attr_together:
        raise ValueError("keep_attr_together packs by attribute cluster: attr_cluster_id is required")
    live = np.flatnonzero(volume > 0)
    group = (attr_cluster_id.astype(np.int64) if attr_cluster_id is not None  # indexed by community id
             else np.zeros(0, dtype=np.int64))
    caps = volume_caps(float(volume.sum()), num_parts, epsilon, shares)
    if keep_attr_together:
        num_attr = int(attr_cluster_id.max()) + 1 if len(attr_cluster_id) else 1
        group_volume = np.bincount(group[live], weights=volume[live], minlength=num_attr)
        # Attribute clusters by descending total volume, then communities by descending volume.
        order = live[np.lexsort((live, -volume[live], group[live], -group_volume[group[live]]))]
    else:
        order = live[np.lexsort((-live if higher_id_first else live, -volume[live]))]
    part_of, load = _pack(order, volume.astype(np.float64), group, caps, load_weights(num_parts, shares),
                          keep_attr_together)
    attr_home = (np.zeros(0, dtype=np.int32) if attr_cluster_id is None
                 else attr_homes(part_of, attr_cluster_id, volume, num_parts, community_id, degree))
    return CommunityMapping(community_part=part_of, attr_home=attr_home, part_volume=load)


def attr_homes(community_part: np.ndarray, attr_cluster_id: np.ndarray, volume: np.ndarray, num_parts: int,
               community_id: np.ndarray | None = None, degree: np.ndarray | None = None) -> np.ndarray:
    """``int32 [C]``: the home partition of every attribute cluster.

    The home is the partition holding most of the cluster's vertices' degree volume (per
    vertex, given ``community_id`` and ``degree``, so a cluster whose vertices all joined
    communities founded by other clusters still gets the right home; else by community
    founders); -1 for a cluster with no volume.
    """
    num_attr = int(attr_cluster_id.max()) + 1 if len(attr_cluster_id) else 1
    group = attr_cluster_id.astype(np.int64)
    live = np.flatnonzero(volume > 0)
    attr_home = np.full(num_attr, -1, dtype=np.int32)
    if len(live):
        share = np.zeros((num_attr, num_parts), dtype=np.float64)
        if community_id is not None and degree is not None:
            vertex_part = community_part[community_id]
            has = vertex_part >= 0
            np.add.at(share, (group[has], vertex_part[has]), degree[has])
        else:
            np.add.at(share, (group[live], community_part[live]), volume[live])
        populated = share.sum(axis=1) > 0
        attr_home[populated] = share[populated].argmax(axis=1)
    return attr_home


@numba.njit(cache=True)
def _place(order, volume, home_of, part_of, part_volume, caps, weight):
    for i in range(order.shape[0]):
        c = order[i]
        vol = volume[c]
        h = home_of[c]
        if h >= 0 and part_volume[h] + vol <= caps[h]:
            p = h
        else:
            p = _lightest(part_volume, weight)
        part_of[c] = p
        part_volume[p] += vol


def place_new_communities(
    community_part: np.ndarray,
    volume: np.ndarray,
    founder_attr: np.ndarray,
    attr_home: np.ndarray | None,
    num_parts: int,
    *,
    epsilon: float = 0.05,
    shares: tuple[float, ...] | None = None,
) -> int:
    """Give every live community without a partition one, in place; return how many.

    Parameters
    ----------
    community_part
        ``int32`` partition per community id, -1 for none (updated in place).
    volume
        Volume per community id (after the new edges).
    founder_attr
        Attribute cluster per vertex; a community's cluster is its founder's.
    attr_home
        Home partition per attribute cluster (None: place by volume alone, 2PS-L).
    shares
        Each partition's share (None: equal shares): the volume caps and the
        least-loaded rule are relative to them, as in :func:`map_communities`.
    """
    live = volume > 0
    part_volume = np.bincount(
        community_part[live & (community_part >= 0)],
        weights=volume[live & (community_part >= 0)], minlength=num_parts,
    ).astype(np.float64)[:num_parts]
    todo = np.flatnonzero(live & (community_part < 0))
    if not len(todo):
        return 0
    order = todo[np.lexsort((todo, -volume[todo]))]
    if attr_home is not None and len(attr_home):
        a = founder_attr[order]
        home = np.where((a >= 0) & (a < len(attr_home)), attr_home[np.clip(a, 0, len(attr_home) - 1)], -1)
    else:
        home = np.full(len(order), -1)
    home_of = np.full(len(volume), -1, dtype=np.int64)
    home_of[order] = home
    caps = volume_caps(float(volume.sum()), num_parts, epsilon, shares)
    _place(order.astype(np.int64), volume.astype(np.float64), home_of, community_part, part_volume, caps,
           load_weights(num_parts, shares))
    return len(order)


def mapping_needs(s: RunShape) -> Need:
    """Memory of :func:`map_communities` and the steering: ``group`` int64[N]; the lexsort
    over the live communities (at most N: ``live``, three int64 keys, the order and its
    gather, 48 B each); then ``part_of`` int32[N] and the homes' ``vertex_part`` int32,
    ``has`` bool and three gathers (29 B per node); then the per-vertex steering:
    ``vertex_part`` int32, ``vertex_volume`` int64, ``vertex_home`` int32."""
    return Need(driver=28 * s.n + 8 * s.n + max(48 * s.n, 8 * s.n + 29 * s.n))
