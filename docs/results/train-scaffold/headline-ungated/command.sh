#!/bin/bash
# The headline on today's partitions with today's default (ungated avg+scaffold): every run
# already exists (centralized and fds from the headline of 2026-11-30, k = 8 avg and avg+scaffold from
# ../../asep-tuning/training/ on today's partitions, k = 4 avg from the gated run, k = 4 avg+scaffold ungated), so
# bench train reuses them and writes the report.
set -e
F=/work/scratch/lead/headline-final; G=/work/scratch/lead/headline; U=/work/scratch/lead/ungated-k4
mkdir -p $F/runs/amazon-computers $F/runs/coauthor-physics
for g in amazon-computers coauthor-physics; do
  for s in 0 1 2; do
    cp -rn $G/runs/$g/centralized-s$s $G/runs/$g/k4-fds-s$s $G/runs/$g/k8-fds-s$s $G/runs/$g/k4-avg-s$s $G/runs/$g/k8-avg-s$s $F/runs/$g/
    cp -rn $U/runs/$g/k4-avg-scaffold-s$s $F/runs/$g/
    cp -rn /work/scratch/train/k8/runs/$g/k8-avg-scaffold-s$s $F/runs/$g/
  done
done
cd /tmp
/work/main/.venv/bin/python -m asepr bench train --datasets amazon-computers coauthor-physics -k 4 8 --strategies centralized avg avg+scaffold fds --seeds 0 1 2 --rounds 15 --local-epochs 2 --feature-projection 256 --out $F --cache /work/scratch/train/cache --keep-runs 2>&1 | tee $F.log
