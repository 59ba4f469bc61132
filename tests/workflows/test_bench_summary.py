"""bench partition's summary: the published reference RF beside ASEP's, from the shared file."""

from __future__ import annotations

from asepr.workflows.bench.partition import partition_summary
from asepr.workflows.datasets import reference_rf


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


def test_fallback_columns_tuning_marks_and_the_hybrid_against_hep(tmp_path):
    from asepr.workflows.bench.partition import algo_order, hybrid_label

    csv = tmp_path / "ref.csv"
    csv.write_text("dataset,order,k,algorithm,replication_factor,edge_balance\n"
                   "g,shuffled,4,hep-1 (in memory),1.900,1.0\n"
                   "g,shuffled,4,hep-100 (in memory),1.300,1.0\n"
                   "h,shuffled,4,hep-1 (in memory),1.500,1.0\n"
                   "h,shuffled,4,hep-100 (in memory),1.400,1.0\n")
    small, whole = hybrid_label(10), hybrid_label(16)
    rows = _rows("shuffled", [("g", 4, "asep", 2.0), ("g", 4, "2ps-hdrf", 2.0), ("g", 4, small, 1.8),
                              ("g", 4, whole, 1.42), ("h", 4, "asep", 1.6), ("h", 4, "2ps-hdrf", 1.7),
                              ("h", 4, small, 1.6), ("h", 4, whole, 1.55)])
    for r in rows:
        if r["algo"] == "asep":
            r["asep_stream_rf"], r["kept"] = (2.1, "2ps-hdrf") if r["dataset"] == "g" else (1.6, "asep")
    text = partition_summary(rows, reference_rf(csv), tuned_on=("g",))
    assert sorted(["2ps-hdrf", whole, "asep", small], key=algo_order) == ["asep", small, whole, "2ps-hdrf"]
    assert "| dataset | k | asep | asep hybrid 10 B/e | asep hybrid 16 B/e | 2ps-hdrf | asep's own stream | kept |" in text
    assert "| g (tuned on) | 4 | 2.000 | 1.800 | 1.420 | 2.000 | 2.100 | 2ps-hdrf |" in text
    assert "| h | 4 | 1.600 | 1.600 | 1.550 | 1.700 | 1.600 | asep |" in text
    assert "replaced ASEP's own stream in 1 of 2 cells" in text
    assert "asep hybrid 10 B/e: RF no higher than HEP-1's in 1 of 2 cells." in text
    # 1.42 <= 1.1 x 1.3 = 1.43 and 1.55 > 1.1 x 1.4 = 1.54.
    assert "asep hybrid 16 B/e: RF no higher than HEP-100's x 1.1 in 1 of 2 cells." in text
