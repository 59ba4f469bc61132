#!/bin/bash
# Link prediction on amazon-computers (k = 4) with batches of 1,024 edges for every strategy
# (2026-12-01/02). Usage: run.sh WORK [stream]
# WORK is train-link-scaffold/run.sh's directory (ac-in, ac-asep-k4 made there; its batch-4,096
# runs are the comparison). Two streams side by side on 2 cores: run.sh WORK a & run.sh WORK b; then run.sh WORK c.
# Metrics are deterministic per seed.
set -e
W=${1:?usage: run.sh WORK [a|b|c]}; S=${2:-abc}; mkdir -p $W/ac-b1024; cd /tmp
ac() { name=$1; shift
  [[ $(cat $W/ac-b1024/$name/metrics.csv 2>/dev/null | wc -l) == 17 ]] && return  # complete already
  if [[ $name == central* ]]; then src=(--centralized $W/ac-in); else src=($W/ac-asep-k4 --nproc 4); fi
  asepr train "${src[@]}" --task link --rounds 16 --local-epochs 5 --eval-every 5 --threads 1 --batch-size 1024 \
    --feature-projection 256 -q --run-dir $W/ac-b1024/$name "$@"; }
if [[ $S == *a* ]]; then ac central-s0 --seed 0; ac central-s2 --seed 2; fi
if [[ $S == *b* ]]; then for s in 0 1 2; do ac scaffold-s$s --reconcile avg+scaffold --seed $s; done; ac central-s1 --seed 1; fi
# Exploratory, after a and b: ASEPR with batches of 256 per rank, seed 0 (4 ranks: the global batch of centralized's 1,024).
if [[ $S == *c* ]]; then ac scaffoldb256-s0 --reconcile avg+scaffold --batch-size 256 --seed 0; fi
