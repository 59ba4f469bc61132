# The ablation of 2026-12-01 11:20: every reconciliation component and every partitioner,
# amazon-computers k = 4, seed 0, on today's partitions and today's default
# (avg+scaffold with --sync-every 10 and --scaffold-weigh-segments). Wrote train.md,
# train.parquet, train_rounds.parquet and the plots here; the machine was loaded by other
# training runs, so the seconds are not comparable (accuracies, epochs and bytes are exact).
cd /tmp
asepr bench train --datasets amazon-computers -k 4 --strategies centralized avg avg+scaffold avg+kd avg+con avg+corr avg+kd+con --partitioners 2ps-hdrf hdrf hash metis --rounds 15 --local-epochs 2 --feature-projection 256 --out OUT --keep-runs
