"""Reconciliation of heterogeneous local models (docs/design.md#reconciliation-rounds).

* :mod:`~asepr.training.reconcile.average`: ``avg``, the weighted FedAvg of the local models
  (one all_reduce of one flat buffer).
* :mod:`~asepr.training.reconcile.server`: the server optimiser of the averaged update
  (FedAvg, FedAvgM, FedAdam).
* :mod:`~asepr.training.reconcile.distill`: ``kd``, ensemble distillation of the average
  towards the mean output of all local models (after FedDF).
* :mod:`~asepr.training.reconcile.contrastive`: ``con``, the cross-layer contrastive loss
  added to local training (after MOON).
* :mod:`~asepr.training.reconcile.correct`: ``corr``, correction steps of the global model on
  mini-batches with whole-graph neighbourhoods (after LLCG).
* :mod:`~asepr.training.reconcile.scaffold`: ``scaffold``, control variates that correct
  each local gradient towards the global objective (after SCAFFOLD).
* :mod:`~asepr.training.reconcile.reconciler`: the order in which a round applies them.
"""

from asepr.training.reconcile.average import weighted_average
from asepr.training.reconcile.contrastive import contrastive_loss
from asepr.training.reconcile.correct import GlobalCorrection
from asepr.training.reconcile.distill import distill
from asepr.training.reconcile.reconciler import Reconciler
from asepr.training.reconcile.scaffold import ControlVariates
from asepr.training.reconcile.server import SERVER_OPTIMIZERS, ServerOptimizer

__all__ = ["SERVER_OPTIMIZERS", "ControlVariates", "GlobalCorrection", "Reconciler", "ServerOptimizer", "contrastive_loss", "distill",
           "weighted_average"]
