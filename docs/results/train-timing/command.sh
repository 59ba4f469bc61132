#!/bin/bash
# Time to target side by side on the idle machine under the default of 2026-12-01 08:05: seed 0, centralized, the default (avg+scaffold, weighed segments) and fds.
cd /tmp
flock -x /work/scratch/cpu.lock /work/main/.venv/bin/python -m workflows bench train --datasets amazon-computers coauthor-physics -k 4 8 --strategies centralized avg+scaffold fds --seeds 0 --rounds 15 --local-epochs 2 --feature-projection 256 --out /work/scratch/lead/timing/out --cache /work/scratch/train/cache --keep-runs
