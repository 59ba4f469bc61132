"""Reconciliation of heterogeneous local models (DESIGN.md section 7).

* :mod:`~training.reconcile.average`: ``avg``, the weighted FedAvg of the local models
  (one all_reduce of one flat buffer).
* :mod:`~training.reconcile.distill`: ``kd``, ensemble distillation of the average
  towards the mean output of all local models (after FedDF).
* :mod:`~training.reconcile.contrastive`: ``con``, the cross-layer contrastive loss
  added to local training (after MOON).
"""

from training.reconcile.average import weighted_average
from training.reconcile.contrastive import contrastive_loss
from training.reconcile.distill import distill

__all__ = ["contrastive_loss", "distill", "weighted_average"]
