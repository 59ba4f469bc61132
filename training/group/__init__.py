"""The process group: how a rank joins, where it computes and how it talks.

- :mod:`~asepr.training.group.comm`: the collectives, counting the bytes each rank sends;
- :mod:`~asepr.training.group.device`: ``--device`` and the group's backend;
- :mod:`~asepr.training.group.elastic`: a run that loses a machine continues on the survivors;
- :mod:`~asepr.training.group.capacity`: ranks of different speeds and their local steps.

Imports :mod:`asepr.storage` and :mod:`asepr.training.rundir`.
"""
