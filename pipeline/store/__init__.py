"""From an assignment to committed Zarr stores (docs/design.md#output-format, docs/design.md#commit-protocol).

``route`` (⑦, spill edge and node rows per partition), ``finalize`` (⑧ ⑨, one
store per partition), ``commit`` (the commit protocol: staging, journal, recovery,
node map), ``output_dir`` (the output directory: created, checked, locked),
``run_record`` (a run's input identity, key and saved assignment, for resumption),
``write`` (an assignment's stores, written and committed), ``continuation`` (the
partitioner state that ingest continues from), ``tasks`` (running a stage's calls as
Dask tasks, timed). The whole ``asepr partition`` run is
:func:`asepr.pipeline.partition_run.partition_to_store`; ``asepr verify`` is the package
:mod:`asepr.pipeline.verify`.
"""
