"""A crafted manifest is refused once, where it is read, naming the field.

``num_parts`` sizes arrays in every reader, and the partition entries are looked up
by ``part_id``: a huge count, a count that disagrees with the entries, or entries that
repeat or skip a partition must be refused with the manifest's path, the field,
what was expected and what was found, never a MemoryError or a KeyError.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from asepr.pipeline import ingest, verify_output
from asepr.storage.errors import StoreError
from asepr.storage.partitions.manifest import MANIFEST_NAME, read_manifest
from tests.security import increments
from asepr.workflows.cli import main


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> dict:
    return increments.tiny_output(tmp_path_factory.mktemp("manifest"))


def _crafted(tiny: dict, tmp_path: Path, edit) -> Path:
    out = tmp_path / "out"
    shutil.copytree(tiny["out"], out)
    manifest = json.loads((out / MANIFEST_NAME).read_text())
    edit(manifest)
    (out / MANIFEST_NAME).write_text(json.dumps(manifest))
    return out


def _huge(manifest: dict) -> None:
    manifest["num_parts"] = 10**12


def _duplicate(manifest: dict) -> None:
    manifest["partitions"][1] = dict(manifest["partitions"][0])


def _fewer(manifest: dict) -> None:
    manifest["num_parts"] = 3


CASES = {
    "huge num_parts": (_huge, "key 'num_parts'", "expected an integer from 1 to 32767, found 1000000000000"),
    "duplicated entry": (_duplicate, "key 'partitions[1].part_id'", "expected 1 (the entries are unique and in "
                                                                    "partition order), found 0"),
    "count disagrees": (_fewer, "key 'partitions'", "expected a list of 3 entries"),
    "format_version as text": (lambda m: m.update(format_version="1"), "key 'format_version'",
                               "expected an integer >= 1, found '1'"),
    "generation as text": (lambda m: m.update(generation="3"), "key 'generation'",
                           "expected an integer >= 1, found '3'"),
    "num_nodes as text": (lambda m: m.update(num_nodes="2e9"), "key 'num_nodes'",
                          "expected an integer >= 0, found '2e9'"),
    "counts as text": (lambda m: m["partitions"][0].update(counts="many"), "key 'partitions[0].counts'",
                       "expected an object of integers >= 0, found 'many'"),
    "a count as text": (lambda m: m["partitions"][1]["counts"].update(edges="12"), "key 'partitions[1].counts'",
                        "expected an object of integers >= 0"),
    "entry generation as text": (lambda m: m["partitions"][0].update(generation="1"),
                                 "key 'partitions[0].generation'", "expected an integer >= 1, found '1'"),
    "state generation as text": (lambda m: m["state"].update(generation=[1]), "key 'state.generation'",
                                 "expected an integer >= 1, found [1]"),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_crafted_manifest_is_refused_by_every_reader(tiny, tmp_path, capsys, case):
    edit, field, detail = CASES[case]
    out = _crafted(tiny, tmp_path, edit)
    where = f"file {out / MANIFEST_NAME}, {field}"
    for read in (lambda: read_manifest(out), lambda: ingest(out, tiny["edges"][0])):
        with pytest.raises(StoreError) as info:
            read()
        assert where in str(info.value) and detail in str(info.value)
        assert "asepr partition ... --overwrite" in str(info.value)
    try:
        report = verify_output(out)
    except StoreError as exc:
        assert where in str(exc) and detail in str(exc)
    else:
        assert not report.ok and where in report.summary()
    assert main(["verify", str(out)]) == 1
    captured = capsys.readouterr()
    assert where in captured.out + captured.err and "Traceback" not in captured.err


@pytest.mark.parametrize(("content", "found"), [
    (b"[" * 200_000 + b"]" * 200_000, "JSON nested too deeply"),
    (b'{"format": "' + b"a" * (64 << 20) + b'"}', "more than 67,108,864 bytes"),
], ids=["deeply-nested", "oversized"])
def test_a_json_bomb_for_a_manifest_is_refused_naming_the_file(tiny, tmp_path, capsys, content, found):
    out = tmp_path / "out"
    shutil.copytree(tiny["out"], out)
    (out / MANIFEST_NAME).write_bytes(content)
    with pytest.raises(StoreError) as info:
        read_manifest(out)
    assert f"file {out / MANIFEST_NAME}: expected a JSON manifest, found {found}" in str(info.value)
    assert main(["verify", str(out)]) == 1
    assert "Traceback" not in capsys.readouterr().err
