"""The ``asepr`` command line: orchestration only, no algorithms."""

import os

# Before numpy loads OpenBLAS: the commands run their own threads (Dask tasks, the
# streams), and BLAS's idle worker threads spin beside them on the few matrix products
# of k-means (0.5 CPU s of a 15 CPU s partition run of 20M edges on 2 cores). A user's
# own setting wins.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

__all__: list[str] = []
