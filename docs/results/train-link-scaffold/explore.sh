#!/bin/bash
# Exploratory runs quoted in README.md, run by hand on run.sh's WORK directory (one command
# each, not part of table.md). Usage: explore.sh WORK
set -e
W=${1:?usage: explore.sh WORK}; cd /tmp
# A server learning rate of 2 (FedAvg extrapolated) on Cora, seeds 0-2.
for s in 0 1 2; do asepr train $W/cora-asep-k4 --nproc 4 --task link --rounds 20 --local-epochs 10 --eval-every 10 \
  --threads 1 -q --run-dir $W/explore/cora/slr2-s$s --reconcile avg+scaffold --server-lr 2 --seed $s; done
# Batches of 1,024 edges on amazon-computers, seed 0, ASEPR and centralized side by side
# (first run stopped after 40 epochs; rerun in full beside the centralized one, which was
# stopped before it finished; their metrics.csv are in metrics-explore/).
asepr train --centralized $W/ac-in --task link --rounds 16 --local-epochs 5 --eval-every 5 --threads 1 \
  --batch-size 1024 --feature-projection 256 -q --run-dir $W/explore/ac/centralb1024-s0 --seed 0 &
asepr train $W/ac-asep-k4 --nproc 4 --task link --rounds 16 --local-epochs 5 --eval-every 5 --threads 1 \
  --batch-size 1024 --feature-projection 256 -q --run-dir $W/explore/ac/scaffoldb1024-s0 --reconcile avg+scaffold --seed 0
wait
