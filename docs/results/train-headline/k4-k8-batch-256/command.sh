# Assembled 2026-12-01 08:05: the avg+scaffold runs are new (the default now weighs short
# segments, --scaffold-weigh-segments); centralized, avg and fds are those of ../../train-scaffold/headline-ungated/,
# copied into OUT/runs and reused by bench train (its reuse check: same config, scaffold settings ignored
# for strategies without scaffold).
# The new runs, seeds 0 1 2, on the cached default partitions (C):
asepr bench train --datasets coauthor-physics amazon-computers -k 8 --strategies avg+scaffold --seeds 0 1 2 \
    --rounds 15 --local-epochs 2 --feature-projection 256 --scaffold-weigh-segments --cache C --keep-runs --out K8
asepr bench train --datasets coauthor-physics amazon-computers -k 4 --strategies avg+scaffold --seeds 0 1 2 \
    --rounds 15 --local-epochs 2 --feature-projection 256 --scaffold-weigh-segments --cache C --keep-runs --out K4
# then, with K4/runs, K8/runs and ../../train-scaffold/headline-ungated's runs copied into OUT/runs:
asepr bench train --datasets amazon-computers coauthor-physics -k 4 8 --strategies centralized avg avg+scaffold fds \
    --seeds 0 1 2 --rounds 15 --local-epochs 2 --feature-projection 256 --cache C --keep-runs --out OUT
