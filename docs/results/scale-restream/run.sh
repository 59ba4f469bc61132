#!/usr/bin/env bash
# `asepr partition -k 16` end to end, side by side: the code before ASEP's restream (BASE, a
# checkout of that revision) and the installed package, alternating on the same synthetic
# inputs (`asepr bench scale --baseline`), with `asepr verify` of every output.
#
#   BASE=/path/to/checkout docs/results/scale-restream/run.sh WORK
#
# The runs here used BASE = a worktree of commit 97b85f5 (the one-namespace layout, before
# the restream was merged).
set -euo pipefail
WORK=${1:?usage: BASE=TREE run.sh WORK}
BASE=${BASE:?set BASE to a checkout of the revision to compare with}
HERE=$(cd "$(dirname "$0")" && pwd)
asepr bench scale --sizes 20000000 --pairs 2 --baseline "$BASE" --verify --out "$HERE/run-20m" --workdir "$WORK"
asepr bench scale --sizes 100000000 --pairs 1 --baseline "$BASE" --verify --out "$HERE/run-100m" --workdir "$WORK"
