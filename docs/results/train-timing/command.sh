cd /tmp

asepr bench train --datasets amazon-computers coauthor-physics -k 4 8 --strategies centralized avg+scaffold fds --seeds 0 --rounds 15 --local-epochs 2 --feature-projection 256 --out OUT --keep-runs
