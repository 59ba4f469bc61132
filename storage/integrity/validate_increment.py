"""Validating new edge and node shards for an output that is already partitioned.

The checks are the validator's (:mod:`asepr.storage.integrity.checks`) with the id ranges of an
increment: new node rows carry the ids that follow the output's last one, with features
of the output's width, and an edge endpoint is an existing node or a new one.
"""

from __future__ import annotations

import logging

import numpy as np

from asepr.storage.errors import InputError, format_problem
from asepr.storage.integrity.checks import (
    NodeState,
    checked_edges,
    node_pass,
    schema_pass,
    shard_infos,
    split_dict,
)
from asepr.storage.integrity.report import ValidationReport
from asepr.storage.locations.fs import Shard
from asepr.storage.resources import stage

__all__ = ["validate_increment"]

log = logging.getLogger(__name__)


def validate_increment(
    edge_shards: list[Shard],
    node_shards: list[Shard],
    *,
    num_nodes: int,
    feat_dim: int,
    undirected: bool = False,
    num_classes: int | None = None,
    batch_rows: int = 1 << 20,
) -> ValidationReport:
    """Validate new edge and node shards for an output that already holds ``num_nodes`` nodes.

    The checks are those of :func:`asepr.storage.integrity.validate.validate_input`, with the id ranges of an
    increment: new node rows must carry the ids ``num_nodes .. num_nodes + n - 1``
    (contiguous from the next free id, each once), with features of the output's width
    ``feat_dim``; an edge endpoint must be an existing node (``< num_nodes``) or one of
    the new nodes. Duplicate edges are not counted.

    Returns
    -------
    ValidationReport
        ``num_nodes`` and ``num_edges`` count the *new* nodes and edges.

    Raises
    ------
    SchemaError, InputError
        On the first problem found, naming the file, column and rows.
    """
    with stage("validate increment", log) as info:
        report = _validate_increment_impl(edge_shards, node_shards, num_nodes, feat_dim, undirected,
                                          num_classes, batch_rows)
        info.update(new_nodes=report.num_nodes, new_edges=report.num_edges)
    return report

def _validate_increment_impl(edge_shards, node_shards, first_id, feat_dim, undirected, num_classes,
                             batch_rows) -> ValidationReport:
    node_infos, edge_infos = shard_infos(node_shards), shard_infos(edge_shards)
    warnings: list[str] = []
    node_files, edge_files, layouts, _, edge_columns = schema_pass(
        node_shards, node_infos, edge_shards, edge_infos, warnings)
    new_nodes = sum(i.rows for i in node_infos)
    new_edges = sum(i.rows for i in edge_infos)
    total_nodes = first_id + new_nodes
    state = NodeState(new_nodes, num_classes, offset=first_id)
    state.feat_dim, state.feat_origin = int(feat_dim), "the partitioned output"
    node_pass(state, node_files, batch_rows)
    missing = np.flatnonzero(~state.seen)
    if len(missing):  # only possible with a repeated id, which is caught above; kept as a guard
        raise InputError(
            format_problem(
                "new node shards, column 'id'",
                f"one row for every new id {first_id}..{total_nodes - 1}",
                f"{len(missing):,} id(s) without a row, e.g. {int(missing[0]) + first_id}",
                "add the missing node rows.",
            )
        )
    del state.seen

    if new_nodes:
        expected = (f"ids of existing nodes [0, {first_id}) or of the new nodes "
                    f"[{first_id}, {total_nodes}) given with --nodes")
    else:
        expected = f"ids of existing nodes [0, {first_id}) (no new node shards were given)"
    fix = (f"give the missing nodes' rows with --nodes (ids from {first_id} on), or drop the edge; "
           "nothing was ingested.")
    new_degree = np.zeros(max(new_nodes, 0), dtype=np.int64)
    self_loops = 0
    max_degree = 0
    for src, dst in checked_edges(edge_files, batch_rows, total_nodes, expected, fix):
        self_loops += int(np.count_nonzero(src == dst))
        for ids in (src, dst):
            new = ids[ids >= first_id] - first_id
            if len(new):
                new_degree += np.bincount(new, minlength=new_nodes)
    if new_nodes:
        max_degree = int(new_degree.max())
    label_counts = state.label_counts
    layout_kind = next(iter(layouts)) if len(layouts) == 1 else ("+".join(sorted(layouts)) or "none")
    return ValidationReport(
        input=f"increment of {len(edge_shards)} edge and {len(node_shards)} node shard(s)",
        num_nodes=new_nodes,
        num_edges=new_edges,
        feat_dim=int(feat_dim),
        feature_layout=layout_kind,
        num_classes=int(num_classes if num_classes is not None else len(label_counts)),
        labelled_nodes=int(state.labelled),
        label_counts=[int(c) for c in label_counts],
        split_counts=split_dict(state.split_counts),
        categorical_columns=[],
        edge_columns=edge_columns,
        undirected=bool(undirected),
        self_loops=self_loops,
        duplicate_edges=None,
        isolated_nodes=int(np.count_nonzero(new_degree == 0)),
        max_degree=max_degree,
        edge_shards=edge_infos,
        node_shards=node_infos,
        warnings=warnings,
    )
