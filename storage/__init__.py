"""The files asepr reads and writes: the input directory and the partitioned output.

``storage`` is the lowest layer: it knows file formats and nothing of partitioning
algorithms or training. One concept per folder:

- :mod:`asepr.storage.inputs`: the input format, the one way in (``open_input``), the writer the
  importers share, ``asepr clean`` and the decoded copies of a partition run;
- :mod:`asepr.storage.importers`: public formats (gnn-benchmark, MUSAE, OGB, edge lists) into the
  input format;
- :mod:`asepr.storage.integrity`: streaming validation and the checked reads of a store;
- :mod:`asepr.storage.partitions`: the per-partition Zarr stores, the manifest and ``state.zarr``;
- :mod:`asepr.storage.commit`: atomic writes, the output lock, the object-store lease and path
  confinement;
- :mod:`asepr.storage.locations`: fsspec paths, local and object-store locations.

Beside them: the error hierarchy (:mod:`asepr.storage.errors`) and stage timing and memory
(:mod:`asepr.storage.resources`). The names users import are re-exported here.
"""

from asepr.storage.commit.atomic import staged_output, write_bytes_atomic
from asepr.storage.commit.lock import OutputLock
from asepr.storage.errors import (
    AseprError,
    InputError,
    InputNotFoundError,
    SchemaError,
    StoreError,
    format_problem,
)
from asepr.storage.inputs.dedup import EdgeDedup
from asepr.storage.inputs.directory import InputDir, input_paths, open_input, open_parquet, read_meta
from asepr.storage.inputs.schema import (
    FORMAT_VERSION,
    META_NAME,
    SPLIT_NONE,
    SPLIT_TEST,
    SPLIT_TRAIN,
    SPLIT_VAL,
    FeatureLayout,
    check_edge_schema,
    check_node_schema,
    feature_matrix,
    node_schema,
)
from asepr.storage.inputs.writer import InputWriter
from asepr.storage.integrity.report import ShardInfo, ValidationReport
from asepr.storage.integrity.validate import validate_input
from asepr.storage.locations.fs import Shard, discover_shards, fingerprint, join, resolve, url_of
from asepr.storage.partitions.manifest import MANIFEST_NAME, read_manifest, write_manifest
from asepr.storage.partitions.output_stores import open_partition
from asepr.storage.partitions.store import PartitionStore, open_store

__all__ = [
    "MANIFEST_NAME",
    "OutputLock",
    "PartitionStore",
    "open_partition",
    "open_store",
    "read_manifest",
    "write_manifest",
    "EdgeDedup",
    "ShardInfo",
    "ValidationReport",
    "validate_input",
    "AseprError",
    "FORMAT_VERSION",
    "FeatureLayout",
    "InputDir",
    "InputError",
    "InputNotFoundError",
    "InputWriter",
    "META_NAME",
    "SPLIT_NONE",
    "SPLIT_TEST",
    "SPLIT_TRAIN",
    "SPLIT_VAL",
    "SchemaError",
    "Shard",
    "StoreError",
    "check_edge_schema",
    "check_node_schema",
    "discover_shards",
    "feature_matrix",
    "fingerprint",
    "format_problem",
    "join",
    "node_schema",
    "input_paths",
    "open_input",
    "open_parquet",
    "read_meta",
    "resolve",
    "staged_output",
    "url_of",
    "write_bytes_atomic",
]
