#!/bin/sh
# Peak RSS of the hybrid harness on the 50M-edge synthetic graph at k = 16: pure streaming
# (budget 0) against the small budget (10 bytes per edge) and the mixed=no variant.
# Usage: sh docs/results/hybrid/memory.sh [INPUT] [OUTDIR]   (default /work/scratch/s50, this dir)
set -e
INPUT=${1:-/work/scratch/s50}
OUT=${2:-docs/results/hybrid}
for budget in stream small; do
  /usr/bin/time -v python docs/results/hybrid/hybrid_bench.py --input "$INPUT" --ks 16 --budgets $budget \
    > "$OUT/memory-$budget.txt" 2>&1
done
grep -H "RF \|Maximum resident\|Elapsed\|User time\|System time" "$OUT"/memory-*.txt
