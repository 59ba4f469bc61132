"""Kernel-only speed: assign_batch over the first 8M edges of the 50M synth graph, k=32.

Run with PYTHONPATH pointing at a checkout; prints edges/s by thread CPU time and wall.
"""
import sys, time, json
import numpy as np
import pyarrow.parquet as pq
from pathlib import Path
from pipeline.assign import AssignState, assign_batch, MODES
try:
    from pipeline.assign.kernel import KernelArgs
except ImportError:
    KernelArgs = None

edges = sorted(Path("/work/scratch/edges").glob("*.parquet"))[:8]
t = [pq.read_table(p, columns=["src", "dst"]) for p in edges]
src = np.concatenate([x.column("src").to_numpy() for x in t]).astype(np.int64)
dst = np.concatenate([x.column("dst").to_numpy() for x in t]).astype(np.int64)
n = 5_000_000
k = 32
deg = np.bincount(src, minlength=n) + np.bincount(dst, minlength=n)
rng = np.random.default_rng(0)
part = rng.integers(0, k, n)
vol = rng.integers(1, 1000, n)
home = rng.integers(0, k, n)
cap = int(np.ceil(1.05 * len(src) / k))
res = {}
for name, kw in (("hdrf", dict(use_partial=True, beta=0.0, parts=False)),
                 ("asep-all", dict(use_partial=False, beta=0.25, parts=True, mode="all")),
                 ("asep-candidates", dict(use_partial=False, beta=0.25, parts=True, mode="candidates"))):
    def run(s, d):
        st = AssignState(k, deg, part if kw["parts"] else None, vol if kw["parts"] else None,
                         home if kw["parts"] else None)
        out = np.empty(len(s), np.int16)
        c0, w0 = time.thread_time(), time.perf_counter()
        B = 1 << 20
        for i in range(0, len(s), B):
            choice = (MODES[kw.get("mode", "all")], kw["use_partial"], kw["beta"], 1.0, cap, 0)
            if KernelArgs is None:  # a checkout from before the kernel took its arguments as a record
                assign_batch(s[i:i+B], d[i:i+B], out[i:i+B], choice[0], st.vstate, st.words, st.loads, *choice[1:])
            else:
                assign_batch(s[i:i+B], d[i:i+B], out[i:i+B], st.vstate, st.words, st.loads, KernelArgs(*choice))
        return time.thread_time() - c0, time.perf_counter() - w0
    run(src[:1000], dst[:1000])
    cpu, wall = min(run(src, dst) for _ in range(3))
    res[name] = (round(len(src) / cpu / 1e6, 2), round(len(src) / wall / 1e6, 2))
print(sys.argv[1], json.dumps(res), flush=True)
