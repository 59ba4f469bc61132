#!/bin/bash
# Time to target side by side on the idle machine: seed 0, the default (avg+scaffold) and fds
# (centralized seed 0 copied from the headline: it sets the target only).
flock -x /work/scratch/cpu.lock /work/main/.venv/bin/python -m workflows bench train --datasets amazon-computers coauthor-physics -k 4 8 --strategies centralized avg+scaffold fds --seeds 0 --rounds 15 --local-epochs 2 --feature-projection 256 --out /work/scratch/lead/timing --cache /work/scratch/train/cache --keep-runs
