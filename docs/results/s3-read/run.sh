#!/usr/bin/env bash
# A trainer's load of its partition, from the local disk and from an S3-compatible server
# on loopback, side by side in one `asepr bench read` run.
#
#   docs/results/s3-read/run.sh [WORK]    (WORK default /tmp/s3read; needs `pip install ".[test]"`)
#
# 1. a 20M-edge synthetic graph (2M nodes, d = 64), partitioned locally into 4 stores (hash);
# 2. `rclone serve s3` over WORK/served on 127.0.0.1, and the committed output copied to
#    s3://bench/out (each file one PUT, as any copy tool writes them);
# 3. `asepr bench read` of partitions 0 and 1 from both, alternating, best of 3 per row,
#    under `nice -n 10`; it writes read.md next to this script;
# 4. ab.py: the same partitions from the server read one array after another and with all
#    the arrays' reads in flight together, alternating; it writes ab.md.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
WORK=${1:-/tmp/s3read}
mkdir -p "$WORK"
[ -f "$WORK/in/meta.json" ] || nice -n 10 asepr synth "$WORK/in" --nodes 2000000 --edges 20000000 --dim 64 --classes 10
[ -f "$WORK/out/manifest.json" ] || nice -n 10 asepr partition "$WORK/in" "$WORK/out" -k 4 --algo hash --no-progress

. "$HERE/../loopback-s3.sh"  # PORT, SERVER, OPTIONS
python - "$WORK/out" "$OPTIONS" <<'PY'
import json, sys, s3fs
fs = s3fs.S3FileSystem(**json.loads(sys.argv[2]))
if not fs.exists("bench/out/manifest.json"):
    fs.put(sys.argv[1] + "/", "bench/out", recursive=True)
PY
nice -n 10 asepr bench read "$WORK/out" s3://bench/out --parts 0 1 --repeat 3 \
    --storage-options "$OPTIONS" --out "$HERE"
{ nice -n 10 python "$HERE/ab.py" s3://bench/out 0 "$OPTIONS" 3 "$SERVER" "$WORK/out"; echo
  nice -n 10 python "$HERE/ab.py" s3://bench/out 1 "$OPTIONS" 3 "$SERVER" "$WORK/out"; } > "$HERE/ab.md"
