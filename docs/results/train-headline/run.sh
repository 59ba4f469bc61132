#!/usr/bin/env bash
# The training results of this folder: the default (avg+scaffold on ASEP partitions)
# against centralized, fds and the default on 2PS-HDRF partitions at k = 16 and 32, the
# default at k = 4 and 8, and the seed's reconciliation terms at k = 16, with the
# headline protocol (--rounds 15 --local-epochs 2 --feature-projection 256, 30 epochs).
#
#   docs/results/train-headline/run.sh WORK [DATASETS]
#
# WORK holds the imported graphs and partitions (WORK/cache) and one `bench train` report
# per launch (WORK/GRAPH-NAME). Launches that share a report directory reuse its finished
# runs (bench train's reuse of a run of the same configuration): the centralized runs of
# the k = 16 launch are linked into the k = 4/8 one. Then collect.py prints tables.md and
# asepr inspect --diagnose writes diagnostics/.
set -euo pipefail
WORK=${1:?usage: run.sh WORK [DATASETS]}
export ASEPR_DATASETS=${2:-${ASEPR_DATASETS:-$(cd "$(dirname "$0")/../../../.." && pwd)/shared/datasets}}
HERE=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$WORK/cache"

bench() {  # bench GRAPH NAME "K..." "SEEDS" STRATEGY... [-- FLAGS]
    local graph=$1 name=$2 ks=$3 seeds=$4 strategies=()
    shift 4
    while [[ $# -gt 0 && $1 != -- ]]; do strategies+=("$1"); shift; done
    [[ ${1:-} == -- ]] && shift
    # shellcheck disable=SC2086
    asepr bench train --datasets "$graph" -k $ks --seeds $seeds --strategies "${strategies[@]}" \
        --rounds 15 --local-epochs 2 --feature-projection 256 --threads 1 --cache "$WORK/cache" \
        --out "$WORK/$graph-$name" --keep-runs "$@"
}

for graph in amazon-photo coauthor-cs coauthor-physics; do  # tuning graphs, and a report graph
    bench "$graph" k16 16 "0 1 2" centralized avg+scaffold fds -- --partitioners asep 2ps-hdrf
done
bench amazon-computers k16 "16 32" "0 1 2" centralized avg+scaffold fds -- --partitioners asep 2ps-hdrf
mkdir -p "$WORK/amazon-computers-k48/runs/amazon-computers"
for seed in 0 1 2; do  # the k = 16 launch's centralized runs, reused
    ln -sfn "$WORK/amazon-computers-k16/runs/amazon-computers/centralized-s$seed" \
        "$WORK/amazon-computers-k48/runs/amazon-computers/centralized-s$seed"
done
bench amazon-computers k48 "4 8" "0 1 2" centralized avg+scaffold
bench amazon-computers kdcon16 16 0 avg+scaffold+kd avg+scaffold+con avg+scaffold+kd+con
bench amazon-computers con16 16 "1 2" avg+scaffold+con
bench coauthor-physics con16 16 "0 1 2" avg+scaffold+con

# fds at k = 4 and 8: the runs of k4-k8-batch-256/ (fds's configuration does not depend on
# the ASEPR trainers' batch rule); the same protocol.
python "$HERE/collect.py" "$WORK"/amazon-photo-k16 "$WORK"/coauthor-cs-k16 "$HERE/k4-k8-batch-256=fds" \
    "$WORK"/amazon-computers-k16 "$WORK"/coauthor-physics-k16 "$WORK"/amazon-computers-k48 \
    "$WORK"/amazon-computers-kdcon16 "$WORK"/*-con16 > "$HERE/tables.md"
mkdir -p "$HERE/diagnostics" "$HERE/reports"
for part in "$WORK"/cache/{amazon-computers,coauthor-physics}-{asep,2ps-hdrf}-k{16,32}; do
    [[ -d $part ]] && asepr inspect "$part" --diagnose --json > "$HERE/diagnostics/$(basename "$part").json"
done
python "$HERE/collect.py" --diagnostics "$HERE"/diagnostics/*.json >> "$HERE/tables.md"
for report in "$WORK"/*-k16 "$WORK"/*-k48 "$WORK"/*-kdcon16 "$WORK"/*-con16; do  # the reports, without the runs
    mkdir -p "$HERE/reports/$(basename "$report")"
    cp "$report"/train.md "$report"/*.parquet "$report"/*.png "$HERE/reports/$(basename "$report")/" 2>/dev/null || true
done
