"""The per-rank table of ``run.sh``: each rank's peak RSS (VmHWM) at the end of the
round's training and after the exact evaluation, and the bytes of both.

    python docs/results/eval-memory/table.py RUN_DIR
"""

from __future__ import annotations

import sys

from asepr.training.rundir.checkpoint import RunDir


def main(run_dir: str) -> None:
    row = RunDir(run_dir).read_metrics()[-1]
    info = RunDir(run_dir).read_run_info()
    train = [float(v) for v in str(row["train_peak_rss_mib_ranks"]).split()]
    peak = [float(v) for v in str(row["peak_rss_mib_ranks"]).split()]
    epochs = float(row["epoch"])
    print("| rank | peak RSS after training (MiB) | peak RSS after evaluation (MiB) | evaluation / training |")
    print("|---|---|---|---|")
    for rank, (t, p) in enumerate(zip(train, peak)):
        print(f"| {rank} | {t:,.0f} | {p:,.0f} | {p / t:.3f} |")
    print(f"| all | {sum(train):,.0f} | {sum(peak):,.0f} | max {row['eval_peak_ratio_max']:.3f} |")
    print()
    print("| traffic per rank | mean (MB) | largest rank (MB) |")
    print("|---|---|---|")
    print(f"| training, one epoch | {float(row['bytes_sent_cum']) / epochs / 1e6:.2f} | "
          f"{float(row['bytes_sent_cum_max']) / epochs / 1e6:.2f} |")
    total, total_max = float(row["eval_bytes_sent_round"]), float(row["eval_bytes_sent_round_max"])
    setup, setup_max = float(row.get("eval_setup_bytes", 0.0)), float(row.get("eval_setup_bytes_max", 0.0))
    print(f"| evaluation, one round (first: with the one-time setup) | {total / 1e6:.2f} | {total_max / 1e6:.2f} |")
    print(f"| of which the one-time setup (routing, degrees, sample, receptive field) | {setup / 1e6:.2f} | "
          f"{setup_max / 1e6:.2f} |")
    print(f"| evaluation, one round without the setup | {float(row.get('eval_scoring_bytes', total)) / 1e6:.2f} | "
          f"{float(row.get('eval_scoring_bytes_max', total_max)) / 1e6:.2f} |")
    print()
    if "val_scored" in row:
        print(f"scored: {int(row['val_scored']):,} of {int(row['val_split']):,} validation masters "
              f"(95 % interval {float(row['val_ci_low']):.4f}-{float(row['val_ci_high']):.4f}), "
              f"{int(row['test_scored']):,} of {int(row['test_split']):,} test masters "
              f"({float(row['test_ci_low']):.4f}-{float(row['test_ci_high']):.4f})")
    print(f"val {row['metric']} {float(row['val']):.4f}, test {float(row['test']):.4f}; training "
          f"{float(row['train_seconds']):.1f} s, evaluation {float(row['eval_seconds']):.1f} s; "
          f"{info['world_size']} ranks, placement {float(info['placement_rows_mean']):,.0f} rows per rank (mean)")


if __name__ == "__main__":
    main(sys.argv[1])
