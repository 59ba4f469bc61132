. /work/main/.venv/bin/activate
cd /tmp
P=${P:-/work/scratch/cache/cora-asep-k4}
O=/work/scratch/link
run() { name=$1; shift; rm -rf $O/$name; flock -s /work/scratch/cpu.lock asepr train $P --nproc 4 --task link --rounds 10 --local-epochs 10 --eval-every 10 --threads 1 -q --run-dir $O/$name "$@" > $O/$name.log 2>&1; echo "$name $(tail -1 $O/$name.log)"; }
for spec in "$@"; do eval run $spec; done
