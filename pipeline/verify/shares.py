"""``asepr verify``: every partition's assigned edges within its own cap.

The kernel never fills partition p past its edge cap, ``ceil((1 + eps) * |E| / k)``,
or with capacities ``ceil((1 + eps) * share_p * |E|)`` (:mod:`asepr.pipeline.capacity`), and
ingest and rebalance keep it so. A store holding more assigned edges than its cap of
the manifest's edge count was not written by them for these capacities (or the
recorded capacities were changed), so it is reported with its share.
"""

from __future__ import annotations

from typing import Any

from asepr.pipeline.capacity import edge_caps, normalise_capacities, shares_of
from asepr.storage.errors import AseprError

__all__ = ["share_problems"]


def share_problems(manifest: dict[str, Any], part_id: int, owned_edges: int) -> list[str]:
    """The problem of partition ``part_id`` when its ``owned_edges`` (assigned, not halo)
    pass its cap of the manifest's edge count, epsilon and capacities (capacities the
    manifest records wrongly are reported by partition 0)."""
    config = manifest.get("config") or {}
    k = int(manifest["num_parts"])
    try:
        shares = shares_of(normalise_capacities(config.get("capacities"), k, "manifest config capacities"))
    except AseprError as exc:
        return [str(exc)] if part_id == 0 else []
    epsilon = float(config.get("epsilon", 0.05))
    num_edges = int(manifest["num_edges"])
    caps = edge_caps(num_edges, k, epsilon, shares)
    if not 0 <= part_id < k or owned_edges <= caps[part_id]:
        return []
    share = 1.0 / k if shares is None else shares[part_id]
    message = (f"holds {owned_edges:,} assigned edges ({owned_edges / max(num_edges, 1):.3f} of {num_edges:,}), "
               f"past its cap {int(caps[part_id]):,} = ceil((1 + {epsilon:g}) x share {share:.3f} x |E|); its share "
               f"is {share:.3f}")
    return [message]
