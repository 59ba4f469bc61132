"""The files asepr reads and writes: the input directory and the partitioned output.

``storage`` is the lowest layer: it knows file formats and nothing of partitioning
algorithms or training.

- Input: the format (:mod:`~storage.schema`), the one way in (:mod:`~storage.input`,
  ``open_input``), streaming validation (:mod:`~storage.validate`, its checks in
  :mod:`~storage.checks`, its report in :mod:`~storage.report`; new shards for a
  partitioned output in :mod:`~storage.validate_increment`), the decoded copy written
  while validating (:mod:`~storage.decoded_copy`), importers from public formats
  (:mod:`~storage.importers`), the writer they share (:mod:`~storage.input_writer`), one
  node column read by id (:mod:`~storage.reader`) and ``asepr clean`` (:mod:`~storage.clean`, with the
  duplicate counter :mod:`~storage.dedup`).
- Output: the per-partition Zarr stores (:mod:`~storage.partition_store`; an output's
  committed stores in :mod:`~storage.output_stores`), the manifest
  (:mod:`~storage.manifest`), the incremental state (:mod:`~storage.state`)
  and the output lock (:mod:`~storage.lock`).
- Shared: fsspec paths and shard discovery (:mod:`~storage.fs`), atomic writes
  (:mod:`~storage.atomic`), paths kept inside an output (:mod:`~storage.confine`), the
  error hierarchy (:mod:`~storage.errors`), stage timing (:mod:`~storage.resources`)
  and the fault injector of the crash tests (:mod:`~storage.failpoints`).
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
from storage.output_stores import open_partition
from storage.partition_store import PartitionStore, open_store
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
