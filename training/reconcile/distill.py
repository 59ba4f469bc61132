"""``kd``: ensemble distillation of the averaged model (after FedDF).

The local models θ_r are all_gathered (one flat buffer each; a GNN is small). On its
own master nodes (labelled or not), each rank computes the mean output of all W local
models, then fine-tunes a student that starts at θ_avg for S Adam steps on::

    KL( softmax(mean_r f_θr(x) / T) ‖ softmax(f_student(x) / T) ) · T²

(for link prediction the same with a sigmoid over edge logits). The students are then
averaged with the FedAvg weights into the new global model. S = :data:`KD_STEPS`, T =
:data:`KD_TEMPERATURE` and the student's learning rate is the run's ``lr`` / 10: a
larger student rate moved the distilled model away from the average it starts at and
lost accuracy against plain ``avg`` (docs/results/train-tuning, "The distillation
student's learning rate"). ``kd`` did not help on the tuning graphs or in the ablation
(docs/results/train-ablation), so these are fixed settings.
"""

from __future__ import annotations

import copy

import torch

from asepr.training.group.comm import Comm
from asepr.training.models import flatten, unflatten_into
from asepr.training.reconcile.average import weighted_average

__all__ = ["KD_STEPS", "KD_TEMPERATURE", "distill"]

#: Student steps per round.
KD_STEPS = 10
#: Distillation temperature.
KD_TEMPERATURE = 2.0


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
    if teacher.numel():
        # The student is trained in eval mode (no dropout): it matches a deterministic target.
        opt = torch.optim.Adam(student.parameters(), lr=config.lr / 10)
        for _ in range(KD_STEPS):
            opt.zero_grad()
            loss = task.kd_loss(task.kd_outputs(student), teacher, KD_TEMPERATURE)
            loss.backward()
            opt.step()
            loss_value = float(loss.detach())
    return weighted_average(flatten(student), weight, comm), loss_value
