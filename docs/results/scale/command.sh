cd /tmp
asepr bench scale --sizes 5000000 20000000 50000000 100000000 --verify --out docs/results/scale --workdir WORK
# run 2026-11-30 23:55 to 2026-12-01 00:02 at commit 55e0b94, alone on the machine (flock -x), load 1.4-2.5
