"""The rank's data: its own partition store(s) as a graph, and how it is sampled.

- :mod:`~asepr.training.graph.data`: the local graph as a PyG ``Data``;
- :mod:`~asepr.training.graph.sampler`: the numba neighbour sampler behind PyG's ``BaseSampler``;
- :mod:`~asepr.training.graph.pyg_store`: a partition store as PyG's ``FeatureStore`` and
  ``GraphStore``;
- :mod:`~asepr.training.graph.replica_routing`: where each replica's master is;
- :mod:`~asepr.training.graph.hashing`: splitmix64, for per-vertex seeded choices.

Imports :mod:`asepr.storage` and :mod:`asepr.training.group`.
"""
