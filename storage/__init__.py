"""Input format, validation, importers and (later) the partition stores.

``storage`` is the lowest layer: it knows file formats and nothing of partitioning
algorithms or training.
"""

from storage.atomic import staged_output, write_bytes_atomic
from storage.dedup import EdgeDedup
from storage.errors import (
    AseprError,
    InputError,
    InputNotFoundError,
    SchemaError,
    StoreError,
    format_problem,
)
from storage.fs import Shard, discover_shards, fingerprint, join, resolve, url_of
from storage.input import InputDir, input_paths, open_input, open_parquet, read_meta
from storage.input_writer import InputWriter
from storage.lock import OutputLock
from storage.manifest import MANIFEST_NAME, read_manifest, write_manifest
from storage.partition_store import PartitionStore, open_partition, open_store
from storage.schema import (
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
from storage.report import ShardInfo, ValidationReport
from storage.validate import validate_input

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
