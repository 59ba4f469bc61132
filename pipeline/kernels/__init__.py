"""Helpers of the numba streaming kernels: bit tricks on the uint64 replica bitsets
(:mod:`~asepr.pipeline.kernels.bitset`) and memory-latency helpers, software prefetch and
aligned rows (:mod:`~asepr.pipeline.kernels.prefetch`).

Imports numpy and numba only.
"""
