cd /tmp
asepr bench scale --sizes 5000000 20000000 50000000 100000000 --verify --out docs/results/scale --workdir WORK
bash docs/results/scale/workers.sh WORK > docs/results/scale/workers.md
# rerun 2026-12-01 07:02-07:09, alone on the machine (flock -x), after the speed changes
# (threads by default on 2 cores, concurrent fallback, threaded masters/metrics, decoded edge copy,
# concurrent node/edge validation, radix group-by in route, sliced node gather)
