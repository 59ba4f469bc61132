"""From an assignment to committed Zarr stores (docs/design.md#output-format, docs/design.md#commit-protocol).

``route`` (⑦, spill edge and node rows per partition), ``finalize`` (⑧ ⑨, one
store per partition), ``commit`` (the commit protocol: staging, journal, recovery,
node map), ``write`` (the whole ``asepr partition`` commit), ``continuation`` (the
partitioner state that ingest continues from), ``tasks`` (running a stage's calls as
Dask tasks, timed) and ``verify`` (``asepr verify``, with its checks in
``verify_store`` (one read per store array: checksums, CSR), ``verify_edges`` (the
edge multiset: bucket counts and fingerprints), ``verify_nodes`` (node rows against the
input) and ``verify_state``).
"""
