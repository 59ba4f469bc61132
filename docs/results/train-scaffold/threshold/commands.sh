#!/bin/bash
# Tuning graphs first (coauthor-cs, amazon-photo, facebook-pagepage, k = 8, seeds 0 1), then the report cells.
T=/work/scratch/lead/thr
F="--scaffold-shrink --scaffold-threshold 0.3"
B="/work/main/.venv/bin/python -m asepr bench train --strategies avg+scaffold --rounds 15 --local-epochs 2 --feature-projection 256 --keep-runs"
cd /tmp
flock -s /work/scratch/cpu.lock $B --datasets coauthor-cs amazon-photo facebook-pagepage -k 8 --seeds 0 1 --cache /work/scratch/lead/tcache $F --out $T/tune > $T/tune.log 2>&1
flock -s /work/scratch/cpu.lock $B --datasets coauthor-physics amazon-computers -k 8 --seeds 0 1 2 --cache /work/scratch/train/cache $F --out $T/k8 > $T/k8.log 2>&1
flock -s /work/scratch/cpu.lock $B --datasets coauthor-physics amazon-computers -k 4 --seeds 0 1 2 --cache /work/scratch/train/cache $F --out $T/k4 > $T/k4.log 2>&1
echo done >> $T/tune.log
