"""Why local models differ, on Cora: coverage against k and the halo, a partition built to
be skewed against a balanced one, and `asepr inspect --diagnose`."""

from __future__ import annotations

import itertools
import json

import pytest

from asepr.pipeline.config import PartitionConfig
from asepr.pipeline.diagnose import diagnose_output
from asepr.pipeline.partition_run import partition_to_store
from asepr.workflows.cli import main


def test_coverage_is_full_at_k1_and_with_a_one_hop_halo_and_falls_with_k(cora_parts):
    assert diagnose_output(cora_parts(1), hops=2).summary()["coverage_min"] == 1.0
    assert diagnose_output(cora_parts(4, halo=1), hops=1).summary()["coverage_min"] == pytest.approx(1.0)
    means = [diagnose_output(cora_parts(k), hops=2).summary()["coverage_mean"] for k in (1, 2, 4, 8)]
    assert means[0] == 1.0 and all(a > b for a, b in itertools.pairwise(means)), means
    assert all(0 < m <= 1 for m in means)
    halo = diagnose_output(cora_parts(4, halo=1), hops=2).summary()["coverage_mean"]
    assert means[2] < halo < 1.0


def test_partitions_with_disjoint_labels_diverge_and_balanced_ones_do_not(cora_input, cora_parts, tmp_path):
    """Cora partitioned by its label column as attribute clusters concentrates each
    class; the structural partition stays close to the global mix."""
    skewed = tmp_path / "skewed"
    partition_to_store(cora_input, skewed, PartitionConfig(num_parts=4, algo="asep", attr_column="label",
                                                           alpha=1.0, beta=4.0))
    s_skewed = diagnose_output(skewed).summary()
    s_plain = diagnose_output(cora_parts(4)).summary()
    assert s_plain["jsd_max"] < 0.1
    assert s_skewed["jsd_mean"] > 0.3 and s_skewed["jsd_mean"] > 3 * s_plain["jsd_mean"]


def test_inspect_diagnose_prints_the_block_and_adds_it_to_json(cora_parts, capsys):
    out = str(cora_parts(4))
    assert main(["inspect", out]) == 0
    assert "why local models differ" not in capsys.readouterr().out  # opt-in: reads every store
    assert main(["inspect", out, "--diagnose", "--hops", "1"]) == 0
    text = capsys.readouterr().out
    assert "why local models differ" in text and "1-hop coverage" in text and "label JSD" in text
    assert main(["inspect", out, "--diagnose", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)["diagnostics"]
    assert report["hops"] == 2 and len(report["per_partition"]) == 4
    assert report["seeds_min"] <= report["seeds_mean"] <= report["seeds_max"]
