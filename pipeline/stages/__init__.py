"""The partitioning stages, one module each (docs/design.md#data-flow).

``degrees`` (②, Dask), ``attr_cluster`` / ``attr_column`` (③, attribute clusters),
``attr_lift`` (how much attributes explain edges), ``struct_cluster`` (④, streaming
communities), ``mapping`` (⑤, community → partition), ``masters`` and ``metrics``
(after the assignment), and ``metis`` (the offline reference's vertex partition).
The assignment kernel itself is :mod:`asepr.pipeline.assign`.
"""
