import time, resource, numpy as np, sys
def cpu():
    r = resource.getrusage(resource.RUSAGE_SELF); return r.ru_utime + r.ru_stime
for delay in [0, 0, 1, 3, 0, 6]:
    time.sleep(delay)
    c = cpu(); x = np.ones(150 << 20, np.float32); dt = cpu() - c
    print(f"after sleep {delay}s: 600 MB touched in {dt:.2f} CPU s", flush=True)
    del x
