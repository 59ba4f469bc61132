"""md5 of the edge -> partition ids for asep, 2ps-hdrf and hdrf, in memory and in the store.

``python assignment_digests.py K INPUT...`` prints, per input and algorithm:

- ``memory``: the md5 of every edge's partition id as ``pipeline.partition`` returns them
  (all edge shards in input order, the bytes of the int arrays);
- ``store``: the md5 of the partition ids that ``asepr partition`` writes
  (``pipeline.partition_to_store``), read back from each partition's CSR as
  (partition, row node, column node) in global ids, sorted, so it does not depend on the order in which a
  partition lists its edges;
- the replication factor.
"""
import hashlib
import json
import sys
import tempfile
from pathlib import Path

import numpy as np

from pipeline import PartitionConfig, partition, partition_to_store
from storage.partitions.output_stores import open_partition

ALGOS = ("asep", "2ps-hdrf", "hdrf")


def memory_digest(inp: str, k: int, algo: str) -> tuple[str, float]:
    with partition(inp, k, algo=algo) as a:
        h = hashlib.md5()
        for i in range(len(a.edge_shards)):
            h.update(np.ascontiguousarray(a.edge_parts(i)).tobytes())
        return h.hexdigest(), round(float(a.metrics["replication_factor"]), 6)


def store_digest(inp: str, k: int, algo: str) -> str:
    with tempfile.TemporaryDirectory(dir="/tmp") as tmp:
        out = Path(tmp) / "out"
        partition_to_store(inp, out, PartitionConfig(num_parts=k, algo=algo))
        rows = []
        for p in range(k):
            store = open_partition(out, p)
            gid = np.asarray(store.global_nid[:], dtype=np.int64)
            indptr = np.asarray(store.indptr[:], dtype=np.int64)
            row = np.repeat(gid, np.diff(indptr))
            col = gid[np.asarray(store.indices[:], dtype=np.int64)]
            rows.append(np.stack([np.full(len(row), p, np.int64), row, col], axis=1))
        table = np.concatenate(rows)
        table = table[np.lexsort((table[:, 2], table[:, 1], table[:, 0]))]
        return hashlib.md5(np.ascontiguousarray(table).tobytes()).hexdigest()


def main() -> None:
    k = int(sys.argv[1])
    out = {}
    for inp in sys.argv[2:]:
        for algo in ALGOS:
            memory, rf = memory_digest(inp, k, algo)
            store = store_digest(inp, k, algo)
            key = f"{Path(inp).name} {algo}"
            out[key] = {"memory": memory, "store": store, "rf": rf}
            print(key, memory, store, rf, flush=True)
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
