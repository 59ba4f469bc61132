"""``asepr partition --capacities / --cluster``: equal capacities change nothing, bad ones are refused, inspect shows the shares."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from asepr.storage.partitions.manifest import read_manifest
from tests.storage.helpers import write_input
from asepr.workflows.cli import main


@pytest.fixture(scope="module")
def small_input(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("capacity-cli") / "in"
    write_input(root, num_nodes=500, num_edges=4000, dim=5, edge_shards=3, meta={"undirected": True})
    return root


def digests(out: Path) -> dict:
    manifest = read_manifest(out)
    return {"parts": [(e["part_id"], e["checksum"], e["counts"]) for e in manifest["partitions"]],
            "node_map": manifest["node_map"]["sha256"], "state": manifest["state"]["checksum"],
            "config": manifest["config"], "run_key": manifest["run_key"], "metrics": manifest["metrics"]["loads"]}


@pytest.mark.parametrize("algo", ["asep", "hdrf"])
def test_equal_capacities_give_the_uniform_output_byte_for_byte(small_input, tmp_path, algo, capsys):
    plain, equal = tmp_path / "plain", tmp_path / "equal"
    assert main(["partition", str(small_input), str(plain), "-k", "4", "--algo", algo, "-q"]) == 0
    assert main(["partition", str(small_input), str(equal), "-k", "4", "--algo", algo, "-q",
                 "--capacities", "1,1,1,1"]) == 0
    assert digests(equal) == digests(plain)
    assert "capacities" not in read_manifest(equal)["config"]
    assert main(["inspect", str(equal)]) == 0
    assert "shares (capacities" not in capsys.readouterr().out


@pytest.mark.parametrize("value, found", [
    ("2,1,1", "found 3"), ("2,0,1,1", "'0'"), ("2,-1,1,1", "'-1'"), ("2,one,1,1", "'one'"), ("2,,1,1", "''"),
])
def test_bad_capacities_get_one_line_naming_the_flag(small_input, tmp_path, value, found, capsys):
    assert main(["partition", str(small_input), str(tmp_path / "out"), "-k", "4", "--capacities", value]) == 1
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    assert "--capacities" in err and "expected" in err and found in err and "Fix:" in err
    assert not (tmp_path / "out").exists()


def test_cluster_file_sets_k_and_inspect_shows_the_shares(small_input, tmp_path, capsys):
    cluster = tmp_path / "cluster.toml"
    cluster.write_text('[[machine]]\ncompute = 2\n[[machine]]\ncompute = 1\n[[machine]]\ncompute = 1\n')
    out = tmp_path / "out"
    assert main(["partition", str(small_input), str(out), "--cluster", str(cluster), "--algo", "hdrf"]) == 0
    text = capsys.readouterr().out
    assert "shares (capacities 0.5, 0.25, 0.25)" in text
    manifest = read_manifest(out)
    assert manifest["num_parts"] == 3 and manifest["config"]["capacities"] == [0.5, 0.25, 0.25]
    loads = manifest["metrics"]["loads"]
    assert loads[0] / sum(loads) == pytest.approx(0.5, rel=0.05)
    assert main(["inspect", str(out)]) == 0
    lines = capsys.readouterr().out.splitlines()
    at = lines.index("shares (capacities 0.5, 0.25, 0.25)")
    assert lines[at + 2].split()[:2] == ["0", "0.500"]
    assert main(["inspect", str(out), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["metrics"]["capacity"]["shares"] == [0.5, 0.25, 0.25]
    assert main(["verify", str(out)]) == 0
    assert main(["partition", str(small_input), str(tmp_path / "both"), "--cluster", str(cluster),
                 "--capacities", "2,1,1"]) == 1
    assert "--capacities and --cluster" in capsys.readouterr().err
    assert main(["partition", str(small_input), str(tmp_path / "k4"), "-k", "4", "--cluster", str(cluster)]) == 1
    assert f"--cluster {cluster}" in capsys.readouterr().err
