"""The run directory: config, per-round checkpoints and the metrics log.

Layout (``RUN``)::

    RUN/
      .asepr.lock              the lock of the run using the directory (:meth:`RunDir.lock`)
      config.json              the resolved TrainConfig of the latest launch (``asepr train``
                               writes it; the trainers read it back)
      run.json                 the TrainConfig, the partition output, world size (first start)
      metrics.csv              one row per evaluated round (rank 0; replaced atomically)
      placement.json           each round's world size and every rank's partitions (rank 0)
      checkpoints/
        round-00004/
          rank-00000.pt        each rank's local model θ_r, Adam state, byte counters
          rank-00001.pt
          global.pt            (rank 0, after every rank's file exists) round, θ_g,
                               partition generation, elapsed seconds, metrics rows so far
        latest.json            {"round": 4, "path": "round-00004"}: replaced atomically last

A round's checkpoint is complete once ``latest.json`` names it, and only then: a rank
killed mid-write, or a full disk, leaves the previous round as the latest (the disk error
is raised as :class:`asepr.storage.errors.FileSystemError`, naming the file and that round). The two newest complete
rounds are kept. A resume follows the pointer: the directory ``latest.json`` names must
lie inside ``checkpoints/`` (:func:`asepr.storage.commit.confine.confined_join`). Files are written
through :class:`asepr.training.rundir.run_files.RunFiles`: locally by
:func:`asepr.storage.commit.atomic.write_bytes_atomic` (a private temporary file renamed into place);
on an object store (``--run-dir s3://bucket/runs/x``) each file is one PUT, atomic by
the store, each round under its own prefix and the pointer last. Checkpoints are read with
``torch.load(weights_only=True)``: tensors, numbers, strings, lists and dicts only, never
arbitrary pickles. A checkpoint whose tensors do not fit the model is refused with an
error naming the file (:func:`expect_keys`, :func:`expect_tensor`,
:func:`load_optimizer_state`).

One run at a time uses a run directory: :meth:`RunDir.lock` is the output's lock
(:class:`asepr.storage.commit.lock.OutputLock`) on a local ``RUN``, the lease object
``RUN/.asepr.lease`` (:class:`asepr.storage.commit.lease.Lease`) on an object store. The launcher takes it and passes its token
to the trainers in :data:`LOCK_TOKEN_VARIABLE`; a trainer started without it (plain
``torchrun``, SLURM) takes the lock itself on rank 0 (:meth:`RunDir.claim`).
"""

from __future__ import annotations

import contextlib
import csv
import io
import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch

from asepr.storage.commit.atomic import dumps_json
from asepr.storage.commit.lease import LEASE_NAME, Lease
from asepr.storage.commit.lock import OutputLock
from asepr.storage.errors import AseprError, StoreError, format_problem, os_error_problem
from asepr.storage.locations.fs import join, url_of
from asepr.storage.partitions.manifest import LOCK_NAME
from asepr.training.config import TrainConfig
from asepr.training.rundir.run_files import RunFiles

__all__ = ["CONFIG", "LOCK_TOKEN_VARIABLE", "RunDir", "TrainerError", "expect_keys", "expect_tensor",
           "load_optimizer_state"]

