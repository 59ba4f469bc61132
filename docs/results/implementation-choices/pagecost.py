"""What fresh pages cost on the benchmark machine (a virtual machine): write 600 MB as 150 new 4 MB files, then touch
600 MB of new anonymous memory; three rounds (the files are deleted between rounds, so
rounds 2 and 3 reuse pages the guest just freed). Prints user and sys CPU seconds."""
import os
import resource
import sys
import time

import numpy as np


def cpu():
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime, r.ru_stime


work = sys.argv[1] if len(sys.argv) > 1 else "pagecost-work"
os.makedirs(work, exist_ok=True)
block = np.random.default_rng(0).standard_normal(1 << 20).astype(np.float32)  # 4 MB
for round_ in range(1, 4):
    u0, s0 = cpu()
    t = time.perf_counter()
    for i in range(150):
        with open(f"{work}/f{i}", "wb") as f:
            f.write(block.tobytes())
    u1, s1 = cpu()
    print(f"round {round_}: 600 MB in 150 new files: wall {time.perf_counter() - t:.2f} s, "
          f"user {u1 - u0:.2f} s, sys {s1 - s0:.2f} s")
    u0, s0 = cpu()
    t = time.perf_counter()
    x = np.empty(150 << 20, np.float32)
    x[:] = 1
    u1, s1 = cpu()
    print(f"round {round_}: 600 MB of new anonymous memory touched: wall {time.perf_counter() - t:.2f} s, "
          f"user {u1 - u0:.2f} s, sys {s1 - s0:.2f} s")
    del x
    for i in range(150):
        os.remove(f"{work}/f{i}")
os.rmdir(work)
