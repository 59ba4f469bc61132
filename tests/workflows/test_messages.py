"""What the commands say where a new user trips: each message names the thing, says
what was expected and found, and points to the command that fixes it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from asepr.pipeline.inputs.synth import SynthConfig, generate
from asepr.workflows.cli import main


@pytest.fixture(scope="module")
def graph(tmp_path_factory) -> tuple[Path, Path]:
    """A small input and its committed partition output (k = 2)."""
    root = tmp_path_factory.mktemp("messages")
    inp, out = root / "in", root / "out"
    generate(inp, SynthConfig(num_nodes=300, num_edges=2400, num_classes=3, dim=4), shard_rows=2400)
    assert main(["partition", str(inp), str(out), "-k", "2", "--workers", "0", "-q"]) == 0
    return inp, out


def _error(capsys) -> str:
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err, err
    return err


def test_an_error_names_its_command_once(graph, tmp_path, capsys):
    inp, out = graph
    assert main(["partition", str(inp), str(tmp_path / "o")]) == 1
    err = _error(capsys)
    assert err == "asepr partition: error: give the number of partitions with -k K (or k in --config)."
    pytest.importorskip("torch")
    assert main(["train", str(out), "--nproc", "3"]) == 1
    err = _error(capsys)
    assert err.startswith("asepr train: error: --nproc 3 on ") and "asepr train: error: asepr" not in err


def test_a_csv_file_given_as_an_input_is_named_with_the_import_that_reads_it(tmp_path, capsys):
    csv = tmp_path / "facebook_edges.csv"
    csv.write_text("id_1,id_2\n0,1\n1,2\n")
    assert main(["partition", str(csv), str(tmp_path / "o"), "-k", "2"]) == 1
    err = _error(capsys)
    assert f"input {csv}: expected an input directory" in err and "found a file" in err
    assert f"asepr import edgelist {csv} OUT" in err and "/edges" not in err
    assert main(["validate", str(csv)]) == 1 and "asepr import edgelist" in _error(capsys)


def test_training_an_input_directory_suggests_partitioning_it(graph, capsys):
    pytest.importorskip("torch")
    inp, _ = graph
    assert main(["train", str(inp), "--nproc", "1"]) == 1
    err = _error(capsys)
    assert "found an input directory (meta.json)" in err
    assert f"asepr partition {inp} PARTS -k K" in err and f"asepr train --centralized {inp}" in err


def test_partitioning_into_a_committed_output_is_refused_before_the_plan(graph, capsys):
    inp, out = graph
    assert main(["partition", str(inp), str(out), "-k", "2", "--workers", "0"]) == 1
    captured = capsys.readouterr()
    assert "plan:" not in captured.out and captured.out == ""
    assert "expected no committed output (or --overwrite), found generation 1" in captured.err


def test_resume_says_when_nothing_is_left_and_when_it_trains_on_a_newer_generation(graph, tmp_path, capsys):
    pytest.importorskip("torch")
    from asepr.training.rundir.checkpoint import RunDir
    from asepr.workflows.commands_train import resume_note

    inp, out = graph
    run = RunDir(tmp_path / "run")
    rows = []
    for r in range(5):  # five committed rounds of one rank, trained on generation 1
        rows.append({"round": r + 1, "epoch": r + 1, "generation": 1, "val": 0.5, "test": 0.5})
        run.save_rank(r, 0, {})
        run.commit(r, 1, {}, list(rows))
    assert main(["train", str(out), "--nproc", "1", "--resume", "--rounds", "3", "--run-dir", str(tmp_path / "run")]) == 0
    said = capsys.readouterr().out.strip()
    assert said.startswith("asepr train: nothing left to do:") and "holds 5 rounds already and --rounds is 3" in said
    assert "--rounds 6 or more" in said and "round epoch" not in said  # no old table
    note = resume_note(out, run, 8)
    assert not note.done and note.text == "resuming at round 6 of 8"
    # A generation 2 of the output (here a repartition; an ingest alike): said as information.
    copy = tmp_path / "out2"
    assert main(["partition", str(inp), str(copy), "-k", "2", "--workers", "0", "-q"]) == 0
    assert main(["partition", str(inp), str(copy), "-k", "2", "--workers", "0", "-q", "--overwrite"]) == 0
    note = resume_note(copy, run, 8)
    assert note.text.startswith("resuming at round 6 of 8 on generation 2 of") and "on generation 1" in note.text


def test_summaries_count_in_words_and_the_centralized_table_has_its_own_columns():
    from asepr.workflows.commands_train import centralized_line, summary_table

    row = {"round": 1, "epoch": 1, "generation": 0, "loss": 0.5, "val": 0.7, "test": 0.6, "train_seconds": 1.0,
           "eval_seconds": 0.1, "bytes_sent_round": 0.0, "elapsed_s": 1.0, "eval_elapsed_s": 0.1,
           "metric": "accuracy", "eval_mode": "exact"}
    table = summary_table([row], "asepr")
    assert "after 1 epoch, 1 round (" in table and " gen " in table and "KiB/rank" in table
    central = summary_table([row, {**row, "round": 2, "epoch": 2}], "centralized", centralized=True)
    header = central.splitlines()[1]
    assert " gen " not in header and "KiB/rank" not in header and "after 2 epochs (" in central
    line = "round   3  gen 0  loss 0.4499  exact val accuracy 0.8701  test 0.8650  14.81 s + 0.23 s eval  sent 0.0 KiB/rank"
    assert centralized_line(line) == "round   3  loss 0.4499  exact val accuracy 0.8701  test 0.8650  14.81 s + 0.23 s eval"


def test_musae_import_says_how_many_self_loops_it_dropped(tmp_path, capsys):
    src = tmp_path / "tiny"
    src.mkdir()
    (src / "tiny_edges.csv").write_text("id_1,id_2\n0,1\n1,2\n2,2\n3,0\n")
    (src / "tiny_target.csv").write_text("id,page_type\n0,a\n1,b\n2,a\n3,b\n")
    (src / "tiny.json").write_text(json.dumps({"0": [0], "1": [1], "2": [0, 2], "3": [2]}))
    assert main(["import", "musae", str(src), str(tmp_path / "out")]) == 0
    said = capsys.readouterr().out
    assert "4 nodes, 3 edges (1 self-loop dropped)" in said
    # The label map is written inside the output, as formats.md says.
    assert (tmp_path / "out" / "label_map.json").exists()
    assert main(["import", "musae", str(src), str(tmp_path / "quiet"), "-q"]) == 0
    assert capsys.readouterr().out == ""


def test_inspect_shows_the_kept_assignment_and_wraps_the_config(graph, capsys):
    _, out = graph
    assert main(["inspect", str(out)]) == 0
    text = capsys.readouterr().out
    assert "assignment kept" in text and "from the two-phase fallback" in text
    assert "from asep's own stream (1 restream)" in text  # the default: one restream
    config = [line for line in text.splitlines() if line.startswith("config") or line.startswith(" " * 13)]
    assert len(config) > 1 and all(len(line) <= 100 for line in config)


def test_rebalance_advice_on_a_fresh_output_says_why(graph):
    from asepr.storage.partitions.manifest import read_manifest
    from asepr.workflows.commands_partition import drift_text

    _, out = graph
    manifest = read_manifest(out)
    drift = {**manifest["metrics"]["drift"], "community_balance": 1.2, "volume_over_cap": [1], "overloaded": [1],
             "rebalance_advised": True}
    text = drift_text(out, {**manifest, "metrics": {**manifest["metrics"], "drift": drift}})
    assert "rebalance advised: partition(s) 1" in text and "why on a fresh output" in text


def test_import_help_says_what_src_is_for_each_format(capsys):
    with pytest.raises(SystemExit) as done:
        main(["import", "-h"])
    assert done.value.code == 0
    text = capsys.readouterr().out
    for fmt, what in (("gnn-npz", ".npz file"), ("hetero-npz", ".npz file"), ("musae", "folder of a MUSAE"),
                      ("ogb", "OGB dataset folder"), ("edgelist", "edge list")):
        assert any(line.lstrip().startswith(fmt) and what in line for line in text.splitlines()), fmt


def test_quiet_verify_of_a_sound_output_prints_nothing(graph, capsys):
    _, out = graph
    assert main(["verify", str(out), "-q"]) == 0
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err == ""
