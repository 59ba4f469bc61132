#!/bin/bash
# The k = 16 tuning runs, one at a time under `nice -n 10`, one seed, on the TUNING graphs
# amazon-photo and coauthor-cs (not the report graph coauthor-physics). Each writes
# OUT/DATASET/RUN/{train.md,train.parquet,train_rounds.parquet}; collect.py prints the table.
# The headline protocol: 15 rounds x 2 local epochs, features projected to 256, exact evaluation.
OUT=${OUT:-k16}
run() {  # run NAME DATASET STRATEGIES... -- FLAGS...
  name=$1; ds=$2; shift 2
  strats=(); while [ $# -gt 0 ] && [ "$1" != "--" ]; do strats+=("$1"); shift; done; shift
  nice -n 10 asepr bench train --datasets "$ds" -k 16 --strategies "${strats[@]}" --rounds 15 --local-epochs 2 \
    --feature-projection 256 --seed 0 --out "$OUT/$ds/$name" --cache "$OUT/cache/$ds" --keep-runs "$@"
}
run base amazon-photo centralized avg+scaffold --
run base coauthor-cs centralized avg+scaffold --
for ds in amazon-photo coauthor-cs; do run bs64 $ds avg+scaffold -- --batch-size 64; done
for ds in amazon-photo coauthor-cs; do run lr02 $ds avg+scaffold -- --lr 0.02; done
for ds in amazon-photo coauthor-cs; do run fedadam $ds avg+scaffold -- --server-opt fedadam; done
for ds in amazon-photo coauthor-cs; do run corr $ds avg+scaffold+corr --; done
for ds in amazon-photo coauthor-cs; do run sync5 $ds avg+scaffold -- --sync-every 5; done
for ds in amazon-photo coauthor-cs; do run slr2 $ds avg+scaffold -- --server-lr 2; done
python collect.py "$OUT"
