cd /tmp
export PYTHONPATH=/work/wt-h
/usr/bin/time -v /work/main/.venv/bin/python -m workflows bench train --datasets amazon-computers coauthor-physics -k 4 8 --strategies centralized avg avg+scaffold fds --seeds 0 1 2 --rounds 15 --local-epochs 2 --feature-projection 256 --out /work/scratch/headline/out --cache /work/scratch/cache --keep-runs
