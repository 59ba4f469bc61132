cd /tmp
. /work/main/.venv/bin/activate
B=/work/scratch/billion
while kill -0 6159 2>/dev/null; do sleep 5; done
df -h /work | tail -1; du -sh $B/out
git -C /work/main log --oneline -1
python /work/main/docs/results/billion/measure.py verify $B/verify.json -- asepr verify $B/out -v --memory-budget 4
python /work/main/docs/results/billion/measure.py load $B/load.json -- python -c "
import time
from asepr.training.graph.data import load_local_graph
t = time.perf_counter(); g = load_local_graph('$B/out', [0])
print('rank 0 loaded partition 0:', g.num_nodes, 'nodes,', g.own_edges.shape[1], 'edges,', g.x.shape, 'features in', round(time.perf_counter() - t, 1), 's')
"
cat $B/load.log
