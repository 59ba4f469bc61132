"""The run directory: config, per-round checkpoints and the metrics log.

Layout (``RUN``)::

    RUN/
      .asepr.lock              the lock of the run using the directory (:meth:`RunDir.lock`)
      config.json              the resolved TrainConfig of the latest launch (``asepr train``
                               writes it; the trainers read it back)
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
killed mid-write, or a full disk, leaves the previous round as the latest (the disk error
is raised as :class:`storage.errors.FileSystemError`, naming the file and that round). The two newest complete
rounds are kept. Files are written by :func:`storage.atomic.write_bytes_atomic` (a
private temporary file renamed into place), and checkpoints read with
``torch.load(weights_only=True)``: tensors, numbers, strings, lists and dicts only, never
arbitrary pickles. A checkpoint whose tensors do not fit the model is refused with an
error naming the file (:func:`expect_keys`, :func:`expect_tensor`,
:func:`load_optimizer_state`).

One run at a time uses a run directory: :meth:`RunDir.lock` is the output's lock
(:class:`storage.lock.OutputLock`) on ``RUN``. The launcher takes it and passes its token
to the trainers in :data:`LOCK_TOKEN_VARIABLE`; a trainer started without it (plain
``torchrun``, SLURM) takes the lock itself on rank 0 (:meth:`RunDir.claim`).
"""

from __future__ import annotations

import contextlib
import csv
import io
import json
import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch

from storage.atomic import refuse_symlink, write_bytes_atomic, write_json_atomic
from storage.errors import StoreError, format_problem, os_error_problem
from storage.lock import OutputLock
from storage.manifest import LOCK_NAME
from training.config import TrainConfig

__all__ = ["CONFIG", "LOCK_TOKEN_VARIABLE", "RunDir", "TrainerError", "expect_keys", "expect_tensor",
           "load_optimizer_state"]

LATEST = "latest.json"
CONFIG = "config.json"
KEEP_ROUNDS = 2
#: The environment variable in which a launcher holding the run directory's lock passes
#: the lock's token to the trainers it starts.
LOCK_TOKEN_VARIABLE = "ASEPR_RUN_LOCK_TOKEN"


class TrainerError(StoreError):
    """A trainer could not continue (a peer died, a collective timed out, bad run directory)."""


def _unfit(path: Path, what: str, expected: str, found: str) -> StoreError:
    return StoreError(format_problem(f"checkpoint {path}, {what}", expected, found,
                                     "start a new run, or delete that round directory to resume from the one "
                                     "before."))


def expect_keys(path: Path, state: Any, keys: tuple[str, ...]) -> None:
    """StoreError naming the checkpoint ``path`` unless ``state`` is a dict holding every key."""
    missing = [k for k in keys if k not in state] if isinstance(state, dict) else list(keys)
    if missing:
        raise _unfit(path, "its entries", f"the entries {list(keys)}", f"none for {missing}")


def expect_tensor(path: Path, state: dict[str, Any], key: str, shape: tuple[int, ...]) -> torch.Tensor:
    """``state[key]``, a tensor of ``shape`` read from the checkpoint ``path``; StoreError naming it otherwise."""
    value = state.get(key)
    if not isinstance(value, torch.Tensor):
        raise _unfit(path, repr(key), f"a tensor of shape {list(shape)}", type(value).__name__)
    if tuple(value.shape) != tuple(shape):
        raise _unfit(path, repr(key), f"a tensor of shape {list(shape)} (this model)", f"shape {list(value.shape)}")
    return value


def load_optimizer_state(path: Path, optimizer: torch.optim.Optimizer, state: Any) -> None:
    """Load the optimiser state saved in the checkpoint ``path``, after checking that it fits.

    Every parameter's state tensors (Adam's moments) must have the parameter's shape: a
    misfit would otherwise load silently and fail at the next step.

    Raises
    ------
    StoreError
        Naming ``path``: not an optimiser state, other parameter groups, or a moment of
        another shape.
    """
    params = [p for group in optimizer.param_groups for p in group["params"]]
    if not isinstance(state, dict) or not isinstance(state.get("state"), dict):
        raise _unfit(path, "'optimizer'", "an optimizer state_dict", type(state).__name__)
    for index, entry in state["state"].items():
        if not isinstance(index, int) or not 0 <= index < len(params) or not isinstance(entry, dict):
            raise _unfit(path, "'optimizer'", f"the state of {len(params)} parameters", f"an entry {index!r}")
        for name, value in entry.items():
            if isinstance(value, torch.Tensor) and value.dim() and value.shape != params[index].shape:
                raise _unfit(path, f"'optimizer' state {index} {name!r}", f"shape {list(params[index].shape)}",
                             f"shape {list(value.shape)}")
    try:
        optimizer.load_state_dict(state)
    except (ValueError, KeyError, TypeError, RuntimeError) as exc:
        raise _unfit(path, "'optimizer'", "the state of this model's optimizer", f"{type(exc).__name__}: {exc}") \
            from None


