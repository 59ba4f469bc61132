#!/usr/bin/env bash
# The plan of `asepr partition` against the measured run, on every published dataset and
# on the synthetic graphs of `asepr bench scale` (|V| = |E| / 10, d = 32) at 1M, 5M and
# 20M edges; k = 8. Writes plan-vs-measured.csv beside this script.
#
#   ASEPR_DATASETS=/path/to/datasets bash docs/results/plan-accuracy/run.sh WORK_DIR
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
work="${1:?usage: run.sh WORK_DIR}"
data="${ASEPR_DATASETS:?set ASEPR_DATASETS to the published datasets folder}"
mkdir -p "$work"

import() {  # NAME FORMAT SRC [flags]: import once
  local name=$1 fmt=$2 src=$3
  shift 3
  [ -f "$work/in-$name/meta.json" ] || asepr import "$fmt" "$src" "$work/in-$name" -q "$@"
}
for name in cora amazon-photo amazon-computers coauthor-cs coauthor-physics; do
  import "$name" gnn-npz "$(ls "$data/$name"/*.npz | head -1)"
done
for name in tolokers squirrel; do
  import "$name" hetero-npz "$(ls "$data/$name"/*.npz | head -1)"
done
import facebook-pagepage musae "$data/facebook-pagepage"
import twitch-de musae "$data/twitch-de" --label-column mature

inputs=()
for name in cora amazon-photo amazon-computers coauthor-cs coauthor-physics tolokers squirrel \
            facebook-pagepage twitch-de; do
  inputs+=("$name=$work/in-$name")
done
for edges in 1000000 5000000 20000000; do
  name="synth-$((edges / 1000000))m"
  [ -f "$work/$name/meta.json" ] || asepr synth "$work/$name" --nodes $((edges / 10)) --edges "$edges" -q
  inputs+=("$name=$work/$name")
done

python "$here/measure.py" --work "$work/out" -k 8 --out "$here/plan-vs-measured.csv" "${inputs[@]}"
