#!/usr/bin/env bash
# The two-phase fallback's cost: `asepr partition -k 16` on the 20M-edge synthetic graph
# with and without it, wall seconds, CPU seconds and peak RSS (/usr/bin/time -v), and the
# fallback stage's seconds from the manifest. Writes fallback-cost.md beside this script.
# Usage: bash docs/results/asep-tuning/fallback_cost.sh INPUT (e.g. from
#   asepr synth s20 --nodes 2000000 --edges 20000000 --dim 32 --seed 1)
set -euo pipefail
input=$1
here=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
out="$here/fallback-cost.md"
{
  echo "# The two-phase fallback's cost"
  echo
  echo "\`asepr partition $input OUT -k 16 -q [--no-two-phase-fallback]\`, run $(date -u '+%Y-%m-%d %H:%M') UTC."
  echo
  echo "| run | wall s | user+sys s | peak RSS MiB | fallback stage s | RF | kept |"
  echo "|---|---|---|---|---|---|---|"
} > "$out"
for flag in "" "--no-two-phase-fallback"; do
  /usr/bin/time -v asepr partition "$input" "$work/o" -k 16 -q --overwrite $flag 2> "$work/time.txt" > /dev/null
  python - "$work" "${flag:-fallback on}" >> "$out" <<'PY'
import json, re, sys
from pathlib import Path
work, name = Path(sys.argv[1]), sys.argv[2]
t = (work / "time.txt").read_text()
wall = re.search(r"Elapsed \(wall clock\) time \(h:mm:ss or m:ss\): (\S+)", t).group(1).split(":")
wall_s = sum(float(x) * 60 ** i for i, x in enumerate(reversed(wall)))
cpu = float(re.search(r"User time \(seconds\): (\S+)", t).group(1)) + float(re.search(r"System time \(seconds\): (\S+)", t).group(1))
rss = int(re.search(r"Maximum resident set size \(kbytes\): (\d+)", t).group(1)) / 1024
m = json.loads((work / "o" / "manifest.json").read_text())
metrics = m.get("metrics", {})
stage = m.get("timings", {}).get("two-phase fallback", float("nan"))
kept = metrics.get("two_phase_fallback", {}).get("chosen", "")
print(f"| {name} | {wall_s:.1f} | {cpu:.1f} | {rss:.0f} | {stage:.1f} | {metrics.get('replication_factor', float('nan')):.3f} | {kept} |")
PY
done
echo >> "$out"
echo "Peak RSS is /usr/bin/time's for the driver process (Dask workers are separate processes)." >> "$out"
cat "$out"
