"""The run directory: config, per-round checkpoints and the metrics log.

Layout (``RUN``)::

    RUN/
      run.json                 the TrainConfig, the partition output, world size (first start)
      metrics.csv              one row per evaluated round (rank 0; replaced atomically)
      checkpoints/
        round-00004/
          rank-00000.pt        each rank's local model θ_r, Adam state, byte counters
          rank-00001.pt
          global.pt            (rank 0, after every rank's file exists) round, θ_g,
                               partition generation, elapsed seconds, metrics rows so far
        latest.json            {"round": 4, "path": "round-00004"}: replaced atomically last

A round's checkpoint is complete once ``latest.json`` names it, and only then: a rank
killed mid-write leaves the previous round as the latest. The two newest complete
rounds are kept. Files are written by ``torch.save`` to a temporary name and renamed,
and read with ``torch.load(weights_only=True)``: tensors, numbers, strings, lists and
dicts only, never arbitrary pickles.
"""

from __future__ import annotations

import csv
import io
import json
import os
import shutil
from pathlib import Path
from typing import Any

import torch

from storage.errors import StoreError, format_problem

__all__ = ["RunDir", "TrainerError"]

LATEST = "latest.json"
KEEP_ROUNDS = 2


class TrainerError(StoreError):
    """A trainer could not continue (a peer died, a collective timed out, bad run directory)."""


def write_bytes_atomic(path: Path, data: bytes) -> None:
    """Write ``data`` to a private temporary sibling, fsync, and rename it into place."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.partial-{os.getpid()}")
    with open(tmp, "wb") as fh:
        fh.write(data)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)


class RunDir:
    """One training run's directory (see the module docstring)."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self.checkpoints = self.path / "checkpoints"

    # -- run.json --------------------------------------------------------------------
    def write_run_info(self, info: dict[str, Any]) -> None:
        self.path.mkdir(parents=True, exist_ok=True)
        write_bytes_atomic(self.path / "run.json", json.dumps(info, indent=2, sort_keys=True).encode())

    def read_run_info(self) -> dict[str, Any] | None:
        try:
            return json.loads((self.path / "run.json").read_text())
        except FileNotFoundError:
            return None

    # -- checkpoints -----------------------------------------------------------------
    def round_dir(self, round_index: int) -> Path:
        return self.checkpoints / f"round-{round_index:05d}"

    @staticmethod
    def _save(obj: dict[str, Any], path: Path) -> None:
        buf = io.BytesIO()
        torch.save(obj, buf)
        write_bytes_atomic(path, buf.getvalue())

    @staticmethod
    def _load(path: Path) -> dict[str, Any]:
        try:
            return torch.load(path, weights_only=True, map_location="cpu")
        except FileNotFoundError as exc:
            raise StoreError(
                format_problem(f"checkpoint {path}", "a file of the latest complete round", "no such file",
                               "the run directory was modified; start a new run without --resume.")
            ) from exc
        except Exception as exc:
            raise StoreError(
                format_problem(f"checkpoint {path}", "a checkpoint written by `asepr train`",
                               f"unreadable ({type(exc).__name__}: {exc})",
                               "start a new run, or delete that round directory to resume from the one before.")
            ) from exc

    def save_rank(self, round_index: int, rank: int, state: dict[str, Any]) -> None:
        d = self.round_dir(round_index)
        d.mkdir(parents=True, exist_ok=True)
        self._save({"round": round_index, "rank": rank, **state}, d / f"rank-{rank:05d}.pt")

    def commit(self, round_index: int, world_size: int, global_state: dict[str, Any],
               metrics_rows: list[dict[str, Any]]) -> None:
        """Rank 0, after every rank saved: write global.pt, the metrics, then latest.json."""
        d = self.round_dir(round_index)
        missing = [r for r in range(world_size) if not (d / f"rank-{r:05d}.pt").exists()]
        if missing:
            raise StoreError(format_problem(f"checkpoint {d}", f"one file per rank (0..{world_size - 1})",
                                            f"ranks {missing} missing", "check the disk of the run directory."))
        self._save({"round": round_index, "metrics_rows": metrics_rows, **global_state}, d / "global.pt")
        self.write_metrics(metrics_rows)
        write_bytes_atomic(self.checkpoints / LATEST,
                           json.dumps({"round": round_index, "path": d.name}).encode())
        self._prune(round_index)

    def _prune(self, latest: int) -> None:
        for d in sorted(self.checkpoints.glob("round-*")):
            try:
                r = int(d.name.split("-", 1)[1])
            except ValueError:
                continue
            if r <= latest - KEEP_ROUNDS or r > latest:
                shutil.rmtree(d, ignore_errors=True)

    def latest_round(self) -> int | None:
        try:
            return int(json.loads((self.checkpoints / LATEST).read_text())["round"])
        except FileNotFoundError:
            return None
        except (ValueError, KeyError, TypeError) as exc:
            raise StoreError(format_problem(f"{self.checkpoints / LATEST}", '{"round": N, "path": ...}',
                                            f"unreadable ({exc})", "start a new run without --resume.")) from exc

    def check_resume(self, config, world_size: int) -> int:
        """The latest complete round to resume from; TrainerError if there is none, or if
        ``config`` (a TrainConfig) or ``world_size`` differ from the saved run's in a way
        that changes the result."""
        saved_info, latest = self.read_run_info(), self.latest_round()
        if saved_info is None or latest is None:
            raise TrainerError(format_problem(f"run directory {self.path}", "a complete checkpoint to resume",
                                              "none", "run without --resume to start a new run."))
        conflicts = config.resume_conflicts(saved_info.get("config", {}))
        if conflicts or int(saved_info.get("world_size", world_size)) != world_size:
            raise TrainerError(format_problem(
                f"run directory {self.path}", "the same config and world size as the run being resumed",
                f"differences in {conflicts or ['world_size']}",
                "resume with the original flags (only --rounds may change), or start a new run."))
        return latest

    def load_global(self, round_index: int) -> dict[str, Any]:
        return self._load(self.round_dir(round_index) / "global.pt")

    def load_rank(self, round_index: int, rank: int) -> dict[str, Any]:
        return self._load(self.round_dir(round_index) / f"rank-{rank:05d}.pt")

    # -- metrics ---------------------------------------------------------------------
    def write_metrics(self, rows: list[dict[str, Any]]) -> None:
        if not rows:
            return
        columns: list[str] = []
        for row in rows:
            columns += [k for k in row if k not in columns]
        buf = io.StringIO()
        writer = csv.DictWriter(buf, fieldnames=columns, lineterminator="\n")
        writer.writeheader()
        writer.writerows(rows)
        write_bytes_atomic(self.path / "metrics.csv", buf.getvalue().encode())

    def read_metrics(self) -> list[dict[str, Any]]:
        path = self.path / "metrics.csv"
        if not path.exists():
            return []
        with open(path, newline="") as f:
            rows = list(csv.DictReader(f))
        out = []
        for row in rows:
            parsed: dict[str, Any] = {}
            for k, v in row.items():
                try:
                    parsed[k] = int(v)
                except (TypeError, ValueError):
                    try:
                        parsed[k] = float(v)
                    except (TypeError, ValueError):
                        parsed[k] = v
            out.append(parsed)
        return out

    def clear(self) -> None:
        """Remove the checkpoints and metrics of a previous run (a fresh start)."""
        shutil.rmtree(self.checkpoints, ignore_errors=True)
        for name in ("metrics.csv", "run.json"):
            with_path = self.path / name
            if with_path.exists():
                os.remove(with_path)
