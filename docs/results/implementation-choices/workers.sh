#!/bin/bash
# Threads (the default on up to two cores) against a LocalCluster of two worker processes:
# `asepr partition -k 16` on the 20M- and 50M-edge synthetic graphs of `asepr bench scale`,
# one after the other, twice each, right after the scale run.
# Usage: bash workers.sh WORKDIR   (WORKDIR: bench scale's --workdir, holding synth-e*)
# Prints a Markdown table: wall seconds, CPU seconds (user + sys of the process tree), peak
# RSS of the largest process (GNU time's figure; the worker processes' own are not summed).
set -euo pipefail
W=$1
echo "| edges | --workers | run | wall_s | cpu_s | max_rss_gib | edges_per_s |"
echo "|---|---|---|---|---|---|---|"
for E in 20000000 50000000; do
  IN=$W/synth-e$E-v$((E / 10))-d32-c8-s1
  for run in 1 2; do
    for w in 0 2; do
      OUT=$W/workers-out-e$E-w$w
      rm -rf "$OUT"
      /usr/bin/time -f "%e %U %S %M" -o "$W/time.txt" python -m asepr partition "$IN" "$OUT" -k 16 -q --workers $w > /dev/null
      read -r wall user sys rss < "$W/time.txt"
      python - "$E" "$w" "$run" "$wall" "$user" "$sys" "$rss" <<'PY'
import sys
e, w, run, wall, user, sys_, rss = sys.argv[1:]
e, wall = int(e), float(wall)
print(f"| {e:,} | {w} | {run} | {wall:.1f} | {float(user) + float(sys_):.1f} | {int(rss) / 2**20:.2f} | {e / wall:,.0f} |")
PY
      rm -rf "$OUT"
    done
  done
done
