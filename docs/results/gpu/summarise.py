"""The table and the checks of ``check.sh``: one row per run under WORK/runs."""

from __future__ import annotations

import sys
from pathlib import Path

from asepr.training.rundir.checkpoint import RunDir

#: The majority class's share of the test set, which every run must beat by far.
MAJORITY = {"cora": 0.30, "amazon-computers": 0.37}


def main(work: Path) -> None:
    rows, by_case = [], {}
    for path in sorted((work / "runs").iterdir()):
        run = RunDir(path)
        info, last = run.read_run_info(), run.read_metrics()[-1]
        config = info["config"]
        case, device = path.name.rsplit("-", 1)
        epochs = float(last["epoch"])
        seconds = sum(float(r["train_seconds"]) for r in run.read_metrics())
        rows.append((case, device, config["device"], info.get("world_size", 1), float(last["test"]), seconds / epochs))
        by_case.setdefault(case, {})[device] = float(last["test"])
        dataset = case.split("-k")[0].split("-central")[0]
        assert float(last["test"]) >= MAJORITY[dataset] + 0.3, f"{path.name} did not learn: test {last['test']}"
        if device == "cuda":
            assert config["device"] == "cuda", f"{path.name} ran on {config['device']}"
    lines = ["| case | device | ranks | test | train s / epoch |", "|---|---|---|---|---|"]
    lines += [f"| {case} | {device} | {ranks} | {test:.4f} | {sec:.3f} |" for case, _, device, ranks, test, sec in rows]
    table = "\n".join(lines)
    print(table)
    (work / "gpu-check.md").write_text(table + "\n")
    for case, tests in by_case.items():
        if "cuda" in tests:
            assert abs(tests["cuda"] - tests["cpu"]) <= 0.02, f"{case}: the GPU and CPU runs disagree: {tests}"
    print("asepr gpu check: passed")


if __name__ == "__main__":
    main(Path(sys.argv[1]))
