"""md5 of edge->partition ids for asep, 2ps-l, hdrf on given inputs (the refactor's check)."""
import hashlib, sys, json
import numpy as np
from pipeline import partition

out = {}
for inp in sys.argv[2:]:
    for algo in ("asep", "2ps-l", "hdrf"):
        with partition(inp, int(sys.argv[1]), algo=algo) as a:
            h = hashlib.md5()
            for i in range(len(a.edge_shards)):
                h.update(np.ascontiguousarray(a.edge_parts(i)).tobytes())
            out[f"{inp} {algo}"] = (h.hexdigest(), round(a.metrics["replication_factor"], 6))
            print(inp, algo, out[f"{inp} {algo}"], flush=True)
print(json.dumps(out, indent=1))
