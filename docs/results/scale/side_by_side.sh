#!/usr/bin/env bash
# `asepr partition -k 16` of an earlier revision (BASE) and of the working
# tree, alternating, on the same inputs: /usr/bin/time's wall, CPU and peak RSS.
# Usage: BASE=REV side_by_side.sh SIZE_DIR PAIRS, REV the revision to compare with (the runs
# here used the code of 2026-12-02 03:21); WORK as in command.sh.
set -euo pipefail
REPO="$(git -C "$(dirname "$0")" rev-parse --show-toplevel)"
WORK="${WORK:-/tmp/asepr-scale-work}"
BASE="${BASE:?set BASE to the revision to compare with}"
TREE="$WORK/base-$BASE"
[ -d "$TREE" ] || git -C "$REPO" worktree add -f "$TREE" "$BASE" -q
input="$1"; pairs="$2"; out="$WORK/side-by-side-out"
run() {  # $1: label, $2: PYTHONPATH
  rm -rf "$out"
  (cd "$WORK" && PYTHONPATH="$2" /usr/bin/time -f "$1 wall %e s user %U s sys %S s peak %M KB" \
    python -m workflows partition "$input" "$out" -k 16 2>&1 >/dev/null | tail -1)
}
run "warm-up (base)" "$TREE" > /dev/null  # numba compiles the base tree's kernels once
for i in $(seq "$pairs"); do
  run "base" "$TREE"
  run "this tree" "$REPO"
done
rm -rf "$out"
