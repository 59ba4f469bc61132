"""``asepr plot`` and ``asepr inspect --plot``: the PNGs are written where the user looks,
and each figure holds one line per run (or one bar per partition)."""

from __future__ import annotations

from pathlib import Path

import pytest

from asepr.pipeline.inputs.synth import SynthConfig, generate
from asepr.workflows.cli import main

pytest.importorskip("torch")

PNG = b"\x89PNG\r\n\x1a\n"


def _rows(scale: float, bytes_per_round: float) -> list[dict]:
    """Three evaluations as a trainer writes them (the columns the figures use)."""
    rows = []
    for r in (1, 2, 3):
        rows.append({"round": r, "epoch": 2 * r, "generation": 1, "metric": "accuracy", "eval_mode": "exact",
                     "loss": 1.0 / r, "val": scale * r / 4, "test": scale * r / 5, "train_seconds": 1.5,
                     "eval_seconds": 0.1, "elapsed_s": 1.5 * r, "eval_elapsed_s": 0.1 * r,
                     "compute_s_cum_max": 1.2 * r, "bytes_sent_round": bytes_per_round,
                     "bytes_sent_cum_max": bytes_per_round * r, "messages_sent_cum_max": 10 * r,
                     "eval_bytes_sent_round_max": 1000.0})
    return rows


@pytest.fixture
def runs(tmp_path) -> list[Path]:
    from asepr.training.rundir.checkpoint import RunDir

    made = []
    for name, scale, sent in (("sage-avg-scaffold", 1.0, 3 * 2**20), ("sage-centralized", 1.1, 0.0)):
        run = tmp_path / "out.runs" / name
        run.mkdir(parents=True)
        RunDir(run).write_metrics(_rows(scale, sent))
        made.append(run)
    return made


def test_plot_overlays_the_runs_beside_them(runs, capsys):
    from asepr.workflows.plot import RUN_FIGURES, plot_runs

    figures = plot_runs(runs)
    assert sorted(figures) == sorted(RUN_FIGURES)
    for name, (fig, path) in figures.items():
        assert path.parent == runs[0].parent and path.name == RUN_FIGURES[name][0]
        assert path.read_bytes()[:8] == PNG and path.stat().st_size > 1000
    # Validation and test, one line per run, against epochs and against modelled time.
    for name in ("epochs", "time"):
        val, test = figures[name][0].axes
        assert len(val.get_lines()) == len(test.get_lines()) == 2
    epochs = figures["epochs"][0].axes[0].get_lines()[0].get_xdata()
    assert list(epochs) == [2.0, 4.0, 6.0]
    # Modelled time grows with the rows and includes the network's share of the bytes.
    seconds = figures["time"][0].axes[0].get_lines()[0].get_xdata()
    assert list(seconds) == sorted(seconds) and seconds[0] > 1.2
    # Bytes per epoch: 3 MiB per round of 2 epochs for the partitioned run, none centralized.
    sent, central = figures["bytes"][0].axes[0].get_lines()
    assert list(sent.get_ydata()) == pytest.approx([1.5, 1.5, 1.5]) and list(central.get_ydata()) == [0, 0, 0]

    assert main(["plot", *map(str, runs), "--out", str(runs[0].parent / "figs")]) == 0
    out = capsys.readouterr().out
    assert out.count("wrote ") == 3 and (runs[0].parent / "figs" / "plot-time.png").exists()


def test_plot_names_a_run_directory_without_metrics(runs, tmp_path, capsys):
    empty = tmp_path / "empty-run"
    empty.mkdir()
    assert main(["plot", str(runs[0]), str(empty)]) == 1
    err = capsys.readouterr().err.strip()
    assert err.startswith("asepr plot: error: run directory") and str(empty) in err and "metrics.csv" in err
    assert "Traceback" not in err


def test_inspect_plot_draws_one_bar_per_partition(tmp_path, capsys):
    from asepr.workflows.plot import plot_partitions

    inp, out = tmp_path / "in", tmp_path / "out"
    generate(inp, SynthConfig(num_nodes=400, num_edges=3000, num_classes=3, dim=4), shard_rows=3000)
    assert main(["partition", str(inp), str(out), "-k", "3", "--workers", "0", "-q"]) == 0
    assert main(["inspect", str(out), "--plot"]) == 0
    png = tmp_path / "out.partitions.png"
    assert f"wrote {png}" in capsys.readouterr().out
    assert png.read_bytes()[:8] == PNG
    fig, path = plot_partitions(out, path=tmp_path / "p.png")
    edges, masters, replicas, labels = fig.axes
    assert [len(ax.patches) for ax in (edges, masters, replicas)] == [3, 3, 3]
    # One stacked bar per partition and class; the masters' labels add up to the labelled nodes.
    assert len(labels.patches) == 3 * 3
    assert sum(p.get_height() for p in masters.patches) == 400
    assert path.exists()
