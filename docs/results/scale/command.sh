#!/usr/bin/env bash
# The scale figures of 2026-12-02. Run from anywhere with the project installed.
# WORK holds the synthetic inputs (kept and reused between runs).
set -euo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
WORK="${WORK:-/tmp/asepr-scale-work}"
for run in run-1 run-2 run-3 run-4; do
  asepr bench scale --sizes 5000000 20000000 50000000 --verify --out "$HERE/$run" --workdir "$WORK"
done
asepr bench scale --sizes 100000000 --verify --out "$HERE/run-100m" --workdir "$WORK"
# Fresh pages after free page reporting (fpr.txt): 600 MB touched again after 0-6 s.
python "$HERE/fpr.py" > "$HERE/fpr.txt"
# The CPU profile of one 20M-edge partition run (perf-20m*.txt):
rm -rf "$WORK/perf-out"
/usr/bin/time -f "wall %e s, user %U s, sys %S s, max RSS %M KB" -o "$HERE/perf-20m-time.txt" \
  perf record -F 499 -o "$WORK/perf.data" -- \
  asepr partition "$WORK/synth-e20000000-v2000000-d32-c8-s1" "$WORK/perf-out" -k 16 > /dev/null
perf report -i "$WORK/perf.data" --no-children --sort dso,sym --stdio | grep -E "^ +[0-9]+\.[0-9]+%" \
  | head -40 | sed 's/ *$//' > "$HERE/perf-20m.txt"
WORK="$WORK" "$HERE/direct_read.sh" > "$HERE/direct_read.txt"
