"""``asepr partition / inspect / verify``: the commands, crash safety, real datasets."""

from __future__ import annotations

import os
import shutil
import signal
import socket
from pathlib import Path

import numpy as np
import pytest
import zarr

from asepr.pipeline.config import PartitionConfig
from asepr.pipeline.inputs.synth import SynthConfig, generate
from asepr.pipeline.partition_run import partition_to_store
from asepr.pipeline.verify import verify_output
from asepr.storage.importers import import_dataset
from asepr.storage.partitions.manifest import JOURNAL_NAME, STAGING_NAME, read_manifest
from asepr.storage.partitions.output_stores import open_partition
from tests.storage.helpers import write_input
from tests.workflows.helpers import spawn_paused, wait_for_pause
from asepr.workflows.cli import main
from asepr.workflows.demo import bundled_cora

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def small_input(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("cli") / "in"
    write_input(root, num_nodes=400, num_edges=3000, dim=5, edge_shards=3, meta={"undirected": True})
    return root


def test_partition_inspect_verify(small_input, tmp_path, capsys):
    out = tmp_path / "out"
    assert main(["partition", str(small_input), str(out), "-k", "3", "--algo", "dbh", "--workers", "0"]) == 0
    text = capsys.readouterr().out
    assert "committed generation 1" in text and "replication factor" in text and "masters" in text
    assert main(["inspect", str(out)]) == 0
    text = capsys.readouterr().out
    for needle in ("generation   1", "algorithm    dbh with k=3", "edge balance", "timings", "finalize nodes",
                   "partitions", "total"):
        assert needle in text, needle
    assert main(["inspect", str(out), "--json"]) == 0
    assert '"format": "asepr-partitions"' in capsys.readouterr().out
    assert main(["verify", str(out)]) == 0
    assert "verified: all invariants hold" in capsys.readouterr().out
    # The same with one thread, the exact edge comparison and a budget that forces groups.
    assert main(["verify", str(out), "--threads", "1", "--exact-edges", "--memory-budget", "0.00001"]) == 0
    assert "verified: all invariants hold" in capsys.readouterr().out
    assert main(["verify", str(out), "--memory-budget", "0"]) != 0
    assert "--memory-budget > 0" in capsys.readouterr().err
    # A violation: exit 1, and the message names the partition.
    group = zarr.open_group(str(out / "part-00002.zarr"), mode="r+")
    x = group["nodes/x"][...]
    x[0, 0] += 1.0
    group["nodes/x"][...] = x
    assert main(["verify", str(out)]) == 1
    err = capsys.readouterr().err
    assert "partition 2: checksum mismatch: array nodes/x" in err
    assert "partition 2: nodes/x of global_nid" in err


def test_bench_read_loads_every_array_cold_and_warm(small_input, tmp_path, capsys):
    from asepr.workflows.bench.read import bench_read

    out = tmp_path / "out"
    assert main(["partition", str(small_input), str(out), "-k", "2", "--algo", "hash", "--workers", "0"]) == 0
    capsys.readouterr()
    rows = bench_read(out, repeat=1)
    assert [(r["part_id"], r["cache"]) for r in rows] == [(0, "cold"), (0, "warm"), (1, "cold"), (1, "warm")]
    for r in rows:
        arrays = open_partition(out, r["part_id"]).to_numpy()
        assert r["raw_mib"] * 2**20 == sum(a.nbytes for a in arrays.values())
        assert r["nodes"] == len(arrays["nodes/global_nid"]) and r["edges"] == len(arrays["edges/indices"])
        assert r["seconds"] > 0 and r["mb_per_s"] > 0 and r["stored_mib"] > 0
    report = tmp_path / "rep"
    assert main(["bench", "read", str(out), "--parts", "1", "--repeat", "1", "--out", str(report)]) == 0
    text = (report / "read.md").read_text()
    assert "| 1 | cold |" in text and "| 1 | warm |" in text and "| 0 |" not in text


def test_relative_paths_verify_from_anywhere(small_input, tmp_path, monkeypatch, capsys):
    work = tmp_path / "work"
    shutil.copytree(small_input, work / "in")
    monkeypatch.chdir(work)
    assert main(["partition", "in", "out", "-k", "2", "--algo", "hash", "--workers", "0", "-q"]) == 0
    assert read_manifest("out")["input"]["url"] == str(work / "in")
    monkeypatch.chdir(tmp_path)
    assert main(["verify", str(work / "out")]) == 0, capsys.readouterr().err


def test_config_file_under_flags(small_input, tmp_path, capsys):
    config = tmp_path / "asepr.toml"
    config.write_text('[partition]\nk = 5\nalgo = "hash"\nseed = 3\nhalo = 1\n')
    out = tmp_path / "out"
    assert main(["partition", str(small_input), str(out), "--config", str(config), "-k", "2",
                 "--workers", "0", "-q"]) == 0
    manifest = read_manifest(out)
    assert manifest["num_parts"] == 2 and manifest["algorithm"] == "hash" and manifest["halo"] == 1
    assert manifest["config"]["seed"] == 3
    config.write_text("[partition]\nk = 2\nbogus = 1\n")
    assert main(["partition", str(small_input), str(tmp_path / "o2"), "--config", str(config),
                 "--workers", "0"]) == 1
    assert "bogus" in capsys.readouterr().err


def test_errors_print_one_line_and_exit_1(small_input, tmp_path, capsys):
    assert main(["partition", str(tmp_path / "nothing"), str(tmp_path / "out"), "-k", "2", "--workers", "0"]) == 1
    assert "edge shards path" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()
    assert main(["verify", str(tmp_path)]) == 1
    assert "no manifest" in capsys.readouterr().err
    assert main(["partition", str(small_input), str(tmp_path / "o"), "--workers", "0"]) == 1
    assert "-k K" in capsys.readouterr().err


# --- crash safety: SIGKILL a real `asepr partition` at known points ----------------------


@pytest.fixture(scope="module")
def crash_case(tmp_path_factory) -> tuple[Path, Path]:
    """A synthetic input (8 edge shards) and a committed generation 1 (k=3) of it."""
    base = tmp_path_factory.mktemp("crash")
    generate(base / "in", SynthConfig(num_nodes=6_000, num_edges=60_000, num_classes=4, dim=8),
             shard_rows=7_500)
    partition_to_store(base / "in", base / "gen1", PartitionConfig(num_parts=3, algo="hash"))
    return base / "in", base / "gen1"


@pytest.mark.parametrize("stage", ["route", "finalize", "between-commits", "swap"])
def test_sigkill_leaves_previous_generation_and_rerun_completes(crash_case, tmp_path, stage):
    root, gen1 = crash_case
    out = tmp_path / "out"
    shutil.copytree(gen1, out)
    before = read_manifest(out)
    marker = tmp_path / "paused"
    args = ["partition", str(root), str(out), "-k", "4", "--algo", "hash", "--overwrite", "--workers", "0"]
    proc = spawn_paused(args, stage, marker)
    try:
        wait_for_pause(marker, proc, "writer")
        assert marker.read_text().split()[0] == stage
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        proc.stderr.close()
    assert proc.returncode == -signal.SIGKILL
    assert (out / ".asepr.lock").exists()  # the dead writer's lock stays behind
    if stage == "swap":
        assert (out / STAGING_NAME / JOURNAL_NAME).exists()
    # The previous generation still verifies, and readers get it.
    report = verify_output(out)
    assert report.ok and report.generation == 1, report.summary()
    assert read_manifest(out) == before
    # (mid-swap, partition 0 of generation 2 is already in place: readers find generation 1's)
    assert open_partition(out, 0).generation == 1
    # The same command completes it (taking over the stale lock) and the result verifies.
    assert main(args + ["-q"]) == 0
    manifest = read_manifest(out)
    assert manifest["generation"] == 2 and manifest["num_parts"] == 4
    if stage == "between-commits":
        assert manifest["run"]["resumed_partitions"], "finished partitions were not resumed"
    report = verify_output(out)
    assert report.ok and report.generation == 2, report.summary()
    assert not (out / STAGING_NAME).exists() and not (out / ".asepr.lock").exists()


def test_concurrent_writer_is_refused_while_the_first_runs(crash_case, tmp_path, capsys):
    root, gen1 = crash_case
    out = tmp_path / "out"
    shutil.copytree(gen1, out)
    marker = tmp_path / "paused"
    proc = spawn_paused(["partition", str(root), str(out), "-k", "2", "--algo", "hash", "--overwrite",
                   "--workers", "0"], "route", marker)
    try:
        wait_for_pause(marker, proc, "writer")
        assert main(["partition", str(root), str(out), "-k", "5", "--algo", "hash", "--overwrite",
                     "--workers", "0"]) == 1
        err = capsys.readouterr().err
        assert f"pid {proc.pid} on host {socket.gethostname()}" in err
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        proc.stderr.close()
    assert verify_output(out).ok and read_manifest(out)["generation"] == 1


# --- real datasets ------------------------------------------------------------------------

DATASETS = {
    "cora": ("gnn-npz", "cora/cora.npz", 5_278),
    "amazon-photo": ("gnn-npz", "amazon-photo/amazon_electronics_photo.npz", 119_081),
    "amazon-computers": ("gnn-npz", "amazon-computers/amazon_electronics_computers.npz", 245_861),
    "coauthor-cs": ("gnn-npz", "coauthor-cs/ms_academic_cs.npz", 81_894),
    "coauthor-physics": ("gnn-npz", "coauthor-physics/ms_academic_phy.npz", 247_962),
    "tolokers": ("hetero-npz", "tolokers/tolokers.npz", 519_000),
    "squirrel": ("hetero-npz", "squirrel/squirrel.npz", 198_353),
    "facebook-pagepage": ("musae", "facebook-pagepage", 170_823),
    "twitch-de": ("musae", "twitch-de", 153_138),
}


def _import(datasets_dir: Path | None, name: str, out: Path, shards: int, source: Path | None = None) -> Path:
    fmt, rel, edges = DATASETS[name]
    options = {"label_column": "page_type"} if name == "facebook-pagepage" else {}
    if name == "twitch-de":
        options = {"label_column": "mature"}
    shard_rows = 1_000_000 if shards == 1 else -(-edges // shards)
    import_dataset(fmt, source or datasets_dir / rel, out, shard_rows=shard_rows, **options)
    assert len(list((out / "edges").glob("*.parquet"))) == shards
    return out


@pytest.fixture(scope="module")
def cora_inputs(tmp_path_factory) -> dict[int, Path]:
    """The bundled Cora (the same file as the published one) in one and in eight shards."""
    base = tmp_path_factory.mktemp("cora")
    return {s: _import(None, "cora", base / f"cora-{s}", s, source=bundled_cora()) for s in (1, 8)}


@pytest.mark.parametrize("shards", [1, 8])
@pytest.mark.parametrize("k", [2, 4, 8])
def test_cora_partition_then_verify(cora_inputs, tmp_path, capsys, k, shards):
    out = tmp_path / "out"
    assert main(["partition", str(cora_inputs[shards]), str(out), "-k", str(k), "--workers", "0", "-q"]) == 0
    assert main(["verify", str(out)]) == 0, capsys.readouterr().err
    manifest = read_manifest(out)
    assert manifest["num_parts"] == k and manifest["undirected"] is True
    assert sum(e["counts"]["edges"] for e in manifest["partitions"]) == 5_278
    assert sum(e["counts"]["masters"] for e in manifest["partitions"]) == 2_708


@pytest.mark.slow
@pytest.mark.parametrize("shards", [1, 8])
@pytest.mark.parametrize("k", [2, 4, 8])
@pytest.mark.parametrize("name", sorted(DATASETS))
def test_every_dataset_partition_then_verify(datasets_dir, tmp_path, capsys, name, k, shards):
    root = _import(datasets_dir, name, tmp_path / "in", shards)
    out = tmp_path / "out"
    assert main(["partition", str(root), str(out), "-k", str(k), "--workers", "0", "-q"]) == 0
    assert main(["verify", str(out)]) == 0, capsys.readouterr().err
    manifest = read_manifest(out)
    assert sum(e["counts"]["edges"] for e in manifest["partitions"]) == manifest["num_edges"]
    x = open_partition(out, k - 1).x
    assert x.shape[1] == manifest["feat_dim"] and np.isfinite(x[: min(5, x.shape[0])]).all()


@pytest.mark.slow  # the whole demo; CI runs `asepr demo` itself, and every step has its own default test
def test_demo_partitions_and_verifies(tmp_path):
    from asepr.workflows.demo import DEMO_PARTS, run_demo

    lines: list[str] = []
    result = run_demo(tmp_path, echo=lines.append)
    assert result["verify"].ok and result["manifest"]["num_parts"] == DEMO_PARTS
    assert result["manifest"]["algorithm"] == "asep"
    text = "\n".join(lines)
    assert "replication factor" in text and "verified: all invariants hold" in text
    assert open_partition(result["out"], DEMO_PARTS - 1).num_nodes > 0
