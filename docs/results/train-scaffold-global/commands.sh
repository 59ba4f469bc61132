#!/bin/bash
# The scripts that produced these runs, in the order they ran. $WORK (the scratch directory of
# the runs' outputs and logs) and $TREE (a checkout with tail-weight.patch applied) were set by hand.

# ---- run.sh
# usage: run.sh NAME CACHE DATASETS... -- FLAGS...
name=$1; cache=$2; shift 2
ds=(); while [ "$1" != "--" ]; do ds+=("$1"); shift; done; shift
cd /tmp
: > $WORK/$name.log
PYTHONPATH=/work/wt-ctl flock -s /work/scratch/cpu.lock /work/main/.venv/bin/python -m workflows bench train \
  --datasets "${ds[@]}" -k 8 --strategies avg+scaffold --rounds 15 --local-epochs 2 --feature-projection 256 \
  --cache $cache --out $WORK/$name "$@" >> $WORK/$name.log 2>&1
echo "rc=$?" >> $WORK/$name.log

# ---- tune.sh
# usage: tune.sh TAG FLAGS...   (tuning graphs: coauthor-cs amazon-photo, then facebook-pagepage; k=8 seeds 0 1)
tag=$1; shift
H=$WORK
$H/run.sh tune-$tag /work/scratch/train/alpha/cache0.5 coauthor-cs amazon-photo -- --seeds 0 1 "$@"
$H/run.sh fb-$tag /work/scratch/lead/cache facebook-pagepage -- --seeds 0 1 "$@"

# ---- hl.sh
# usage: hl.sh NAME K STRATEGIES -- FLAGS...   (report graphs, seeds 0 1 2, runs kept and reused)
name=$1; k=$2; strat=$3; shift 4
cd /tmp
PYTHONPATH=/work/wt-ctl flock -s /work/scratch/cpu.lock /work/main/.venv/bin/python -m workflows bench train \
  --datasets amazon-computers coauthor-physics -k $k --strategies $strat --seeds 0 1 2 --rounds 15 --local-epochs 2 \
  --feature-projection 256 --cache /work/scratch/train/cache --out $WORK/$name --keep-runs \
  "$@" >> $WORK/$name.log 2>&1
echo "rc=$?" >> $WORK/$name.log

# ---- queue1.sh
H=$WORK
while kill -0 16195 2>/dev/null; do sleep 5; done
$H/run.sh diag-global-full-clip0 /work/scratch/train/cache coauthor-physics -- --seeds 0 --scaffold-control global --scaffold-batches 0 --scaffold-clip 0
$H/run.sh diag-global-b10 /work/scratch/train/cache coauthor-physics -- --seeds 0 --scaffold-control global --scaffold-batches 10
$H/tune.sh global-full-clip0 --scaffold-control global --scaffold-batches 0 --scaffold-clip 0
$H/tune.sh global-b10 --scaffold-control global --scaffold-batches 10

# ---- queue2.sh
H=$WORK
while kill -0 18049 2>/dev/null; do sleep 5; done
# Does today's code reproduce the path baseline of the tuning table? (coauthor-cs seed 0: 0.939130 there)
$H/run.sh check-path /work/scratch/train/alpha/cache0.5 coauthor-cs -- --seeds 0 --scaffold-control path

# ---- queue3.sh
H=$WORK
while kill -0 20386 2>/dev/null; do sleep 5; done
B10="--scaffold-control global --scaffold-batches 10"
FULL="--scaffold-control global --scaffold-batches 0"
$H/hl.sh headline-b10 8 avg+scaffold -- $B10
$H/hl.sh headline-full 8 avg+scaffold -- $FULL
$H/hl.sh headline-b10 4 avg+scaffold -- $B10
$H/hl.sh headline-b10 "4 8" "centralized avg avg+scaffold fds" -- $B10
$H/hl.sh headline-full 4 avg+scaffold -- $FULL
$H/hl.sh headline-full "4 8" "centralized avg avg+scaffold fds" -- $FULL

# ---- queue4.sh
H=$WORK
while kill -0 26980 2>/dev/null; do sleep 5; done
B10="--scaffold-control global --scaffold-batches 10"
FULL="--scaffold-control global --scaffold-batches 0"
$H/hl.sh headline-full 8 "centralized avg avg+scaffold fds" -- $FULL
$H/hl.sh headline-b10 4 avg+scaffold -- $B10
$H/hl.sh headline-b10 "4 8" "centralized avg avg+scaffold fds" -- $B10

# first: run.sh diag-global-full /work/scratch/train/cache coauthor-physics -- --seeds 0 --scaffold-control global --scaffold-batches 0
# then: tune.sh global-full --scaffold-control global --scaffold-batches 0
# queue3 was stopped after its second line; queue4 ran the rest.

# ---- tail.sh (diagnostic)
# DIAGNOSTIC (uncommitted patch docs/results/train-scaffold-global/tail-weight.patch applied in $TREE):
# path estimate, a segment of s steps enters c_r with weight s/10.
cd /tmp
for ds in coauthor-physics amazon-computers; do
PYTHONPATH=$TREE flock -s /work/scratch/cpu.lock /work/main/.venv/bin/python -m workflows bench train \
  --datasets $ds -k 8 --strategies avg+scaffold --seeds 0 --rounds 15 --local-epochs 2 --feature-projection 256 \
  --cache /work/scratch/train/cache --out $WORK/diag-tail-$ds >> $WORK/diag-tail-$ds.log 2>&1
echo "rc=$?" >> $WORK/diag-tail-$ds.log
done

# ---- tail2.sh (diagnostic)
# DIAGNOSTIC (patch tail-weight.patch in $TREE): report cells k = 8 seeds 1 2, then the tuning graphs.
cd /tmp
B="/work/main/.venv/bin/python -m workflows bench train -k 8 --strategies avg+scaffold --rounds 15 --local-epochs 2 --feature-projection 256"
run() { name=$1; shift
  PYTHONPATH=$TREE flock -s /work/scratch/cpu.lock $B "$@" --out $WORK/$name >> $WORK/$name.log 2>&1
  echo "rc=$?" >> $WORK/$name.log; }
run tail-report-seeds-1-2 --datasets coauthor-physics amazon-computers --seeds 1 2 --cache /work/scratch/train/cache
run tune-tail --datasets coauthor-cs amazon-photo --seeds 0 1 --cache /work/scratch/train/alpha/cache0.5
run fb-tail --datasets facebook-pagepage --seeds 0 1 --cache /work/scratch/lead/cache

# headline-b10-k4: the bench over the kept amazon-computers k=4 runs of headline-b10 (reuse only) to write their table

# ---- tail3.sh (diagnostic; tail2.sh was stopped after its first run)
# DIAGNOSTIC (patch tail-weight.patch in $TREE): the tuning graphs, in parallel with tail2's first run.
cd /tmp
B="/work/main/.venv/bin/python -m workflows bench train -k 8 --strategies avg+scaffold --rounds 15 --local-epochs 2 --feature-projection 256"
run() { name=$1; shift
  PYTHONPATH=$TREE flock -s /work/scratch/cpu.lock $B "$@" --out $WORK/$name >> $WORK/$name.log 2>&1
  echo "rc=$?" >> $WORK/$name.log; }
run fb-tail --datasets facebook-pagepage --seeds 0 1 --cache /work/scratch/lead/cache &
run tune-tail --datasets amazon-photo coauthor-cs --seeds 0 1 --cache /work/scratch/train/alpha/cache0.5
wait
