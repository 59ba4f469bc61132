"""``kd``: ensemble distillation of the averaged model (after FedDF).

The local models θ_r are all_gathered (one flat buffer each; a GNN is small). On its
own master nodes (labelled or not), each rank computes the mean output of all W local
models, then fine-tunes a student that starts at θ_avg for S Adam steps on::

    KL( softmax(mean_r f_θr(x) / T) ‖ softmax(f_student(x) / T) ) · T²

(for link prediction the same with a sigmoid over edge logits). The students are then
averaged with the FedAvg weights into the new global model.
"""

from __future__ import annotations

import copy

import torch

from training.comm import Comm
from training.models import flatten, unflatten_into
from training.reconcile.average import weighted_average

__all__ = ["distill"]


def distill(model, local_flat: torch.Tensor, avg_flat: torch.Tensor, task, config, comm: Comm,
            weight: float, generator: torch.Generator) -> tuple[torch.Tensor, float]:
    """Return ``(θ_g, final KD loss on this rank)`` after ensemble distillation.

    ``model`` is a scratch module of the run's architecture (its weights are overwritten).
    """
    flats = comm.all_gather(local_flat.to(torch.float32).contiguous(), "model")
    task.kd_setup(generator)
    scratch = copy.deepcopy(model)
    scratch.eval()
    with torch.no_grad():
        teacher = None
        for f in flats:
            unflatten_into(scratch, f)
            out = task.kd_outputs(scratch)
            teacher = out if teacher is None else teacher + out
        teacher = teacher / len(flats)
    student = scratch
    unflatten_into(student, avg_flat)
    loss_value = 0.0
    if config.kd_steps and teacher.numel():
        # The student is trained in eval mode (no dropout): it matches a deterministic target.
        opt = torch.optim.Adam(student.parameters(), lr=config.kd_lr)
        for _ in range(config.kd_steps):
            opt.zero_grad()
            loss = task.kd_loss(task.kd_outputs(student), teacher, config.kd_temperature)
            loss.backward()
            opt.step()
            loss_value = float(loss.detach())
    return weighted_average(flatten(student), weight, comm), loss_value