class RunDir:
    """One training run's directory (see the module docstring)."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self.checkpoints = self.path / "checkpoints"

    # -- the lock --------------------------------------------------------------------
    def lock(self) -> OutputLock:
        """The run directory's lock (created with the directory; acquire it with ``with``)."""
        self.path.mkdir(parents=True, exist_ok=True)
        return OutputLock(self.path, what="run directory")

    @contextlib.contextmanager
    def claim(self) -> Iterator[None]:
        """Hold the lock for the block, unless the launcher holds it for this process.

        The launcher's token in :data:`LOCK_TOKEN_VARIABLE` equal to the lock file's means
        the lock is already ours; otherwise the lock is taken (and a second run refused).
        """
        token = os.environ.get(LOCK_TOKEN_VARIABLE)
        if token and self._lock_token() == token:
            yield
            return
        with self.lock():
            yield

    def _lock_token(self) -> str | None:
        try:
            record = json.loads((self.path / LOCK_NAME).read_text())
        except (OSError, ValueError):
            return None
        return record.get("token") if isinstance(record, dict) else None

    # -- config.json -----------------------------------------------------------------
    def write_config(self, config: TrainConfig) -> Path:
        """Write ``config`` as ``RUN/config.json`` (atomically); return its path."""
        self.path.mkdir(parents=True, exist_ok=True)
        write_json_atomic(self.path / CONFIG, config.to_dict())
        return self.path / CONFIG

    # -- run.json --------------------------------------------------------------------
    def write_run_info(self, info: dict[str, Any]) -> None:
        self.path.mkdir(parents=True, exist_ok=True)
        write_json_atomic(self.path / "run.json", info)

    def read_run_info(self) -> dict[str, Any] | None:
        try:
            return json.loads((self.path / "run.json").read_text())
        except FileNotFoundError:
            return None

    # -- checkpoints -----------------------------------------------------------------
    def round_dir(self, round_index: int) -> Path:
        return self.checkpoints / f"round-{round_index:05d}"

    def global_path(self, round_index: int) -> Path:
        """Round ``round_index``'s ``global.pt``."""
        return self.round_dir(round_index) / "global.pt"

    def rank_path(self, round_index: int, rank: int) -> Path:
        """Round ``round_index``'s ``rank-NNNNN.pt`` of ``rank``."""
        return self.round_dir(round_index) / f"rank-{rank:05d}.pt"

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

    @contextlib.contextmanager
    def _writing(self) -> Iterator[None]:
        """A full disk or an unwritable run directory while a round is saved becomes the
        project's error (:func:`storage.errors.os_error_problem`), naming the file and the
        complete round a ``--resume`` continues from (the files of the round being written
        are temporaries that never replace a complete one)."""
        try:
            yield
        except OSError as exc:
            try:
                latest = self.latest_round()
            except StoreError:
                latest = None
            then = (f"rerun with --resume to continue from round {latest + 1}, the latest complete one"
                    if latest is not None else "rerun the same command (no round was complete yet)")
            problem = os_error_problem(exc, then=then)
            if problem is None:
                raise
            raise problem from exc

    def save_rank(self, round_index: int, rank: int, state: dict[str, Any]) -> None:
        """Write this rank's file of round ``round_index`` (FileSystemError on a full disk)."""
        for directory in (self.checkpoints, self.round_dir(round_index)):
            refuse_symlink(directory)  # it would take the checkpoints out of the run directory
        with self._writing():
            self.round_dir(round_index).mkdir(parents=True, exist_ok=True)
            self._save({"round": round_index, "rank": rank, **state}, self.rank_path(round_index, rank))

    def commit(self, round_index: int, world_size: int, global_state: dict[str, Any],
               metrics_rows: list[dict[str, Any]]) -> None:
        """Rank 0, after every rank saved: write global.pt, the metrics, then latest.json."""
        d = self.round_dir(round_index)
        missing = [r for r in range(world_size) if not self.rank_path(round_index, r).exists()]
        if missing:
            raise StoreError(format_problem(f"checkpoint {d}", f"one file per rank (0..{world_size - 1})",
                                            f"ranks {missing} missing", "check the disk of the run directory."))
        with self._writing():
            self._save({"round": round_index, "metrics_rows": metrics_rows, **global_state},
                       self.global_path(round_index))
            self.write_metrics(metrics_rows)
            write_json_atomic(self.checkpoints / LATEST, {"round": round_index, "path": d.name})
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
        return self._load(self.global_path(round_index))

    def load_rank(self, round_index: int, rank: int) -> dict[str, Any]:
        return self._load(self.rank_path(round_index, rank))

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

    def previous_run(self) -> list[str]:
        """What a previous run left here that a fresh start would delete (empty: nothing)."""
        found = []
        rounds = sorted(self.checkpoints.glob("round-*")) if self.checkpoints.is_dir() else []
        try:
            latest = self.latest_round()
        except StoreError:
            latest, found = None, [f"a damaged {self.checkpoints / LATEST}"]
        if latest is not None:
            found.append(f"checkpoints up to round {latest + 1}")
        elif rounds:
            found.append(f"{len(rounds)} unfinished checkpoint director{'ies' if len(rounds) > 1 else 'y'}")
        if (self.path / "metrics.csv").exists():
            found.append("metrics.csv")
        return found

    def refuse_previous_run(self) -> None:
        """StoreError naming the directory and the fixes when a previous run's checkpoints or
        metrics are here: a fresh start deletes them, so it needs ``--overwrite``."""
        found = self.previous_run()
        if found:
            raise StoreError(format_problem(
                f"run directory {self.path}", "no previous run (a fresh start deletes its checkpoints)",
                f"a previous run's {' and '.join(found)}",
                "pass --resume to continue that run, --overwrite to delete it and start over, or choose "
                "another --run-dir."))

    def clear(self) -> None:
        """Remove the checkpoints and metrics of a previous run (a fresh start; the command
        line refuses it without ``--overwrite``: :meth:`refuse_previous_run`)."""
        refuse_symlink(self.checkpoints)
        shutil.rmtree(self.checkpoints, ignore_errors=True)
        for name in ("metrics.csv", "run.json"):
            with_path = self.path / name
            if with_path.exists():
                os.remove(with_path)
