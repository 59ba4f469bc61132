"""The run directory's files: the config, per-round checkpoints and the metrics log
(:mod:`~asepr.training.rundir.checkpoint`), on a local disk or an object store
(:mod:`~asepr.training.rundir.run_files`).

Imports :mod:`asepr.storage` and :mod:`asepr.training.config`.
"""
