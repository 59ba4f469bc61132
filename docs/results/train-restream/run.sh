#!/usr/bin/env bash
# The default trainer (avg+scaffold) on ASEP's partitions with the restream (the partitioner's
# default since this measurement), under the training headline's protocol
# (docs/results/train-headline: --rounds 15 --local-epochs 2 --feature-projection 256,
# --threads 1), seeds 0-2, k = 16. The 2PS-HDRF and centralized cells it is set against
# are the headline's (2PS-HDRF's partitions and the trainer are unchanged, and a run is
# deterministic per seed).
#
#   docs/results/train-restream/run.sh WORK [GRAPHS]
set -euo pipefail
WORK=${1:?usage: run.sh WORK [GRAPHS]}
GRAPHS=${2:-amazon-computers coauthor-physics amazon-photo}
export ASEPR_DATASETS=${ASEPR_DATASETS:-$(cd "$(dirname "$0")/../../../.." && pwd)/shared/datasets}
HERE=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$WORK/cache" "$HERE/reports"
for graph in $GRAPHS; do
    asepr bench train --datasets "$graph" -k 16 --seeds 0 1 2 --strategies avg+scaffold --partitioners asep \
        --rounds 15 --local-epochs 2 --feature-projection 256 --threads 1 --cache "$WORK/cache" \
        --out "$WORK/$graph-k16"
    mkdir -p "$HERE/reports/$graph-k16"
    cp "$WORK/$graph-k16"/train.md "$WORK/$graph-k16"/*.parquet "$WORK/$graph-k16"/*.png "$HERE/reports/$graph-k16/"
    asepr inspect "$WORK/cache/$graph-asep-k16" --diagnose --json > "$HERE/reports/$graph-k16/diagnose.json" || true
done
