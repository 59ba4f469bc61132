"""The pointer to the latest round is checked against the checkpoint it names: a pointer
whose round is not the one its checkpoint recorded is refused, rather than resuming from
other weights and numbering every later round wrongly."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from asepr.pipeline.config import PartitionConfig
from asepr.pipeline.inputs.synth import SynthConfig, generate
from asepr.pipeline.partition_run import partition_to_store
from asepr.storage.errors import StoreError
from asepr.training.rundir.checkpoint import RunDir
from asepr.training.group.comm import Comm
from asepr.training.config import TrainConfig
from asepr.training.graph.data import load_local_graph
from asepr.training.loop.distributed import train_rounds

TINY = TrainConfig(hidden=8, rounds=2, local_epochs=1, threads=1, seed=1, feature_norm="none", eval_mode="local")


@pytest.fixture(scope="module")
def trained(tmp_path_factory) -> tuple[Path, Path]:
    """A small graph in 2 partitions, and a run of 2 rounds on partition 0 (rounds 0 and 1 kept)."""
    root = tmp_path_factory.mktemp("pointer")
    generate(root / "in", SynthConfig(num_nodes=400, num_edges=1600, num_classes=3, dim=8, seed=2))
    partition_to_store(root / "in", root / "out", PartitionConfig(num_parts=2, algo="hash"))
    train_rounds(load_local_graph(root / "out", [0]), root / "run", TINY, comm=Comm())
    return root / "out", root / "run"


def _resume(out: Path, run: Path) -> None:
    train_rounds(load_local_graph(out, [0]), run, dataclasses.replace(TINY, rounds=4), comm=Comm(), resume=True)


@pytest.mark.parametrize("pointer", [{"round": 2, "path": "round-00001"}, {"round": 0, "path": "round-00001"}])
def test_a_pointer_whose_round_its_checkpoint_did_not_record_is_refused(trained, tmp_path, pointer):
    import shutil

    out, original = trained
    run = tmp_path / "run"
    shutil.copytree(original, run)
    latest = run / "checkpoints" / "latest.json"
    assert json.loads(latest.read_text()) == {"path": "round-00001", "round": 1}
    latest.write_text(json.dumps(pointer))
    metrics = (run / "metrics.csv").read_bytes()
    with pytest.raises(StoreError) as refused:
        _resume(out, run)
    message = str(refused.value)
    assert f"checkpoint {run / 'checkpoints' / 'round-00001'}" in message
    assert f"the round {pointer['round']} that {latest} names" in message and "round 1 recorded" in message
    assert "without --resume" in message
    assert (run / "metrics.csv").read_bytes() == metrics  # nothing trained on, nothing written


def test_a_pointer_that_agrees_with_its_checkpoint_resumes(trained, tmp_path):
    import shutil

    out, original = trained
    run = tmp_path / "run"
    shutil.copytree(original, run)
    _resume(out, run)
    assert [r["round"] for r in RunDir(run).read_metrics()] == [1, 2, 3, 4]
