#!/usr/bin/env bash
# 600 MB of new files written with and without O_DIRECT (direct.txt), in WORK.
set -euo pipefail
WORK="${WORK:-/tmp}"
{ /usr/bin/time -f "O_DIRECT: %e s wall, %S s sys" dd if=/dev/zero of="$WORK/ddtest" bs=4M count=150 oflag=direct
  rm -f "$WORK/ddtest"
  /usr/bin/time -f "buffered: %e s wall, %S s sys" dd if=/dev/zero of="$WORK/ddtest" bs=4M count=150
  rm -f "$WORK/ddtest"; } 2>&1 | grep -v records
