#!/usr/bin/env bash
# Exact evaluation's memory and traffic against training's, per rank, on the synthetic
# graph of 2M nodes and 20M edges at k = 4: one round of one epoch, then the exact
# evaluation of the global model (a seeded sample of the validation and test masters,
# `--eval-sample`, default 5,000 per split).
#
#   docs/results/eval-memory/run.sh [WORK]      (WORK: scratch folder, default /tmp/eval-memory)
#
# NODES and EDGES override the size, EVAL_SAMPLE the sample (0: every master). An input
# and partition output already in WORK (WORK/in, WORK/out) are reused when REUSE=1.
# Writes WORK/table.md (printed too).
set -euo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
WORK="${1:-/tmp/eval-memory}"
NODES="${NODES:-2000000}"
EDGES="${EDGES:-20000000}"
EVAL_SAMPLE="${EVAL_SAMPLE:-5000}"
mkdir -p "$WORK"
if [ "${REUSE:-0}" != 1 ] || [ ! -d "$WORK/out" ]; then
    nice -n 10 asepr synth "$WORK/in" --nodes "$NODES" --edges "$EDGES" --classes 10 --dim 64 --homophily 0.7 \
        --overwrite -q
    nice -n 10 asepr partition "$WORK/in" "$WORK/out" -k 4 --overwrite --no-progress -q
fi
/usr/bin/time -v nice -n 10 asepr train "$WORK/out" --nproc 4 --rounds 1 --local-epochs 1 --run-dir "$WORK/run" \
    --eval-sample "$EVAL_SAMPLE" --overwrite 2> "$WORK/time.txt"
python "$HERE/table.py" "$WORK/run" | tee "$WORK/table.md"
