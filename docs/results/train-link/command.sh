cd /tmp
asepr bench train --task link --datasets cora -k 4 --strategies centralized avg avg+scaffold --rounds 10 --local-epochs 10 --out OUT --keep-runs
