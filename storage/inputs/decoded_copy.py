"""The decoded copy of an input: its checked rows written while the validator reads them.

A partition run reads every edge several times and the node table twice; decoding
Parquet is most of such a pass's cost. The validator decodes every batch anyway, so
:func:`validate_and_copy` hands its checked rows (:class:`DecodedCopy`) to the writers
of the raw copies, :class:`asepr.storage.inputs.decoded.DecodedWriter` (each edge shard's ``src`` and
``dst``) and :class:`asepr.storage.inputs.node_table.NodeTableWriter` (the node rows), and the later
passes read those instead of the shards.
"""

from __future__ import annotations

from pathlib import Path

from asepr.storage.inputs.decoded import DecodedWriter
from asepr.storage.inputs.directory import InputDir
from asepr.storage.inputs.node_table import NodeTableWriter
from asepr.storage.integrity.report import ValidationReport
from asepr.storage.integrity.validate import validate_input

__all__ = ["DecodedCopy", "validate_and_copy"]


class DecodedCopy:
    """The receiver of :func:`asepr.storage.integrity.validate.validate_input`'s checked rows
    (its ``rows=``) that writes them into ``directory``, an existing empty directory."""

    def __init__(self, directory: str | Path):
        self.directory = Path(directory)

    def node_rows(self, num_nodes: int) -> NodeTableWriter:
        return NodeTableWriter(self.directory, num_nodes)

    def edge_rows(self, num_shards: int, num_nodes: int) -> DecodedWriter:
        return DecodedWriter(self.directory, num_shards, num_nodes)


def validate_and_copy(source: str | Path | InputDir, directory: str | Path, **options) -> ValidationReport:
    """Validate ``source`` (:func:`asepr.storage.integrity.validate.validate_input` with ``options``) and
    write its decoded copy into ``directory`` (:mod:`asepr.storage.inputs.decoded` for the edges,
    :mod:`asepr.storage.inputs.node_table` for the nodes) in the same pass.

    Raises what :func:`asepr.storage.integrity.validate.validate_input` raises; the copy is then partial,
    and the caller removes ``directory``.
    """
    return validate_input(source, rows=DecodedCopy(directory), **options)
