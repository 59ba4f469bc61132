#!/usr/bin/env bash
# The products-like benchmark: a synthetic graph the size of ogbn-products (2.4M nodes,
# 60M undirected edges, 100 features, 47 classes, OGB's 8 / 2 / 90 split), partitioned
# at k = 4 and 8, then centralized, the default strategy and fds trained side by side
# under one time-to-accuracy protocol.
#
#   docs/results/products-like/run.sh [WORK]    (WORK: scratch folder, default /tmp/products-like)
#
# Steps (each skipped when its output is already in WORK, so a stopped run resumes):
#   1. asepr synth, timed by /usr/bin/time -v (WORK/synth.time);
#   2. asepr partition at k = 4 and 8 into the benchmark's cache, timed (WORK/partition-kK.time);
#   3. mlp.py: the features-alone baseline (WORK/mlp.json);
#   4. asepr bench train: centralized, avg+scaffold (the default) and fds at k = 4 and 8
#      (WORK/report: train.md, train.parquet, train_rounds.parquet), one seed.
# Every process runs under nice -n 10. Homophily 0.3 and noise 3.5 make the features alone
# weak (mlp.json) while the neighbourhood tells the class.
set -euo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
WORK="${1:-/tmp/products-like}"
IN="$WORK/products-like"
CACHE="$WORK/cache"
mkdir -p "$WORK" "$CACHE"
if [ ! -f "$IN/meta.json" ]; then
    /usr/bin/time -v nice -n 10 asepr synth "$IN" --nodes 2400000 --edges 60000000 --classes 47 --dim 100 \
        --homophily 0.3 --noise 3.5 --split 0.08,0.02,0.9 --overwrite 2> "$WORK/synth.time"
fi
for k in 4 8; do
    if [ ! -f "$CACHE/products-like-asep-k$k/manifest.json" ]; then
        /usr/bin/time -v nice -n 10 asepr partition "$IN" "$CACHE/products-like-asep-k$k" -k "$k" --overwrite \
            --no-progress 2> "$WORK/partition-k$k.time" | tee "$WORK/partition-k$k.log"
    fi
done
[ -f "$WORK/mlp.json" ] || nice -n 10 python "$HERE/mlp.py" "$IN" > "$WORK/mlp.json"
nice -n 10 asepr bench train --datasets "$IN" -k 4 8 --strategies centralized avg+scaffold fds \
    --cache "$CACHE" --out "$WORK/report" --keep-runs \
    --local-epochs 1 --max-epochs "${MAX_EPOCHS:-4}" --patience 3 --eval-sample 5000 --seed 0
