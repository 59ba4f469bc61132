"""Trainers on a real S3-compatible server: partitions read from the store, the run
directory (checkpoints, metrics, the pointer to the latest round, the lease) on it too."""

from __future__ import annotations

import argparse
import dataclasses
import json

import fsspec
import pytest
import s3fs
import torch

from asepr.storage.errors import StoreError
from asepr.storage.locations.remote import STORAGE_OPTIONS_VARIABLE
from tests.training.conftest import fork_ranks
from asepr.training.rundir.checkpoint import RunDir
from asepr.training.group.comm import Comm
from asepr.training.config import TrainConfig
from asepr.training.loop.distributed import run_trainer
from asepr.workflows.cli import main

SMALL = TrainConfig(hidden=16, rounds=1, local_epochs=1, threads=1, seed=3, eval_mode="local")
TRAIN = ["--nproc", "2", "--local-epochs", "1", "--hidden", "16", "--eval", "local", "--timeout", "120", "-q"]


def _rank(rank: int, world: int, url: str, run: str, options: dict, rounds: int, resume: bool) -> None:
    run_trainer(url, run, dataclasses.replace(SMALL, rounds=rounds), resume=resume, comm=Comm(),
                storage_options=options)


def test_two_ranks_train_from_the_store_and_resume_from_a_run_directory_there(cora_on_s3):
    url, options = cora_on_s3
    run = f"{url.rpartition('/')[0]}/runs/cora"
    fork_ranks(2, _rank, url, run, options, 1, False)
    runs = RunDir(run, options)
    assert runs.latest_round() == 0 and [r["round"] for r in runs.read_metrics()] == [1]
    first = runs.load_global(0)["global"]
    fork_ranks(2, _rank, url, run, options, 2, True)
    runs = RunDir(run, options)
    assert runs.latest_round() == 1 and [r["round"] for r in runs.read_metrics()] == [1, 2]
    assert runs.read_run_info()["world_size"] == 2 and runs.read_run_info()["out"] == url
    assert not torch.equal(first, runs.load_global(1)["global"])  # round 1 trained on from round 0
    fs = s3fs.S3FileSystem(**options)
    fs.invalidate_cache()
    names = {p.removeprefix(run.removeprefix("s3://") + "/") for p in fs.find(f"{run}/checkpoints")}
    assert names == {f"checkpoints/round-0000{r}/{f}" for r in (0, 1)
                     for f in ("rank-00000.pt", "rank-00001.pt", "global.pt")} | {"checkpoints/latest.json"}


def test_a_trainer_reads_its_config_and_storage_options_as_the_launcher_passes_them(s3_bucket, monkeypatch):
    from asepr.training.main import add_train_arguments, read_config

    url, options = s3_bucket
    config = dataclasses.replace(SMALL, hidden=24)
    written = RunDir(f"{url}/run", options).write_config(config)
    assert written == f"{url}/run/config.json"
    monkeypatch.setenv(STORAGE_OPTIONS_VARIABLE, json.dumps(options))  # as the launcher sets it for the ranks
    parser = argparse.ArgumentParser()
    add_train_arguments(parser)
    assert parser.parse_args([]).storage_options == options
    assert read_config(written, options) == config
    with pytest.raises(ValueError, match="config file s3://.*/run/missing.json: expected a TrainConfig as JSON"):
        read_config(f"{url}/run/missing.json", options)


@pytest.mark.slow
def test_asepr_train_and_resume_on_the_store_end_to_end(cora_on_s3, capsys):
    url, options = cora_on_s3
    run = f"{url.rpartition('/')[0]}/runs/cli"
    flags = TRAIN + ["--run-dir", run, "--storage-options", json.dumps(options)]
    assert main(["train", url, "--rounds", "1", *flags]) == 0
    assert capsys.readouterr().out == ""  # -q: nothing but errors
    assert main(["train", url, "--rounds", "2", "--resume", *[f for f in flags if f != "-q"]]) == 0
    assert "2 trainers" in capsys.readouterr().out
    runs = RunDir(run, options)
    assert runs.latest_round() == 1 and [r["round"] for r in runs.read_metrics()] == [1, 2]
    fs = s3fs.S3FileSystem(**options)
    fs.invalidate_cache()
    assert fs.exists(f"{run}/config.json") and not fs.exists(f"{run}/.asepr.lease")  # the lease was released


@pytest.mark.parametrize("where", ["s3", "local"])
def test_a_pointer_that_leads_outside_the_run_directory_is_refused(where, request, tmp_path):
    if where == "s3":
        url, options = request.getfixturevalue("s3_bucket")
        fs = s3fs.S3FileSystem(**options)
    else:
        url, options, fs = str(tmp_path), {}, fsspec.filesystem("file", auto_mkdir=True)
    fs.pipe(f"{url}/secret/global.pt", b"not a checkpoint")
    for path in ("../../secret", "../checkpoints/../../secret", "/secret"):
        fs.pipe(f"{url}/run/checkpoints/latest.json", json.dumps({"round": 3, "path": path}).encode())
        with pytest.raises(StoreError, match="latest.json \\(path\\): expected a path inside"):
            RunDir(f"{url}/run", options).latest_round()
    fs.pipe(f"{url}/run/checkpoints/latest.json", json.dumps({"round": 3, "path": "round-00003"}).encode())
    runs = RunDir(f"{url}/run", options)
    assert runs.latest_round() == 3 and str(runs.global_path(3)).endswith("run/checkpoints/round-00003/global.pt")


def test_a_run_directory_on_the_store_refuses_a_fresh_start_over_a_previous_run(s3_bucket):
    url, options = s3_bucket
    runs = RunDir(f"{url}/run", options)
    assert runs.previous_run() == [] and runs.read_metrics() == [] and runs.latest_round() is None
    runs.write_metrics([{"round": 0, "val": 0.5}])
    with pytest.raises(StoreError, match="a previous run's metrics.csv"):
        RunDir(f"{url}/run", options).refuse_previous_run()
    runs.clear()
    assert RunDir(f"{url}/run", options).previous_run() == []


def test_the_baselines_refuse_an_object_store(tmp_path, capsys):
    assert main(["train", "--centralized", "s3://bucket/in", "--run-dir", str(tmp_path / "run")]) == 1
    assert "a local input and run directory" in capsys.readouterr().err
    assert main(["train", str(tmp_path / "in"), "--strategy", "fds", "--nproc", "2",
                 "--run-dir", "s3://bucket/runs/fds"]) == 1
    assert "--run-dir s3://bucket/runs/fds" in capsys.readouterr().err
    assert not (tmp_path / "run").exists()
