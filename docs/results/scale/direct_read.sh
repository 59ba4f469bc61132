#!/usr/bin/env bash
# Reading a 160 MB file (the 20M-edge graph's decoded src+dst copy) with O_DIRECT and
# through the page cache (first read: new cache pages; second: cached). dd's own report
# and /usr/bin/time's wall and system seconds.
set -euo pipefail
WORK="${WORK:-/tmp/asepr-scale-work}"
mkdir -p "$WORK/direct-read"
f="$WORK/direct-read/f"
rm -f "$f"
dd if=/dev/urandom of="$f" bs=4M count=40 oflag=direct status=none
sync
echo 3 > /proc/sys/vm/drop_caches 2>/dev/null || true
for i in 1 2 3; do
  /usr/bin/time -f "O_DIRECT read: %e s wall, %S s sys" dd if="$f" of=/dev/null bs=4M iflag=direct 2>&1 | tail -2
done
/usr/bin/time -f "buffered, first read: %e s wall, %S s sys" dd if="$f" of=/dev/null bs=4M 2>&1 | tail -2
/usr/bin/time -f "buffered, second read: %e s wall, %S s sys" dd if="$f" of=/dev/null bs=4M 2>&1 | tail -2
rm -rf "$WORK/direct-read"
