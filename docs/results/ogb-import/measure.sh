#!/bin/sh
# Peak RSS of `asepr import ogb` on synthetic datasets in OGB's node-property layout
# (8 features per node), varying the edges at 1M nodes and the nodes at 5M edges.
# Peak RSS is GNU time's "Maximum resident set size".
# Usage: sh docs/results/ogb-import/measure.sh SCRATCH
set -e
SCRATCH=${1:-/tmp/ogb-import}
for SIZE in "1000 5000" "1000000 5000000" "1000000 20000000" "4000000 5000000"; do
  set -- $SIZE
  DIR="$SCRATCH/n$1-e$2"
  python docs/results/ogb-import/make_fixture.py "$DIR" --nodes "$1" --edges "$2" --dim 8
  /usr/bin/time -v asepr import ogb "$DIR/ogbn_synth" "$DIR/in" --overwrite 2> "$DIR.time"
  echo "nodes $1 edges $2"; grep -E "Maximum resident|Elapsed" "$DIR.time"
done
