"""After a failed trainer job the launcher advises ``--resume`` only when a round is
complete: a resume without one is refused, so advising it would send the user in a
circle."""

from __future__ import annotations

import pytest

from asepr.training.rundir.checkpoint import RunDir
from asepr.training.group.comm import Comm
from asepr.training.config import TrainConfig
from asepr.training.graph.data import load_local_graph
from asepr.training.loop.distributed import train_rounds
from asepr.workflows.cli import main
from asepr.workflows.launch import rerun_advice

TINY = TrainConfig(hidden=8, rounds=1, local_epochs=1, threads=1, seed=1, feature_norm="none", eval_mode="local")


def test_no_resume_is_advised_before_a_round_is_complete(tmp_path):
    runs = RunDir(tmp_path / "run")
    advice = rerun_advice(runs)
    assert "--resume" not in advice and "nothing to resume" in advice and "--overwrite" not in advice
    (tmp_path / "run" / "checkpoints" / "round-00000").mkdir(parents=True)  # a round the job left unfinished
    advice = rerun_advice(runs)
    assert "--resume" not in advice and "--overwrite" in advice and "1 unfinished checkpoint directory" in advice


def test_resume_is_advised_from_the_last_complete_round(cora_parts, tmp_path):
    graph = load_local_graph(cora_parts(2), [0])
    train_rounds(graph, tmp_path / "run", TINY, comm=Comm())
    assert rerun_advice(RunDir(tmp_path / "run")).startswith("rerun the same command with --resume to continue "
                                                            "from round 1")


@pytest.mark.slow  # a real launch whose rank is killed in its first round
def test_a_job_killed_in_its_first_round_advises_no_resume(cora_parts, tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("ASEPR_FAILPOINTS", "round:0:0=kill")
    code = main(["train", str(cora_parts(2)), "--nproc", "1", "--rounds", "2", "--local-epochs", "1", "--hidden",
                 "8", "--timeout", "60", "--run-dir", str(tmp_path / "run")])
    err = capsys.readouterr().err
    assert code == 1 and "SIGKILL" in err and "nothing to resume" in err and "--resume" not in err, err
    monkeypatch.delenv("ASEPR_FAILPOINTS")
    assert main(["train", str(cora_parts(2)), "--nproc", "1", "--rounds", "1", "--local-epochs", "1", "--hidden",
                 "8", "--timeout", "60", "--run-dir", str(tmp_path / "run"), "-q"]) == 0  # as advised
