"""``asepr bench``: the benchmarks, each a side-by-side comparison in one run.

One module per benchmark: :mod:`~workflows.bench.partition` (every partitioner),
:mod:`~workflows.bench.train` (training strategies and partitioners, with its tables in
:mod:`~workflows.bench.train_report` and the time-to-accuracy view in
:mod:`~workflows.bench.protocol`), :mod:`~workflows.bench.ingest` (ingest against a full
repartition), :mod:`~workflows.bench.scale` (end-to-end partition speed and memory against
|E|), :mod:`~workflows.bench.read` (a store's load) and :mod:`~workflows.bench.suite`
(``asepr bench all``). What they all write (machine description, tables, figures) is
:mod:`~workflows.bench.tables`. The commands that parse the flags are
:mod:`workflows.commands_bench`.
"""
