cd /tmp

asepr bench train --datasets amazon-computers -k 4 --strategies centralized avg avg+scaffold avg+kd avg+con avg+corr avg+kd+con --partitioners 2ps-hdrf hdrf hash metis --rounds 15 --local-epochs 2 --feature-projection 256 --out OUT --keep-runs
