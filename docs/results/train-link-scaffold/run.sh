#!/bin/bash
# The link-prediction runs of README.md ("Link prediction", 2026-12-01).
# Usage: run.sh WORK   (scratch directory, ~1 GB). Metrics are deterministic per seed.
# Both graphs at k = 4 on the default partitions (asep; on these graphs it keeps its
# two-phase fallback's assignment), every strategy with the exact evaluation on the same
# schedule and the same 100 negatives per held-out edge drawn among every vertex.
set -e
W=${1:?usage: run.sh WORK}; mkdir -p $W/cora $W/ac; cd /tmp
H=$(cd "$(dirname "$0")" && pwd)
asepr import gnn-npz $ASEPR_DATASETS/cora $W/cora-in --overwrite -q
asepr import gnn-npz $ASEPR_DATASETS/amazon-computers $W/ac-in --overwrite -q
asepr partition $W/cora-in $W/cora-asep-k4 -k 4 -q
asepr partition $W/ac-in $W/ac-asep-k4 -k 4 -q
# Cora: 200 epochs (20 rounds x 10), evaluated every 10 epochs; default batch (256 edges).
cora() { name=$1; shift; if [[ $name == central* ]]; then src=(--centralized $W/cora-in); else src=($W/cora-asep-k4 --nproc 4); fi
  asepr train "${src[@]}" --task link --rounds 20 --local-epochs 10 --eval-every 10 --threads 1 -q --run-dir $W/cora/$name "$@"; }
# amazon-computers: 80 epochs (16 rounds x 5), evaluated every 5; batches of 4,096 edges, features projected to 256.
ac() { name=$1; shift; if [[ $name == central* ]]; then src=(--centralized $W/ac-in); else src=($W/ac-asep-k4 --nproc 4); fi
  asepr train "${src[@]}" --task link --rounds 16 --local-epochs 5 --eval-every 5 --threads 1 --batch-size 4096 \
    --feature-projection 256 -q --run-dir $W/ac/$name "$@"; }
for s in 0 1 2; do
  cora central-s$s --seed $s; cora scaffold-s$s --reconcile avg+scaffold --seed $s; cora avg-s$s --reconcile avg --seed $s
  ac central-s$s --seed $s; ac scaffold-s$s --reconcile avg+scaffold --seed $s; ac avg-s$s --reconcile avg --seed $s
done
python $H/collect.py $W > $H/table.md
