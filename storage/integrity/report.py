"""What validating an input found: :class:`ValidationReport` and its :class:`ShardInfo` rows.

:func:`asepr.storage.integrity.validate.validate_input` and :func:`asepr.storage.integrity.validate_increment.validate_increment`
return it; ``asepr validate`` prints :meth:`ValidationReport.summary` (or the JSON of
:meth:`ValidationReport.to_dict`), and importers store its counts in ``meta.json``.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, replace
from typing import Any

__all__ = ["ShardInfo", "ValidationReport"]


@dataclass
class ShardInfo:
    """One validated shard: where it is, its row count and content hash."""

    url: str
    rows: int
    sha256: str


@dataclass
class ValidationReport:
    """What the validator found. ``to_dict()`` is JSON-ready."""

    input: str
    num_nodes: int
    num_edges: int
    feat_dim: int
    feature_layout: str
    num_classes: int
    labelled_nodes: int
    label_counts: list[int]
    split_counts: dict[str, int]
    categorical_columns: list[str]
    edge_columns: list[str]
    undirected: bool
    self_loops: int
    duplicate_edges: int | None
    isolated_nodes: int
    max_degree: int
    edge_shards: list[ShardInfo] = field(default_factory=list)
    node_shards: list[ShardInfo] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    #: ``int64[N]`` vertex degrees (src rows + dst rows, a self-loop counts 2), counted by
    #: the validator's edge pass; kept so that partitioning need not count them again.
    #: Not part of :meth:`to_dict`. None on reports that did not count them.
    degree: Any = field(default=None, repr=False, compare=False)

    def to_dict(self) -> dict[str, Any]:
        """The JSON-ready fields (without the O(N) ``degree`` vector)."""
        out = asdict(replace(self, degree=None))
        del out["degree"]
        return out

    def summary(self) -> str:
        """A human-readable multi-line summary."""
        dup = "not checked" if self.duplicate_edges is None else f"{self.duplicate_edges:,}"
        kind = "undirected (each edge stored once)" if self.undirected else "directed"
        lines = [
            f"input        {self.input}",
            f"nodes        {self.num_nodes:,} in {len(self.node_shards)} shard(s); "
            f"{self.isolated_nodes:,} isolated; max degree {self.max_degree:,}",
            f"edges        {self.num_edges:,} in {len(self.edge_shards)} shard(s), {kind}",
            f"features     {self.feat_dim} float32 ({self.feature_layout} layout)",
            f"labels       {self.num_classes} classes, {self.labelled_nodes:,} labelled nodes",
            "splits       "
            + ", ".join(f"{k} {v:,}" for k, v in self.split_counts.items()),
            f"self-loops   {self.self_loops:,}",
            f"duplicates   {dup}",
        ]
        if self.categorical_columns:
            lines.append(f"categorical  {', '.join(self.categorical_columns)}")
        lines += [f"warning      {w}" for w in self.warnings]
        return "\n".join(lines)
