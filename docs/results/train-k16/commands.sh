#!/bin/bash
# The k = 16 runs, one at a time under `nice -n 10`: the candidates on the TUNING graphs
# amazon-photo and coauthor-cs, then the automatic batch size there and on the report graph
# coauthor-physics. Each writes
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

# Version 0.2.0, the automatic batch size (--batch-size auto, the default): each rank
# min(256, max(16, ceil(its training seeds / 4))). The training seeds per rank and the
# batches they resolve to, on the same partitions (the headline cells included):
for spec in "amazon-photo 16" "coauthor-cs 16" "coauthor-physics 4 8 16" "amazon-computers 4 8"; do
  set -- $spec; ds=$1; shift; python seeds_per_rank.py "$OUT/cache/$ds" "$ds" "$@"
done
# The tuning graphs with the new default:
for ds in amazon-photo coauthor-cs; do run auto $ds avg+scaffold --; done
# The report graph coauthor-physics (not tuned on): centralized and the default, seed 0,
# then seeds 1 and 2.
run central coauthor-physics centralized --
run auto coauthor-physics avg+scaffold --
run auto-s12 coauthor-physics avg+scaffold -- --seeds 1 2
run central-s12 coauthor-physics centralized -- --seeds 1 2
run b256 coauthor-physics avg+scaffold -- --batch-size 256  # the previous default, for comparison
# The one headline cell whose ranks resolve below 256 (amazon-computers, k = 8), 3 seeds:
run k8auto amazon-computers avg+scaffold -- -k 8 --seeds 0 1 2
run k8b256 amazon-computers avg+scaffold -- -k 8 --batch-size 256  # the previous default, same code, seed 0
python collect.py "$OUT" ../train-headline/train.parquet
