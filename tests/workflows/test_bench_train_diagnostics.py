"""`bench train`'s "why the local models differ" table and plot (synthetic run summaries)."""

from __future__ import annotations

import pytest

from asepr.workflows.bench.train_diagnostics import (
    diagnostics_fields,
    diagnostics_rows,
    diagnostics_section,
    plot_diagnostics,
)


def _summary(k: int) -> dict:
    return {"jsd_mean": 0.01 * k, "jsd_max": 0.02 * k, "coverage_mean": 1 / k, "coverage_min": 0.8 / k,
            "coverage_max": 1.0, "seeds_min": 90 // k, "seeds_mean": 100 / k, "seeds_max": 110 // k}


def _run(k: int, strategy: str, seed: int, drift: float, test: float, partitioner: str = "asep") -> dict:
    metrics = [{"round": 1}, {"round": 2, "drift_mean": drift, "drift_max": 2 * drift}]
    return {"dataset": "g", "k": k, "strategy": strategy, "partitioner": partitioner, "seed": seed,
            "test_at_best_val": test, **diagnostics_fields(_summary(k), metrics)}


def _results() -> list[dict]:
    return [{"dataset": "g", "k": 1, "strategy": "centralized", "partitioner": "-", "test_at_best_val": 0.9,
             **diagnostics_fields(None, [])},
            _run(2, "avg", 0, 1.0, 0.88), _run(2, "avg", 1, 3.0, 0.86), _run(2, "avg+kd", 0, 9.0, 0.5),
            _run(4, "avg", 0, 4.0, 0.80), _run(4, "avg", 0, 5.0, 0.70, "hash")]


def test_a_runs_fields_carry_the_partitions_figures_and_its_last_rounds_drift():
    fields = diagnostics_fields(_summary(2), [{"drift_mean": 1.5, "drift_max": 2.5}])
    assert fields["jsd_mean"] == 0.02 and fields["seeds_min"] == 45
    assert (fields["drift_mean"], fields["drift_max"]) == (1.5, 2.5)
    assert diagnostics_fields(None, [{"round": 1}])["drift_mean"] is None  # no drift columns


def test_one_row_per_dataset_k_and_partitioner_with_the_default_strategys_drift():
    rows = diagnostics_rows(_results(), "avg")
    assert [(r["k"], r["partitioner"]) for r in rows] == [(2, "asep"), (4, "asep"), (4, "hash")]
    first = rows[0]
    # The mean over the default strategy's seeds; avg+kd's drift is left out.
    assert first["drift_mean"] == pytest.approx(2.0) and first["drift_max"] == pytest.approx(4.0)
    assert first["test_at_best_val"] == pytest.approx(0.87)
    assert first["jsd_max"] == pytest.approx(0.04) and first["coverage_min"] == pytest.approx(0.4)
    text = "\n".join(diagnostics_section(_results(), "avg", 2, ["train-g-diagnostics.png"]))
    assert "## Why the local models differ" in text and "2-hop in-walks" in text
    assert "| g | 2 | asep | 0.020 | 0.040 | 0.500 | 0.400–1.000 | 45 | 50.0 | 55 | 2 | 4 | 0.8700 |" in text
    assert "![train-g-diagnostics.png](train-g-diagnostics.png)" in text
    assert diagnostics_section(_results()[:1], "avg", 2, []) == []  # centralized alone: nothing


def test_the_plot_against_k_needs_two_k(tmp_path):
    pytest.importorskip("matplotlib")
    assert plot_diagnostics(_results(), "avg", tmp_path, "g") == "train-g-diagnostics.png"
    assert (tmp_path / "train-g-diagnostics.png").stat().st_size > 10_000
    one_k = [r for r in _results() if r["k"] != 4]
    assert plot_diagnostics(one_k, "avg", tmp_path / "none", "g") is None
