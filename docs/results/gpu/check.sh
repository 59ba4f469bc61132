#!/usr/bin/env bash
# The trainers on GPUs, in one command: Cora imported and cut into 2 partitions, trained by
# 2 ranks with --device cuda (NCCL), by 2 ranks with --device cpu (gloo) and by the
# centralized baseline with --device cuda. It passes when the GPU runs record device cuda,
# beat Cora's majority class (0.30) by far, and the 2-rank GPU run's exact evaluation
# agrees with the CPU run's within two points (the same seed; float sums differ in order).
#
#   docs/results/gpu/check.sh [WORK]     (WORK: scratch folder, default /tmp/asepr-gpu-check)
#
# Needs a machine with at least 2 GPUs visible to torch (one per rank) and a CUDA build of torch.
set -euo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
REPO="$(cd "$HERE/../../.." && pwd)"
WORK="${1:-/tmp/asepr-gpu-check}"
mkdir -p "$WORK"
python -c "import sys, torch; n = torch.cuda.device_count(); print(f'torch {torch.__version__}: {n} GPU(s)'); \
sys.exit(0 if n >= 2 else 'asepr gpu check: 2 GPUs needed (one per rank)')"
CORA="$REPO/../shared/datasets/cora"
asepr import gnn-npz "$(ls "$CORA"/*.npz | head -1)" "$WORK/in" --overwrite -q
asepr partition "$WORK/in" "$WORK/out" -k 2 --overwrite --no-progress -q
FLAGS=(--rounds 3 --local-epochs 2 --hidden 64 --seed 1 --overwrite -q)
asepr train "$WORK/out" --nproc 2 --device cuda --run-dir "$WORK/gpu" "${FLAGS[@]}"
asepr train "$WORK/out" --nproc 2 --device cpu --run-dir "$WORK/cpu" "${FLAGS[@]}"
asepr train --centralized "$WORK/in" --device cuda --run-dir "$WORK/central" "${FLAGS[@]}"
python - "$WORK" <<'PY'
import sys
from pathlib import Path

from training.checkpoint import RunDir

work = Path(sys.argv[1])
runs = {name: RunDir(work / name) for name in ("gpu", "cpu", "central")}
last = {name: run.read_metrics()[-1] for name, run in runs.items()}
for name, run in runs.items():
    device = run.read_run_info()["config"]["device"]
    row = last[name]
    print(f"{name:8s} device {device:4s} val {row['val']:.4f} test {row['test']:.4f} "
          f"train {row['train_seconds']:.1f} s eval {row['eval_seconds']:.1f} s")
assert runs["gpu"].read_run_info()["config"]["device"] == "cuda"
assert all(last[name]["test"] >= 0.65 for name in last), "a run did not learn"
assert abs(last["gpu"]["test"] - last["cpu"]["test"]) <= 0.02, "the GPU and CPU runs disagree"
print("asepr gpu check: passed")
PY
