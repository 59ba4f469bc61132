"""How much the attribute clusters explain the graph's structure (the attribute lift).

ASEP lets attributes steer partitioning. That pays off when neighbours tend to share
an attribute cluster, and costs replication when they do not: on a graph whose
features say little about its edges, pulling edges towards attribute homes only
spreads vertices. *(our choice)* ASEP therefore measures, on a prefix of the edge
stream, the attribute homophily ``h`` (the share of edges whose endpoints share an
attribute cluster) against the share expected by chance for the clusters' degree
volumes, ``h0 = Σ_c (vol_c / 2|E|)²``, and reports the normalised lift
``(h - h0) / (1 - h0)``. With ``lift_reference > 0`` it scales its attribute weights
by it (clipped to ``[0, 1]``): ``weight_eff = weight * min(1, lift / reference)``.
The default is no scaling (see :class:`asepr.pipeline.config.PartitionConfig`); the lifts of
the shared datasets are in ``docs/results/partition-sweep``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from asepr.pipeline.stream import iter_edge_batches
from asepr.storage.locations.fs import Shard

__all__ = ["AttributeLift", "attribute_lift"]


@dataclass(frozen=True)
class AttributeLift:
    homophily: float
    chance: float
    lift: float
    sample_edges: int

    def scale(self, reference: float) -> float:
        """``min(1, lift / reference)``: the factor applied to alpha and beta."""
        if reference <= 0:
            return 1.0
        return float(min(1.0, max(0.0, self.lift) / reference))


def attribute_lift(
    edge_shards: list[Shard],
    degree: np.ndarray,
    attr_cluster_id: np.ndarray,
    *,
    sample_edges: int = 1 << 21,
    batch_rows: int = 1 << 20,
) -> AttributeLift:
    """Attribute homophily and its lift over chance, from the first ``sample_edges`` edges."""
    attr = np.asarray(attr_cluster_id)
    num_attr = int(attr.max()) + 1 if len(attr) else 1
    vol = np.bincount(attr, weights=degree, minlength=num_attr)
    total = vol.sum()
    chance = float(((vol / total) ** 2).sum()) if total > 0 else 1.0
    same = seen = 0
    for batch in iter_edge_batches(edge_shards, batch_rows, prefetch=0):
        take = min(len(batch.src), sample_edges - seen)
        src, dst = batch.src[:take], batch.dst[:take]
        same += int(np.count_nonzero(attr[src] == attr[dst]))
        seen += take
        if seen >= sample_edges:
            break
    homophily = same / seen if seen else 0.0
    lift = (homophily - chance) / (1.0 - chance) if chance < 1.0 else 0.0
    return AttributeLift(homophily=homophily, chance=chance, lift=float(lift), sample_edges=seen)
