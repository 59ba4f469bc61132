cd /tmp
asepr bench train --task link --datasets amazon-computers -k 4 --strategies centralized avg --partitioners asep hash --rounds 4 --local-epochs 5 --eval-every 5 --threads 1 --batch-size 4096 --feature-projection 256 --out OUT --keep-runs

# then, longer: 80 epochs of the default on each partition (partitions from the bench cache above)
for P in asep hash; do asepr train OUT/inputs/amazon-computers-$P-k4 --nproc 4 --task link --rounds 16 --local-epochs 5 --eval-every 5 --threads 1 --batch-size 4096 --feature-projection 256 -q --run-dir long-$P; done
