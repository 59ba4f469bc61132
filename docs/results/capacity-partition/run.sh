#!/usr/bin/env bash
# Capacity-aware partitioning: --capacities 2,1,1,1 against the uniform run, on
# amazon-computers and on a 5M-edge synthetic graph (k = 4), then every algorithm on
# amazon-computers, then the structural clustering's volume cap (table.md's last table).
# Run from the repository root: bash docs/results/capacity-partition/run.sh
set -euo pipefail
HERE=docs/results/capacity-partition
WORK=${WORK:-/tmp/capacity-partition}   # inputs and outputs (not committed)
mkdir -p "$WORK" "$HERE/inspect"

[ -d "$WORK/amazon-computers" ] || asepr import gnn-npz /work/shared/datasets/amazon-computers/*.npz "$WORK/amazon-computers" -q
[ -d "$WORK/synth-5m" ] || asepr synth "$WORK/synth-5m" --nodes 500000 --edges 5000000 --seed 0 -q

run() {  # run NAME INPUT FLAGS...: partition, keep `asepr inspect --json`
  local name=$1 input=$2; shift 2
  asepr partition "$WORK/$input" "$WORK/out/$name" -k 4 --overwrite -q "$@"
  asepr inspect "$WORK/out/$name" --json > "$HERE/inspect/$name.json"
}

for graph in amazon-computers synth-5m; do
  run "$graph-uniform" "$graph"
  run "$graph-capacity" "$graph" --capacities 2,1,1,1
  run "$graph-own-uniform" "$graph" --no-two-phase-fallback
  run "$graph-own-capacity" "$graph" --no-two-phase-fallback --capacities 2,1,1,1
done
asepr verify "$WORK/out/synth-5m-capacity" > "$HERE/verify-synth-5m-capacity.txt"

for algo in hash dbh greedy hdrf 2ps-l 2ps-hdrf metis; do
  run "amazon-computers-$algo-uniform" amazon-computers --algo "$algo"
  run "amazon-computers-$algo-capacity" amazon-computers --algo "$algo" --capacities 2,1,1,1
done
for algo in asep hdrf; do  # the hybrid: about a third of the graph held in memory
  run "amazon-computers-$algo-hybrid-uniform" amazon-computers --algo "$algo" --memory-budget 2M --no-two-phase-fallback
  run "amazon-computers-$algo-hybrid-capacity" amazon-computers --algo "$algo" --memory-budget 2M \
    --no-two-phase-fallback --capacities 2,1,1,1
done

python "$HERE/clustering_cap.py" "$WORK" > "$HERE/clustering-cap.csv"
python "$HERE/table.py" "$HERE" > "$HERE/table.md"
