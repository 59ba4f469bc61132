#!/bin/bash
# The k = 32 runs on coauthor-physics, one at a time under `nice -n 10`: the default strategy
# (avg+scaffold, --batch-size auto) with the README's headline protocol, 15 rounds x 2 local
# epochs, features projected to 256, exact evaluation every round, as ../train-k16/commands.sh
# runs k = 16. Seed 0, then seeds 1 and 2. Each run writes
# OUT/coauthor-physics/RUN/{train.md,train.parquet,train_rounds.parquet}; the memory of the
# machine and of the ranks is sampled beside it by mem_watch.py (OUT/coauthor-physics/RUN.mem.txt).
# The centralized runs compared against are those of ../train-k16/ (same graph, same protocol,
# same seeds): their outputs are linked in as OUT/coauthor-physics/{central,central-s12} before
# collecting, so that ../train-k16/collect.py reads both. Run from this folder; OUT and K16 are
# the output roots of this script and of ../train-k16/commands.sh.
OUT=${OUT:-k32}
K16=${K16:-k16}
run() {  # run NAME -- FLAGS...
  name=$1; shift 2
  mkdir -p "$OUT/coauthor-physics"; echo "$(date -u +%FT%TZ) start $name" >&2
  setsid nice -n 10 asepr bench train --datasets coauthor-physics -k 32 --strategies avg+scaffold --rounds 15 \
    --local-epochs 2 --feature-projection 256 --seed 0 --out "$OUT/coauthor-physics/$name" \
    --cache "$OUT/cache/coauthor-physics" --keep-runs "$@" &
  python mem_watch.py $! > "$OUT/coauthor-physics/$name.mem.txt"
  wait $!; echo "$(date -u +%FT%TZ) done $name rc=$?" >&2
}
run auto --
run auto-s12 -- --seeds 1 2
for c in central central-s12; do ln -sfn "$(realpath "$K16/coauthor-physics/$c")" "$OUT/coauthor-physics/$c"; done
python collect.py "$OUT"
python ../train-k16/collect.py "$OUT"  # the time-to-accuracy table (modelled cluster time)