LATEST = "latest.json"
CONFIG = "config.json"
CHECKPOINTS = "checkpoints"
METRICS = "metrics.csv"
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
    """One training run's directory (see the module docstring), a path or an fsspec URL.

    ``storage_options`` are fsspec's for a run directory on an object store.
    """

    def __init__(self, path: str | Path, storage_options: dict | None = None):
        self.files = RunFiles(path, storage_options)
        #: A Path for a local run directory, the URL for one on an object store.
        self.path = self.files.path
        self.checkpoints = self.files.where(CHECKPOINTS)
        self._pointer: tuple[int, str] | None = None

    # -- the lock --------------------------------------------------------------------
    def lock(self) -> OutputLock | Lease:
        """The run directory's lock (acquire it with ``with``): an OS lock on a local
        directory (created here), a lease object on an object store."""
        if not self.files.local:
            fs, base = self.files.fs, self.files.base
            return Lease(fs, join(base, LEASE_NAME), url_of(fs, join(base, LEASE_NAME)))
        self.path.mkdir(parents=True, exist_ok=True)
        return OutputLock(self.path, what="run directory")

    @contextlib.contextmanager
    def claim(self) -> Iterator[None]:
        """Hold the lock for the block, unless the launcher holds it for this process.

        The launcher's token in :data:`LOCK_TOKEN_VARIABLE` equal to the lock's means
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
            record = json.loads(self.files.read(LOCK_NAME if self.files.local else LEASE_NAME))
        except (OSError, ValueError):
            return None
        return record.get("token") if isinstance(record, dict) else None

    # -- config.json and run.json -------------------------------------------------------
    def write_config(self, config: TrainConfig) -> Path | str:
        """Write ``config`` as ``RUN/config.json`` (atomically); return its path."""
        self.files.write(CONFIG, dumps_json(config.to_dict()))
        return self.files.where(CONFIG)

    def write_run_info(self, info: dict[str, Any]) -> None:
        self.files.write("run.json", dumps_json(info))

    def read_run_info(self) -> dict[str, Any] | None:
        try:
            return json.loads(self.files.read("run.json"))
        except FileNotFoundError:
            return None

    # -- checkpoints -----------------------------------------------------------------
    def _round_name(self, round_index: int) -> str:
        """Round ``round_index``'s directory below the run directory: the one the pointer
        names for the latest round (read by :meth:`latest_round`), else ``round-NNNNN``."""
        if self._pointer is not None and self._pointer[0] == round_index:
            return self._pointer[1]
        return f"{CHECKPOINTS}/round-{round_index:05d}"

    def round_dir(self, round_index: int) -> Path | str:
        return self.files.where(self._round_name(round_index))

    def global_path(self, round_index: int) -> Path | str:
        """Round ``round_index``'s ``global.pt``."""
        return self.files.where(f"{self._round_name(round_index)}/global.pt")

    def rank_path(self, round_index: int, rank: int) -> Path | str:
        """Round ``round_index``'s ``rank-NNNNN.pt`` of ``rank``."""
        return self.files.where(f"{self._round_name(round_index)}/rank-{rank:05d}.pt")

    def _save(self, obj: dict[str, Any], relative: str, round_index: int) -> None:
        buf = io.BytesIO()
        torch.save(obj, buf)
        links = (CHECKPOINTS, f"{CHECKPOINTS}/round-{round_index:05d}")
        self.files.write(relative, buf.getvalue(), refuse_links=links)

    def _load(self, relative: str) -> dict[str, Any]:
        path = self.files.where(relative)
        try:
            return torch.load(io.BytesIO(self.files.read(relative)), weights_only=True, map_location="cpu")
        except FileNotFoundError as exc:
            raise StoreError(
                format_problem(f"checkpoint {path}", "a file of the latest complete round", "no such file",
                               "the run directory was modified; start a new run without --resume.")
            ) from exc
        except AseprError:
            raise
        except Exception as exc:
            raise StoreError(
                format_problem(f"checkpoint {path}", "a checkpoint written by `asepr train`",
                               f"unreadable ({type(exc).__name__}: {exc})",
                               "start a new run, or delete that round directory to resume from the one before.")
            ) from exc

    @contextlib.contextmanager
    def _writing(self) -> Iterator[None]:
        """A full disk or an unwritable run directory while a round is saved becomes the
        project's error (:func:`asepr.storage.errors.os_error_problem`), naming the file and the
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
        with self._writing():
            self._save({"round": round_index, "rank": rank, **state},
                       f"{CHECKPOINTS}/round-{round_index:05d}/rank-{rank:05d}.pt", round_index)

    def commit(self, round_index: int, world_size: int, global_state: dict[str, Any],
               metrics_rows: list[dict[str, Any]]) -> None:
        """Rank 0, after every rank saved: write global.pt, the metrics, then the pointer ``latest.json``."""
        name = f"round-{round_index:05d}"
        d = f"{CHECKPOINTS}/{name}"
        missing = [r for r in range(world_size) if not self.files.exists(f"{d}/rank-{r:05d}.pt")]
        if missing:
            raise StoreError(format_problem(f"checkpoint {self.files.where(d)}", f"one file per rank (0..{world_size - 1})",
                                            f"ranks {missing} missing", "check the disk of the run directory."))
        with self._writing():
            self._save({"round": round_index, "metrics_rows": metrics_rows, **global_state}, f"{d}/global.pt",
                       round_index)
            self.write_metrics(metrics_rows)
            self.files.write(f"{CHECKPOINTS}/{LATEST}", dumps_json({"round": round_index, "path": name}))
        self._prune(round_index)

    def _prune(self, latest: int) -> None:
        for name in self.files.subdirectories(CHECKPOINTS, "round-"):
            try:
                r = int(name.split("-", 1)[1])
            except ValueError:
                continue
            if r <= latest - KEEP_ROUNDS or r > latest:
                self.files.remove(f"{CHECKPOINTS}/{name}")

    def latest_round(self) -> int | None:
        """The latest complete round, as the pointer ``checkpoints/latest.json`` names it
        (None before the first); its directory is the one the pointer names, which must
        lie inside ``checkpoints/``."""
        where = self.files.where(f"{CHECKPOINTS}/{LATEST}")
        try:
            pointer = json.loads(self.files.read(f"{CHECKPOINTS}/{LATEST}"))
            round_index = int(pointer["round"])
            relative = pointer.get("path", f"round-{round_index:05d}")
        except FileNotFoundError:
            return None
        except (ValueError, KeyError, TypeError) as exc:
            raise StoreError(format_problem(f"{where}", '{"round": N, "path": ...}',
                                            f"unreadable ({exc})", "start a new run without --resume.")) from exc
        self._pointer = (round_index, self.files.confined(CHECKPOINTS, relative, what=f"{where} (path)"))
        return round_index

    def check_resume(self, config, world_size: int, *, any_world: bool = False) -> int:
        """The latest complete round to resume from; TrainerError if there is none, or if
        ``config`` (a TrainConfig) or ``world_size`` differ from the saved run's in a way
        that changes the result. ``any_world``: a trainer that continues at another world
        size (the survivors of a lost machine, :mod:`asepr.training.group.elastic`) accepts any."""
        saved_info, latest = self.read_run_info(), self.latest_round()
        if saved_info is None or latest is None:
            raise TrainerError(format_problem(f"run directory {self.path}", "a complete checkpoint to resume",
                                              "none", "run without --resume to start a new run."))
        conflicts = config.resume_conflicts(saved_info.get("config", {}))
        if conflicts or (not any_world and int(saved_info.get("world_size", world_size)) != world_size):
            raise TrainerError(format_problem(
                f"run directory {self.path}", "the same config and world size as the run being resumed",
                f"differences in {conflicts or ['world_size']}",
                "resume with the original flags (only --rounds may change), or start a new run."))
        return latest

    def load_global(self, round_index: int) -> dict[str, Any]:
        return self._load_round(round_index, "global.pt")

    def load_rank(self, round_index: int, rank: int) -> dict[str, Any]:
        return self._load_round(round_index, f"rank-{rank:05d}.pt")

    def _load_round(self, round_index: int, name: str) -> dict[str, Any]:
        """A file of round ``round_index``, which must record that round itself.

        The pointer ``latest.json`` names a round and a directory; a pointer whose round is
        not the one its checkpoint recorded (crafted, or left by another run) would resume
        from the wrong weights and number every later round wrongly (skipping one).
        """
        relative = f"{self._round_name(round_index)}/{name}"
        state = self._load(relative)
        recorded = state.get("round") if isinstance(state, dict) else None
        if isinstance(recorded, bool) or not isinstance(recorded, int) or recorded != round_index:
            pointer = self.files.where(f"{CHECKPOINTS}/{LATEST}")
            raise StoreError(format_problem(
                f"checkpoint {self.files.where(relative)}",
                f"the round {round_index} that {pointer} names (counted from 0)", f"round {recorded!r} recorded",
                f"{pointer} does not belong to this checkpoint (edited, or copied from another run): start a "
                "new run without --resume, or restore the run directory from a copy."))
        return state

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
        self.files.write(METRICS, buf.getvalue().encode())

    def read_metrics(self) -> list[dict[str, Any]]:
        try:
            text = self.files.read(METRICS).decode()
        except FileNotFoundError:
            return []
        rows = list(csv.DictReader(io.StringIO(text, newline="")))
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
        rounds = self.files.subdirectories(CHECKPOINTS, "round-")
        try:
            latest = self.latest_round()
        except StoreError:
            latest, found = None, [f"a damaged {self.files.where(f'{CHECKPOINTS}/{LATEST}')}"]
        if latest is not None:
            found.append(f"checkpoints up to round {latest + 1}")
        elif rounds:
            found.append(f"{len(rounds)} unfinished checkpoint director{'ies' if len(rounds) > 1 else 'y'}")
        if self.files.exists(METRICS):
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
        self.files.remove(CHECKPOINTS, refuse_link=True)
        for name in (METRICS, "run.json", "placement.json"):
            self.files.remove(name)
        self._pointer = None
