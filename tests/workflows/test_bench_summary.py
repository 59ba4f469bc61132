"""bench partition's summary: the published reference RF beside ASEP's, from the shared file."""

from __future__ import annotations

from workflows.bench import partition_summary
from workflows.datasets import reference_rf


def _rows(order, cells):
    return [{"dataset": d, "order": order, "k": k, "algo": a, "rf": rf, "attr_homogeneity": 0.2}
            for d, k, a, rf in cells]


def test_reference_columns_and_the_count_against_the_original_2ps_hdrf(tmp_path):
    csv = tmp_path / "ref.csv"
    csv.write_text("dataset,order,k,algorithm,replication_factor,edge_balance\n"
                   "g,shuffled,4,2ps-hdrf,1.800,1.05\n"
                   "g,shuffled,8,2ps-hdrf,2.500,1.05\n"
                   "g,shuffled,8,hep-1 (in memory),2.100,1.0\n"
                   "other,shuffled,4,2ps-hdrf,9.0,1.05\n")
    reference = reference_rf(csv)
    assert reference[("g", "shuffled", 8, "hep-1 (in memory)")] == 2.1
    rows = _rows("shuffled", [("g", 4, "asep", 2.0), ("g", 4, "hdrf", 2.2),
                              ("g", 8, "asep", 2.4), ("g", 8, "hdrf", 2.9),
                              ("g", 16, "asep", 3.0), ("g", 16, "hdrf", 3.5)])
    text = partition_summary(rows, reference)
    assert "| ref 2ps-hdrf | ref hep-1 (in memory) | asep <= ref 2ps-hdrf |" in text
    assert "| g | 4 | 2.000 | 2.200 | yes | nan | 1.800 |  | no |" in text
    assert "| g | 8 | 2.400 | 2.900 | yes | nan | 2.500 | 2.100 | yes |" in text
    assert "| g | 16 | 3.000 | 3.500 | yes | nan |  |  |  |" in text  # no reference for this cell
    assert "original 2PS-HDRF (reference file) in 1 of 2 cells" in text


def test_without_a_reference_the_summary_is_unchanged(tmp_path):
    rows = _rows("natural", [("g", 4, "asep", 2.0), ("g", 4, "hdrf", 2.2)])
    assert partition_summary(rows, {}) == partition_summary(rows)
    assert "ref " not in partition_summary(rows)
    assert reference_rf(tmp_path / "missing.csv") == {}
