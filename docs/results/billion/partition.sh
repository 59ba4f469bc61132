# asepr partition on the 1B-edge synthetic graph, then verify, then one trainer rank's load.
cd /tmp
. /work/main/.venv/bin/activate
B=/work/scratch/billion
git -C /work/main log --oneline -1
df -h /work | tail -1
asepr partition $B/in $B/out -k 32 --dry-run --plan-rf 4 > $B/plan-rf4.txt 2>&1
asepr partition $B/in $B/out -k 32 --dry-run > $B/plan-default.txt 2>&1
flock -s /work/scratch/cpu.lock python /work/main/docs/results/billion/measure.py partition $B/partition.json -- asepr partition $B/in $B/out -k 32 -v --plan-rf 4
df -h /work | tail -1; du -sh $B/out
flock -s /work/scratch/cpu.lock python /work/main/docs/results/billion/measure.py verify $B/verify.json -- asepr verify $B/out
flock -s /work/scratch/cpu.lock python /work/main/docs/results/billion/measure.py load $B/load.json -- python -c "
import sys, time
from asepr.training.graph.data import load_local_graph
t=time.perf_counter(); g=load_local_graph('$B/out', [0]); print('rank 0 loaded partition 0:', g.num_nodes, 'nodes', g.own_edges.shape[1], 'edges', round(time.perf_counter()-t,1), 's')
"
