"""The cluster file: each machine's relative compute and memory, one machine per rank.

A cluster of mixed machines is described once, in the format ``asepr partition
--cluster`` reads (one partition per machine), and ``asepr train --cluster FILE`` reads
it too: rank r runs on machine r and its local steps follow that machine's compute.
Training may not import the partitioner, so the reader it uses lives here, in the layer
both share.

TOML (``.toml``) or JSON (``.json``; any other name is tried as JSON, then as TOML)::

    # one [[machine]] table per machine, in rank (and partition) order
    [[machine]]
    name = "new"        # optional, for messages
    compute = 1.0       # relative speed (any positive scale; only the ratios count)
    memory = 64         # memory in any one unit for all machines (partitioning only)

    [[machine]]
    name = "old"
    compute = 0.33

JSON has the same shape: ``{"machine": [{"compute": 1.0}, {"compute": 0.33}]}``.
``compute`` and ``memory`` are each given for every machine or for none: a machine
without a value would otherwise have to be guessed equal to the others. Training reads
``compute`` (equal speeds where no machine gives it); partitioning reads both
(:func:`asepr.pipeline.capacity.read_cluster_file`). Every error names the file, the machine
and the key, what was expected and what was found.
"""

from __future__ import annotations

import json
import math
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from asepr.storage.errors import InputError, format_problem

__all__ = ["Cluster", "Machine", "parse_positive_list", "read_cluster"]

_FIX = "write one [[machine]] table per machine with compute = a number > 0 (see docs/guide/training.md)."


def parse_positive_list(text: str) -> tuple[float, ...]:
    """``"2, 1,0.5"`` -> ``(2.0, 1.0, 0.5)``: one finite number > 0 per machine, partition
    or rank (``--capacities``, ``--speeds``, ``--slowdown``). ValueError carrying the first
    entry that is not one; each flag words its own message."""
    values = []
    for part in str(text).split(","):
        try:
            value = float(part)
        except ValueError:
            value = math.nan
        if not (math.isfinite(value) and value > 0):
            raise ValueError(part.strip())
        values.append(value)
    return tuple(values)


@dataclass(frozen=True)
class Machine:
    """One machine: its name, relative compute and memory (None where the file gives none)."""

    name: str
    compute: float | None = None
    memory: float | None = None


@dataclass(frozen=True)
class Cluster:
    """The machines of a cluster file, in rank order."""

    machines: tuple[Machine, ...]
    source: str = "cluster file"

    def rank_speeds(self) -> tuple[float, ...]:
        """Each trainer rank's relative compute: rank r runs on machine r (all equal when
        the file gives no compute)."""
        return tuple(1.0 if m.compute is None else m.compute for m in self.machines)

    def column(self, key: str) -> tuple[float, ...] | None:
        """Every machine's ``compute`` or ``memory``, or None when the file gives none."""
        values = tuple(getattr(m, key) for m in self.machines)
        return None if values[0] is None else values


def _number(where: str, key: str, value: Any) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
        raise InputError(format_problem(f"{where}, {key!r}", "a number > 0", repr(value), _FIX))
    return float(value)


def _machine(where: str, entry: Any, index: int) -> Machine:
    if not isinstance(entry, dict):
        raise InputError(format_problem(f"{where}, machine {index}", "a table of name, compute, memory",
                                        type(entry).__name__, _FIX))
    unknown = sorted(set(entry) - {"name", "compute", "memory"})
    if unknown:
        raise InputError(format_problem(f"{where}, machine {index}", "the keys name, compute, memory",
                                        f"unknown keys {unknown}", _FIX))
    name = str(entry.get("name", f"machine {index}"))
    at = f"{where}, machine {name!r}"
    return Machine(name, _number(at, "compute", entry.get("compute")), _number(at, "memory", entry.get("memory")))


def _parse(path: Path, text: str) -> Any:
    """The file's content: JSON for ``.json``, TOML for ``.toml``, else whichever parses."""
    order = ("toml",) if path.suffix == ".toml" else ("json",) if path.suffix == ".json" else ("json", "toml")
    problem = ""
    for kind in order:
        try:
            return json.loads(text) if kind == "json" else tomllib.loads(text)
        except ValueError as exc:  # json.JSONDecodeError and tomllib.TOMLDecodeError are ValueErrors
            problem = f"invalid {kind.upper()} ({exc})"
    raise InputError(format_problem(f"cluster file {path}", "TOML or JSON", problem, _FIX))


def read_cluster(path: str | Path) -> Cluster:
    """The :class:`Cluster` of a TOML or JSON cluster file (see the module docstring).

    Raises
    ------
    InputError
        Naming the file (and the machine and key): missing, unreadable, not TOML or
        JSON, no machines, an unknown key, a value out of range, or a key given for
        some machines only.
    """
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as exc:
        raise InputError(format_problem(f"cluster file {path}", "a readable TOML or JSON file",
                                        exc.strerror or str(exc), "pass the path of the cluster file.")) from None
    data = _parse(path, text)
    machines = data.get("machine") if isinstance(data, dict) else None
    if not isinstance(machines, list) or not machines:
        found = "no 'machine'" if machines is None else repr(machines)[:60]
        raise InputError(format_problem(f"cluster file {path}", "a non-empty list of tables 'machine'", found, _FIX))
    where = f"cluster file {path}"
    cluster = Cluster(tuple(_machine(where, entry, i) for i, entry in enumerate(machines)), where)
    for key in ("compute", "memory"):
        missing = [m.name for m in cluster.machines if getattr(m, key) is None]
        if missing and len(missing) < len(cluster.machines):
            raise InputError(format_problem(f"{where}, {key!r}", "a value for every machine or for none",
                                            f"none for {', '.join(repr(n) for n in missing[:3])}"
                                            + (" ..." if len(missing) > 3 else ""), _FIX))
    return cluster
