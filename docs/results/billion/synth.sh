cd /tmp
. /work/main/.venv/bin/activate
flock -s /work/scratch/cpu.lock nice -n 5 /usr/bin/time -v asepr synth /work/scratch/billion/in --nodes 50000000 --edges 1000000000 --dim 16 --classes 16 --seed 1 -v
df -h /work | tail -1
du -sh /work/scratch/billion/in
