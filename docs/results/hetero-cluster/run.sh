#!/usr/bin/env bash
# Four ranks on amazon-photo, one of them declared three times slower (modelled time):
# the uniform cluster, synchronous rounds, capacity-aware steps (speeds measured, and
# declared) and the deadline, over five seeds, with the centralized run of each seed as
# the target's reference.
#
#   docs/results/hetero-cluster/run.sh WORK [DATASETS]
#
# WORK receives the input, the partitions and the run directories; the runs' metrics.csv
# and run.json are copied to raw/ beside this script and collect.py writes table.md.
set -euo pipefail
WORK=${1:?usage: run.sh WORK [DATASETS]}
DATASETS=${2:-$(cd "$(dirname "$0")/../../../.." && pwd)/shared/datasets}
HERE=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$WORK" && cd "$WORK"
[ -d photo-in ] || asepr import gnn-npz "$DATASETS"/amazon-photo/*.npz photo-in -q
[ -d photo-k4 ] || asepr partition photo-in photo-k4 -k 4 -q --no-progress
PROTOCOL=(--rounds 15 --local-epochs 2 --feature-projection 256)
SLOW=(--slowdown 1,1,1,3)   # rank 3 declared 3x slower: its CPU seconds count three times
for seed in 0 1 2 3 4; do
    [ -f "runs/central-s$seed/metrics.csv" ] || asepr train --centralized photo-in "${PROTOCOL[@]}" --seed "$seed" \
        --run-dir "runs/central-s$seed" --overwrite -q --no-progress
    while read -r name flags; do
        # shellcheck disable=SC2086
        [ -f "runs/$name-s$seed/metrics.csv" ] || asepr train photo-k4 --nproc 4 "${PROTOCOL[@]}" --seed "$seed" \
            $flags --run-dir "runs/$name-s$seed" --overwrite -q --no-progress
    done <<LIST
a-uniform
b-sync ${SLOW[*]}
c-capacity ${SLOW[*]} --speeds measure
c-declared ${SLOW[*]} --speeds 1,1,1,0.333
d-deadline ${SLOW[*]} --deadline 1
LIST
done
for run in runs/*/; do
    mkdir -p "$HERE/raw/$(basename "$run")"
    cp "$run/metrics.csv" "$run/run.json" "$HERE/raw/$(basename "$run")/"
done
python "$HERE/collect.py" "$HERE/raw" > "$HERE/table.md"
cat "$HERE/table.md"
