#!/usr/bin/env bash
# The lost-machine rehearsal on amazon-photo (k = 4: two agents of two ranks each, sharing
# an rclone serve s3 store), the headline protocol, one agent killed by SIGKILL while
# round 6 of 15 is in flight; seeds 0, 1 and 2, or SEEDS. Each seed's summary line goes to
# elastic.jsonl.
#
#   [SEEDS="0 1 2"] docs/results/hetero-cluster/elastic.sh WORK [DATASETS]
set -euo pipefail
WORK=${1:?usage: elastic.sh WORK [DATASETS]}
DATASETS=${2:-$(cd "$(dirname "$0")/../../../.." && pwd)/shared/datasets}
HERE=$(cd "$(dirname "$0")" && pwd)
REPO=$(cd "$HERE/../../.." && pwd)
: > "$HERE/elastic.jsonl"
for seed in ${SEEDS:-0 1 2}; do
    rm -rf "$WORK/seed-$seed"
    bash "$REPO/examples/elastic-rehearsal.sh" "$WORK/seed-$seed" "$DATASETS"/amazon-photo/*.npz 4 15 5 -- \
        --local-epochs 2 --feature-projection 256 --seed "$seed" > "$WORK/seed-$seed.out"
    tail -1 "$WORK/seed-$seed.out" | tee -a "$HERE/elastic.jsonl"
    mkdir -p "$HERE/raw/elastic-s$seed"
    for run in whole lost; do
        cp "$WORK/seed-$seed/store/graphs/g/runs/$run/metrics.csv" "$HERE/raw/elastic-s$seed/$run-metrics.csv"
        cp "$WORK/seed-$seed/store/graphs/g/runs/$run/placement.json" "$HERE/raw/elastic-s$seed/$run-placement.json"
    done
    grep -hE "^round|WARNING training|asepr train: rank" "$WORK/seed-$seed"/node0/lost.log \
        > "$HERE/raw/elastic-s$seed/survivor.log" || true
done
