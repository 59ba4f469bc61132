"""The round loop: local training, then reconciliation, then evaluation, round after round.

- :mod:`~asepr.training.loop.distributed`: process-group setup and the reconciliation rounds;
- :mod:`~asepr.training.loop.local`: E local epochs (or N steps) on the rank's own graph;
- :mod:`~asepr.training.loop.rounds`: the round bookkeeping both trainers share (threads,
  metrics rows, early stopping).

Imports every other room of :mod:`asepr.training`.
"""
