#!/usr/bin/env bash
# Exact evaluation's memory and traffic against training's, per rank, on the synthetic
# graph of 2M nodes and 20M edges at k = 4: one round of one epoch, then the exact
# evaluation of the global model (the validation and test masters).
#
#   docs/results/eval-memory/run.sh [WORK]      (WORK: scratch folder, default /tmp/eval-memory)
#
# NODES and EDGES override the size. Writes WORK/table.md (printed too).
set -euo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
WORK="${1:-/tmp/eval-memory}"
NODES="${NODES:-2000000}"
EDGES="${EDGES:-20000000}"
mkdir -p "$WORK"
nice asepr synth "$WORK/in" --nodes "$NODES" --edges "$EDGES" --classes 10 --dim 64 --homophily 0.7 --overwrite -q
nice asepr partition "$WORK/in" "$WORK/out" -k 4 --overwrite --no-progress -q
/usr/bin/time -v nice asepr train "$WORK/out" --nproc 4 --rounds 1 --local-epochs 1 --run-dir "$WORK/run" \
    --overwrite 2> "$WORK/time.txt"
python "$HERE/table.py" "$WORK/run" | tee "$WORK/table.md"
