"""The hetero-cluster table from the runs' metrics.csv (``python collect.py RAW``).

For each seed, the target is 99 % of that seed's centralized best validation accuracy;
a run's time to it is the modelled cluster time (``asepr.training.protocol.time_to_fraction``:
the slowest rank's CPU seconds of each round, rank 3's counted three times where it is
declared slower, plus the busiest rank's bytes at 10 Gbit/s and 50 µs a message).
"""

from __future__ import annotations

import csv
import statistics
import sys
from pathlib import Path

from asepr.training.protocol import time_to_fraction

RUNS = {"a-uniform": "(a) uniform cluster", "b-sync": "(b) rank 3 3x slower, synchronous rounds",
        "c-capacity": "(c) rank 3 3x slower, capacity-aware (`--speeds measure`)",
        "c-declared": "(c') rank 3 3x slower, capacity-aware (`--speeds 1,1,1,0.333`)",
        "d-deadline": "(d) rank 3 3x slower, `--deadline 1`"}
SEEDS = (0, 1, 2, 3, 4)
GBIT = 10


def rows(raw: Path, name: str) -> list[dict]:
    out = []
    with open(raw / name / "metrics.csv") as fh:
        for row in csv.DictReader(fh):
            out.append({k: (float(v) if k in ("val", "test", "compute_s_cum_max", "bytes_sent_cum_max",
                                              "messages_sent_cum_max", "eval_bytes_sent_round_max",
                                              "test_at_best_val", "elapsed_s") else v) for k, v in row.items()})
    return out


def reached(run: list[dict], target: float) -> int | None:
    return next((int(r["round"]) for r in run if r["val"] >= target), None)


def main(raw: Path) -> None:
    targets = {s: 0.99 * max(r["val"] for r in rows(raw, f"central-s{s}")) for s in SEEDS}
    table = {}
    for name in RUNS:
        per_seed = []
        for s in SEEDS:
            run = rows(raw, f"{name}-s{s}")
            per_seed.append({"time": time_to_fraction(run, targets[s], GBIT), "round": reached(run, targets[s]),
                             "test_best": run[-1]["test_at_best_val"], "final": run[-1]["test"],
                             "total": run[-1]["compute_s_cum_max"],
                             "steps": run[-1].get("local_steps_ranks", "")})
        table[name] = per_seed
    base = statistics.mean(p["time"] for p in table["a-uniform"])
    print(f"Target: 99 % of each seed's centralized best validation accuracy "
          f"({', '.join(f'{targets[s]:.4f}' for s in SEEDS)} for seeds {', '.join(map(str, SEEDS))}). Times are "
          f"modelled (CPU seconds, rank 3 declared 3x slower in (b)-(d); {GBIT} Gbit/s); means over the seeds.\n")
    print("| run | modelled s to 99 % | ×(a) | round reached (per seed) | test at best val | final test | "
          "modelled s, 15 rounds | rank steps in the last round |")
    print("|---|---|---|---|---|---|---|---|")
    for name, label in RUNS.items():
        p = table[name]
        times = [x["time"] for x in p]
        mean = statistics.mean(times) if None not in times else None
        cell = "not reached" if mean is None else f"{mean:.1f}"
        ratio = "" if mean is None else f"{mean / base:.2f}"
        print(f"| {label} | {cell} | {ratio} | {', '.join(str(x['round']) for x in p)} | "
              f"{statistics.mean(x['test_best'] for x in p):.4f} | {statistics.mean(x['final'] for x in p):.4f} | "
              f"{statistics.mean(x['total'] for x in p):.1f} | {p[0]['steps'] or '36 36 36 36'} |")
    print("\nPer seed (test at best val / modelled s to 99 %):\n")
    for name, label in RUNS.items():
        cells = "; ".join(f"seed {s}: {x['test_best']:.4f} / "
                          f"{'not reached' if x['time'] is None else format(x['time'], '.1f')}"
                          for s, x in zip(SEEDS, table[name]))
        print(f"- {label}: {cells}")
    sync = table["b-sync"]
    dead = table["d-deadline"]
    if None not in [x["time"] for x in sync + dead]:
        gain = statistics.mean(x["time"] for x in sync) / statistics.mean(x["time"] for x in dead)
        cost = statistics.mean(x["test_best"] for x in dead) - statistics.mean(x["test_best"] for x in sync)
        print(f"\nThe deadline against synchronous rounds with the same slow rank: {gain:.2f}x less modelled time to "
              f"99 %, {100 * cost:+.2f} points of test accuracy at the best validation point.")


if __name__ == "__main__":
    main(Path(sys.argv[1]))
