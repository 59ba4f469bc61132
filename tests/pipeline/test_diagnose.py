"""Why local models differ: label divergence, receptive-field coverage and seeds per partition."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

from asepr.pipeline.config import PartitionConfig
from asepr.pipeline.diagnose import diagnose_output, js_divergence
from asepr.pipeline.partition_run import partition_to_store
from asepr.storage import open_partition
from tests.storage.helpers import edge_table, node_table


def _h(p: float) -> float:
    """Binary entropy in bits."""
    return -sum(q * math.log2(q) for q in (p, 1 - p) if q > 0)


def test_js_divergence_is_zero_for_equal_mixes_and_one_for_disjoint_labels():
    assert js_divergence([3, 1], [30, 10]) == pytest.approx(0.0, abs=1e-12)
    assert js_divergence([5, 0, 0], [0, 2, 7]) == pytest.approx(1.0)
    assert js_divergence([2, 1], [1, 2]) == pytest.approx(1 - _h(1 / 3))


#: Two triangles {0, 1, 2} and {3, 4, 5} joined by the bridge 2 – 3, undirected.
TRIANGLES = [(0, 1), (1, 2), (0, 2), (3, 4), (4, 5), (3, 5), (2, 3)]


def _write(root: Path, edges, labels, *, undirected: bool = True, split=None) -> Path:
    n = len(labels)
    (root / "edges").mkdir(parents=True)
    (root / "nodes").mkdir()
    src, dst = zip(*edges)
    pq.write_table(edge_table(src, dst), root / "edges" / "part-00000.parquet")
    feat = np.eye(n, 4, dtype=np.float32)
    split = np.zeros(n, dtype=np.int8) if split is None else np.asarray(split, dtype=np.int8)
    pq.write_table(node_table(np.arange(n), feat, labels, split), root / "nodes" / "part-00000.parquet")
    (root / "meta.json").write_text(json.dumps({"undirected": undirected, "num_nodes": n}))
    return root


def _triangle_of(out: Path, part: int) -> int:
    """0 or 1: the triangle whose nodes partition ``part`` masters (node 4 is never the
    bridge's end, so it is mastered with its triangle)."""
    data = open_partition(out, part).to_numpy(["nodes/global_nid", "nodes/is_master"])
    return int(4 in data["nodes/global_nid"][data["nodes/is_master"]])


def _owns_bridge(out: Path, part: int) -> bool:
    store = open_partition(out, part)
    return store.num_edges - store.attrs["counts"].get("halo_edges", 0) == 4


@pytest.mark.parametrize("halo", [0, 1])
def test_exact_figures_on_two_triangles_and_a_bridge(tmp_path, halo):
    """By hand: degrees 2, 2, 3 | 3, 2, 2; 2-hop in-walks c2 = 5, 5, 7 | 7, 5, 5. The
    triangle with the bridge holds c2 = 5, 5, 5 of its masters (coverage 1, 1, 5/7); the
    other triangle's bridge end, mastered there, holds 2 + 2 of its 7 walks and its other
    nodes 4 of 5. With the halo, the bridge is copied there too: 5 of 7, and 5 of 5 for
    the others (the bridge end's degree there is 3)."""
    inp = _write(tmp_path / "in", TRIANGLES, [0, 0, 1, 1, 1, 1])
    out = tmp_path / "out"
    partition_to_store(inp, out, PartitionConfig(num_parts=2, algo="asep", seed=1), halo=halo)
    d = diagnose_output(out, hops=2)
    assert d.basis == "train" and d.undirected and d.label_counts == [2, 4]
    triangle = [_triangle_of(out, p) for p in (0, 1)]
    assert sorted(triangle) == [0, 1], "each partition holds one triangle"
    bridged = next(p for p in (0, 1) if _owns_bridge(out, p))
    far = 1 - bridged
    by_part = {p.part_id: p for p in d.partitions}
    assert by_part[bridged].coverage == pytest.approx((1 + 1 + 5 / 7) / 3)
    far_coverage = (5 / 7 + 1 + 1) / 3 if halo else (4 / 7 + 4 / 5 + 4 / 5) / 3
    assert by_part[far].coverage == pytest.approx(far_coverage)
    assert all(p.seeds == 3 for p in d.partitions)
    # Labels: triangle 0 holds 0, 0, 1 and triangle 1 holds 1, 1, 1; all together 2 : 4.
    jsd = {0: 1 - _h(1 / 3), 1: _h(1 / 6) - _h(1 / 3) / 2}
    for p in d.partitions:
        assert p.jsd == pytest.approx(jsd[triangle[p.part_id]])
    s = d.summary()
    assert s["jsd_max"] == pytest.approx(jsd[1]) and s["jsd_mean"] == pytest.approx((jsd[0] + jsd[1]) / 2)
    assert s["seeds_min"] == s["seeds_max"] == 3
    # One hop: the halo copies every master's in-edges (coverage 1); without it the far
    # bridge end misses one of its 3 in-neighbours.
    one = {p.part_id: p.coverage for p in diagnose_output(out, hops=1).partitions}
    assert one[bridged] == pytest.approx(1.0)
    assert one[far] == pytest.approx(1.0 if halo else (2 / 3 + 1 + 1) / 3)


def test_messages_pass_one_way_on_a_directed_input(tmp_path):
    """The cycles 0 → 1 → 2 → 0 and 3 → 4 → 5 → 3 and the bridge 2 → 3: in-degrees 1, 1,
    1 | 2, 1, 1 and 2-hop in-walks 1, 1, 1 | 2, 2, 1. The first cycle's masters hold all
    theirs. With the bridge beside the first cycle, the second's masters 3 and 4 hold 1
    of 2 walks (5 → 3 without 2 → 3), 5 all: 2/3; with the bridge beside the second,
    node 3 holds 4 → 5 → 3 but not 1 → 2 → 3 (1 of 2), 4 and 5 all: 5/6."""
    cycles = [(0, 1), (1, 2), (2, 0), (3, 4), (4, 5), (5, 3), (2, 3)]
    inp = _write(tmp_path / "in", cycles, [0, 1, 0, 1, 0, 1], undirected=False)
    out = tmp_path / "out"
    partition_to_store(inp, out, PartitionConfig(num_parts=2, algo="asep", seed=1))
    d = diagnose_output(out, hops=2)
    assert not d.undirected
    assert sorted(_triangle_of(out, p) for p in (0, 1)) == [0, 1], "each partition holds one cycle"
    first = next(p for p in (0, 1) if _triangle_of(out, p) == 0)
    second = 1 - first
    by_part = {p.part_id: p.coverage for p in d.partitions}
    assert by_part[first] == pytest.approx(1.0)
    assert by_part[second] == pytest.approx(5 / 6 if _owns_bridge(out, second) else 2 / 3)


def test_seeds_are_training_masters_or_every_labelled_master_without_a_training_split(tmp_path):
    inp = _write(tmp_path / "in", TRIANGLES, [0, 0, 1, 1, -1, 1], split=[0, 1, 0, 2, 0, -1])
    out = tmp_path / "out"
    partition_to_store(inp, out, PartitionConfig(num_parts=1, algo="asep"))
    d = diagnose_output(out)
    assert d.basis == "train" and d.partitions[0].seeds == 2 and d.label_counts == [1, 1]  # nodes 0 and 2
    inp = _write(tmp_path / "in2", TRIANGLES, [0, 0, 1, 1, -1, 1], split=[-1] * 6)
    partition_to_store(inp, tmp_path / "out2", PartitionConfig(num_parts=1, algo="asep"))
    d = diagnose_output(tmp_path / "out2")
    assert d.basis == "labelled" and d.partitions[0].seeds == 5 and d.label_counts == [2, 3]
