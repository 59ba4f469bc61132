"""The plan of a partition run, before it starts: what each stage holds and writes
(:mod:`~asepr.pipeline.planning.needs`), what the plan is computed from (a sample of the
input: feature codec ratio, replication factor; :mod:`~asepr.pipeline.planning.plan_inputs`),
what the machine has free (:mod:`~asepr.pipeline.planning.machine`), and the memory and disk
plan that ``asepr partition`` prints and enforces (:mod:`~asepr.pipeline.planning.plan`).

Imports :mod:`asepr.storage` and the rest of :mod:`asepr.pipeline`; nothing of training.
"""
