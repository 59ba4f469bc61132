#!/usr/bin/env bash
# The trainers on a GPU beside the CPU, in one command:
#   Cora cut into 2 and into 4 partitions, and amazon-computers into 4, each trained by k
#   ranks with --device cuda and with --device cpu, and Cora by the centralized baseline.
# Ranks share the GPUs when there are more ranks than GPUs (the process group is then gloo,
# its buffers staged through host memory); with a GPU per rank it is NCCL. It passes when
# every run beats the majority class by far, every GPU run records device cuda, and each
# GPU run's exact test accuracy agrees with the CPU run's of the same case within two
# points (the same seed; float sums differ in order). It prints a table of seconds per
# epoch on the GPU beside the CPU and writes it to WORK/gpu-check.md.
#
#   docs/results/gpu/check.sh [WORK]     (WORK: scratch folder, default /tmp/asepr-gpu-check)
#
# Without a GPU visible to torch (or with ASEPR_GPU_CHECK=cpu) it runs the CPU path alone,
# anywhere; ASEPR_GPU_CHECK_CASES=cora keeps the Cora cases only. Datasets come from
# $ASEPR_DATASETS (default: the shared datasets folder beside the repository).
set -euo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
REPO="$(cd "$HERE/../../.." && pwd)"
WORK="${1:-/tmp/asepr-gpu-check}"
DATA="${ASEPR_DATASETS:-$REPO/../shared/datasets}"
mkdir -p "$WORK"
GPUS=$(python -c "import torch; print(torch.cuda.device_count())")
if [ "${ASEPR_GPU_CHECK:-}" = "cpu" ] || [ "$GPUS" = "0" ]; then DEVICES=(cpu); else DEVICES=(cuda cpu); fi
echo "asepr gpu check: torch sees $GPUS GPU(s); devices: ${DEVICES[*]}"
CASES=("cora 2" "cora 4")
[ "${ASEPR_GPU_CHECK_CASES:-all}" = "cora" ] || CASES+=("amazon-computers 4")
FLAGS=(--rounds 3 --local-epochs 2 --hidden 64 --seed 1 --feature-projection 256 --overwrite -q)
for case in "${CASES[@]}"; do
  read -r name k <<<"$case"
  if [ ! -d "$WORK/$name-in" ]; then
    asepr import gnn-npz "$(ls "$DATA/$name"/*.npz | head -1)" "$WORK/$name-in" --overwrite -q
  fi
  asepr partition "$WORK/$name-in" "$WORK/$name-k$k" -k "$k" --overwrite --no-progress -q
  for device in "${DEVICES[@]}"; do
    asepr train "$WORK/$name-k$k" --nproc "$k" --device "$device" --run-dir "$WORK/runs/$name-k$k-$device" "${FLAGS[@]}"
  done
done
for device in "${DEVICES[@]}"; do
  asepr train --centralized "$WORK/cora-in" --device "$device" --run-dir "$WORK/runs/cora-central-$device" "${FLAGS[@]}"
done
python "$HERE/summarise.py" "$WORK"
