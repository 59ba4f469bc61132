"""``asepr bench``: the benchmarks, each a side-by-side comparison in one run.

One module per benchmark: :mod:`~asepr.workflows.bench.partition` (every partitioner),
:mod:`~asepr.workflows.bench.train` (training strategies and partitioners, with its tables in
:mod:`~asepr.workflows.bench.train_report` and the time-to-accuracy view in
:mod:`~asepr.workflows.bench.protocol`), :mod:`~asepr.workflows.bench.ingest` (ingest against a full
repartition), :mod:`~asepr.workflows.bench.scale` (end-to-end partition speed and memory against
|E|), :mod:`~asepr.workflows.bench.read` (a store's load) and :mod:`~asepr.workflows.bench.suite`
(``asepr bench all``). What they all write (machine description, tables, figures) is
:mod:`~asepr.workflows.bench.tables`. The commands that parse the flags are
:mod:`asepr.workflows.commands_bench`.
"""
