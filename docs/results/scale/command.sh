cd /tmp
asepr bench scale --sizes 5000000 20000000 50000000 100000000 --verify --out docs/results/scale --workdir WORK
# rerun 2026-12-01 02:23 to 02:29 at commit e60b096 (the two-phase fallback and alpha = beta = 0.5), alone on the machine (flock -x), load 1.3-3.6
