#!/usr/bin/env bash
# Digests of the edge -> partition ids (asep, 2ps-hdrf, hdrf; k = 8) on Cora and
# Amazon-Computers, in memory and in the store: assignment_digests.sh OUTPUT_FILE.
# Run from the project root with the project's environment active.
set -euo pipefail
work=${WORK:-/tmp/asepr-digests}
datasets=${ASEPR_DATASETS:-../shared/datasets}
mkdir -p "$work"
for d in cora amazon-computers; do
  [ -d "$work/$d" ] || asepr import gnn-npz "$datasets/$d" "$work/$d"
done
python "$(dirname "$0")/assignment_digests.py" 8 "$work/cora" "$work/amazon-computers" > "$1"
