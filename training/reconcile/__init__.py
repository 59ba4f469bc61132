"""Reconciliation of heterogeneous local models (docs/design.md#reconciliation-rounds).

* :mod:`~training.reconcile.average`: ``avg``, the weighted FedAvg of the local models
  (one all_reduce of one flat buffer).
* :mod:`~training.reconcile.server`: the server optimiser of the averaged update
  (FedAvg, FedAvgM, FedAdam).
* :mod:`~training.reconcile.distill`: ``kd``, ensemble distillation of the average
  towards the mean output of all local models (after FedDF).
* :mod:`~training.reconcile.contrastive`: ``con``, the cross-layer contrastive loss
  added to local training (after MOON).
* :mod:`~training.reconcile.correct`: ``corr``, correction steps of the global model on
  mini-batches with whole-graph neighbourhoods (after LLCG).
* :mod:`~training.reconcile.scaffold`: ``scaffold``, control variates that correct
  each local gradient towards the global objective (after SCAFFOLD).
* :mod:`~training.reconcile.reconciler`: the order in which a round applies them.
"""

from training.reconcile.average import weighted_average
from training.reconcile.contrastive import contrastive_loss
from training.reconcile.correct import GlobalCorrection
from training.reconcile.distill import distill
from training.reconcile.reconciler import Reconciler
from training.reconcile.scaffold import ControlVariates
from training.reconcile.server import SERVER_OPTIMIZERS, ServerOptimizer

__all__ = ["SERVER_OPTIMIZERS", "ControlVariates", "GlobalCorrection", "Reconciler", "ServerOptimizer", "contrastive_loss", "distill",
           "weighted_average"]
