cd /tmp
. /work/main/.venv/bin/activate
W=/work/scratch/v100
asepr synth $W/in --nodes 10000000 --edges 100000000 --dim 32 --classes 8 --seed 1 -q
asepr partition $W/in $W/out -k 16 -q
python /work/main/docs/results/billion/measure.py verify-default $W/verify-default.json -- asepr verify $W/out
python /work/main/docs/results/billion/measure.py verify-1gib $W/verify-1gib.json -- asepr verify $W/out --memory-budget 1
