"""Evaluation of the global model on the whole graph.

- :mod:`~asepr.training.evaluation.inference`: exact full-neighbourhood inference over a
  vertex-cut partition, with :mod:`~asepr.training.evaluation.exact_convs`, the algebra of
  each convolution;
- :mod:`~asepr.training.evaluation.eval_sample`: a seeded sample of the evaluation masters
  and the confidence interval of its metric;
- :mod:`~asepr.training.evaluation.ogb_eval`: the Open Graph Benchmark's evaluators.

Imports :mod:`asepr.storage`, :mod:`asepr.training.group` and :mod:`asepr.training.graph`.
"""
