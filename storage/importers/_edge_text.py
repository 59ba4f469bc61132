"""Reading text edge lists block by block: file discovery, sniffing, streaming.

Per file, :func:`sniff` reads only the first lines: it skips leading comment (``#``,
``%``) and blank lines, picks the delimiter (tab, comma or semicolon if the first data
line has one, else runs of blanks), decides whether that line is a header (unless told:
it is one when its first two fields are not both integers), and names the columns to
read. :func:`read_batches` then streams the file through ``pyarrow.csv.open_csv``
starting after the comments, so memory holds one block at a time.
"""

from __future__ import annotations

import contextlib
import csv
import io
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv

from asepr.storage.errors import InputError, InputNotFoundError, SchemaError, format_problem
from asepr.storage.locations.fs import url_of

__all__ = [
    "DELIMITERS",
    "EDGE_SUFFIXES",
    "EdgeFile",
    "StringIds",
    "compression_of",
    "first_bad",
    "list_edge_files",
    "no_nulls",
    "read_batches",
    "sniff",
]

EDGE_SUFFIXES = (".csv", ".tsv", ".txt", ".edges", ".edgelist", ".el", ".dat", ".tab")
DELIMITERS = {",": ",", "\t": "\t", ";": ";", " ": " ", "comma": ",", "tab": "\t",
              "semicolon": ";", "space": " ", "whitespace": " "}
_COMPRESSIONS = {".gz": "gzip", ".bz2": "bz2", ".xz": "xz", ".zst": "zstd", ".zstd": "zstd",
                 ".lz4": "lz4"}
_ENDPOINT_NAMES = (("src", "dst"), ("source", "target"))
_TS_NAMES = ("ts", "timestamp", "time")
_INT = re.compile(r"^[+-]?\d+$")
_GLOB = re.compile(r"[*?\[]")


def compression_of(path: str) -> str | None:
    """The fsspec compression name implied by ``path``'s suffix, if any."""
    return next((name for suffix, name in _COMPRESSIONS.items() if path.endswith(suffix)), None)


def _natural_key(path: str) -> list:
    return [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", path)]


def list_edge_files(fs, path: str, url: str, exclude: str | None = None) -> list[str]:
    """The files a single path, a directory (edge-list suffixes) or a glob stands for."""
    if _GLOB.search(path):
        files = [p for p in fs.glob(path) if fs.isfile(p)]
        what = "files matching the glob"
    elif fs.isdir(path):
        files = []
        for p in fs.find(path):
            base = p.rpartition("/")[2]
            suffix = next((s for s in _COMPRESSIONS if base.endswith(s)), "")
            stem = base[: len(base) - len(suffix)]
            if not base.startswith((".", "_")) and stem.endswith(EDGE_SUFFIXES):
                files.append(p)
        what = f"edge list files ({', '.join('*' + s for s in EDGE_SUFFIXES)}) in the directory"
    else:
        files = [path]
        what = "file"
    files = [p for p in files if p != exclude]
    if not files:
        raise InputNotFoundError(
            format_problem(f"edge list {url}", f"at least one of the {what}", "none",
                           "check the path or pattern.")
        )
    return sorted(set(files), key=_natural_key)


class _BlankStream(io.RawIOBase):
    """A read-only stream that collapses runs of blanks and tabs into one space and trims
    them at line starts and ends, so blank-separated text parses as ``delimiter=' '``."""

    _RUNS = re.compile(rb"[ \t]+")
    _TRIM = re.compile(rb"(?m)^ | (?=\r?$)")

    def __init__(self, raw, chunk: int = 1 << 20):
        super().__init__()
        self._raw, self._chunk = raw, chunk
        self._pending = b""
        self._out = memoryview(b"")
        self._eof = False

    def readable(self) -> bool:
        return True

    def readinto(self, buf) -> int:
        while not len(self._out) and not self._eof:
            data = self._raw.read(self._chunk)
            if not data:
                self._eof = True
                text, self._pending = self._pending, b""
            else:
                # Only whole lines are normalised, so a run of blanks is never split.
                data = self._pending + data
                cut = data.rfind(b"\n") + 1
                if cut == 0:
                    self._pending = data
                    continue
                text, self._pending = data[:cut], data[cut:]
            self._out = memoryview(self._TRIM.sub(b"", self._RUNS.sub(b" ", text)))
        n = min(len(buf), len(self._out))
        buf[:n] = self._out[:n]
        self._out = self._out[n:]
        return n


@dataclass
class EdgeFile:
    """How to read one edge file, from sniffing its first lines."""

    path: str
    url: str
    compression: str | None
    empty: bool = False
    data_offset: int = 0
    skipped_lines: int = 0
    delimiter: str = ","
    header: bool = False
    src: str = "f0"
    dst: str = "f1"
    weight: str | None = None
    ts: str | None = None
    src_index: int = 0
    dst_index: int = 1

    @property
    def extras(self) -> tuple[str, ...]:
        """The optional edge columns this file provides (``weight``, ``ts``)."""
        return tuple(c for c, name in (("weight", self.weight), ("ts", self.ts)) if name)

    def where(self, row0: int, column: str | None = None) -> str:
        col = f", column '{column}'" if column else ""
        lines = self.skipped_lines + int(self.header)
        return f"edge list {self.url}{col}, data rows from {row0 + 1} (after {lines} header/comment lines)"

    def at_row(self, row: int, column: str) -> str:
        return f"edge list {self.url}, column '{column}', data row {row + 1}"


def _is_float(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def sniff(fs, path: str, header: bool | None, delimiter: str | None) -> EdgeFile:
    """Read the first lines of ``path`` and decide how to stream it."""
    url = url_of(fs, path)
    plan = EdgeFile(path=path, url=url, compression=compression_of(path))
    try:
        with fs.open(path, "rb", compression=plan.compression) as fh:
            while True:
                position = fh.tell()
                raw = fh.readline()
                if not raw:
                    plan.empty = True
                    return plan
                text = raw.decode("utf-8", errors="replace")
                if position == 0:
                    text = text.lstrip("\ufeff")
                stripped = text.strip()
                if stripped and not stripped.startswith(("#", "%")):
                    break
                plan.skipped_lines += 1
    except (OSError, EOFError, ValueError) as exc:
        raise InputError(
            format_problem(f"edge list {url}", "a readable text file", f"a read error ({exc})",
                           "check the file is complete (and its compression suffix).")
        ) from exc
    plan.data_offset = position
    line = text.rstrip("\r\n")
    if delimiter is None:  # leading / trailing blanks do not count as separators
        delimiter = next((d for d in ("\t", ",", ";") if d in line.strip()), " ")
    plan.delimiter = delimiter
    fields = line.split() if delimiter == " " else next(csv.reader([line], delimiter=delimiter))
    if len(fields) < 2:
        raise InputError(
            format_problem(
                f"edge list {url}, first data line (line {plan.skipped_lines + 1})",
                "at least two columns (src, dst) separated by a tab, comma, semicolon or blanks",
                repr(line[:80]), "fix the file, or pass the delimiter option.",
            )
        )
    if header is None:
        header = not (_INT.match(fields[0].strip()) and _INT.match(fields[1].strip()))
    plan.header = header
    if header:
        names = fields
        lower = [n.strip().lower() for n in names]
        for a, b in _ENDPOINT_NAMES:
            if a in lower and b in lower:
                plan.src_index, plan.dst_index = lower.index(a), lower.index(b)
                break
        plan.weight = names[lower.index("weight")] if "weight" in lower else None
        plan.ts = next((names[lower.index(t)] for t in _TS_NAMES if t in lower), None)
    else:
        names = [f"f{i}" for i in range(len(fields))]  # pyarrow's generated names
        if len(fields) >= 3 and _is_float(fields[2].strip()):
            plan.weight = names[2]
    plan.src, plan.dst = names[plan.src_index], names[plan.dst_index]
    if len({plan.src, plan.dst, plan.weight, plan.ts} - {None}) != 2 + len(plan.extras):
        raise SchemaError(
            format_problem(
                f"edge list {url}, header", "distinct column names",
                f"the header {names}", "rename the repeated columns.",
            )
        )
    return plan


class StringIds(Exception):
    """Integer parsing met an id that is not an integer: read the ids as strings."""


@contextlib.contextmanager
def _open_stream(fs, plan: EdgeFile) -> Iterator[Any]:
    with fs.open(plan.path, "rb", compression=plan.compression) as fh:
        fh.seek(plan.data_offset)
        yield io.BufferedReader(_BlankStream(fh), 1 << 20) if plan.delimiter == " " else fh


def read_batches(
    fs, plan: EdgeFile, id_type: pa.DataType, block_size: int
) -> Iterator[tuple[int, pa.RecordBatch]]:
    """Yield ``(row0, batch)`` with the columns ``plan.src``, ``plan.dst`` [, weight, ts].

    Raises :class:`StringIds` when ``id_type`` is an integer type and an id is not.
    """
    columns = [plan.src, plan.dst] + [c for c in (plan.weight, plan.ts) if c]
    types = {plan.src: id_type, plan.dst: id_type}
    if plan.weight:
        types[plan.weight] = pa.float32()
    if plan.ts:
        types[plan.ts] = pa.int64()
    read = pacsv.ReadOptions(block_size=block_size, autogenerate_column_names=not plan.header)
    parse = pacsv.ParseOptions(delimiter=plan.delimiter, ignore_empty_lines=True)
    convert = pacsv.ConvertOptions(
        include_columns=columns, column_types=types, null_values=[""],
        strings_can_be_null=True, quoted_strings_can_be_null=False,
    )
    row0 = 0
    try:
        with _open_stream(fs, plan) as stream:
            reader = pacsv.open_csv(stream, read_options=read, parse_options=parse,
                                    convert_options=convert)
            while True:
                try:
                    batch = reader.read_next_batch()
                except StopIteration:
                    return
                if plan.header and not pa.types.is_integer(id_type):
                    _refuse_header_rows(fs, plan, row0, batch)
                yield row0, batch
                row0 += batch.num_rows
    except (pa.ArrowInvalid, OSError, EOFError) as exc:
        # Only reading raises here: a consumer's exceptions never enter this frame.
        raise _problem(plan, row0, exc, id_type) from exc


def _refuse_header_rows(fs, plan: EdgeFile, row0: int, batch: pa.RecordBatch) -> None:
    """Raise InputError at a data row that repeats the header's endpoint names.

    A header line that appears again (two files concatenated, a header written twice)
    would otherwise read as an edge between two nodes named after the columns.
    """
    src, dst = batch.column(plan.src), batch.column(plan.dst)
    if not (pa.types.is_string(src.type) or pa.types.is_large_string(src.type)):
        return
    repeated = pc.and_(pc.equal(src, plan.src), pc.equal(dst, plan.dst))
    if not pc.any(repeated).as_py():
        return
    row = row0 + first_bad(repeated.to_numpy(zero_copy_only=False))
    line = _line_of(fs, plan, row)
    raise InputError(format_problem(
        f"edge list {plan.url}, line {line} (data row {row + 1})",
        f"an edge, or no line repeating the header ({plan.src!r}, {plan.dst!r}: line "
        f"{plan.skipped_lines + 1})", f"the header's names {plan.src!r}, {plan.dst!r} again",
        f"delete line {line} (the header appears twice, e.g. two files concatenated); if '{plan.src}' and "
        f"'{plan.dst}' really are node ids, rename the header's columns."))


def _line_of(fs, plan: EdgeFile, row: int) -> int:
    """The line number (from 1) of data row ``row`` (from 0), counting the lines the reader
    skips (comments before the header, the header, empty lines)."""
    line = plan.skipped_lines + 1  # the header
    seen = -1
    with _open_stream(fs, plan) as stream:
        stream.readline()
        for raw in stream:
            line += 1
            if raw.strip(b"\r\n"):
                seen += 1
                if seen == row:
                    break
    return line


def _problem(plan: EdgeFile, row0: int, exc: BaseException, id_type: pa.DataType) -> Exception:
    message = str(exc).strip().replace("\n", " ")
    if not isinstance(exc, pa.ArrowInvalid):
        return InputError(
            format_problem(plan.where(row0), "a readable file", f"a read error ({message})",
                           "the file is truncated or corrupt; copy it again.")
        )
    match = re.search(r"In CSV column #(\d+)", message)
    if (
        match and pa.types.is_integer(id_type) and "conversion error to int" in message
        and int(match.group(1)) in (plan.src_index, plan.dst_index)
    ):
        return StringIds(message)
    return InputError(
        format_problem(
            plan.where(row0),
            "rows with the columns of the first line (src, dst [, weight, ts])",
            message,
            "fix the row; pass the header / delimiter options if they were guessed wrong.",
        )
    )


def first_bad(mask: np.ndarray) -> int:
    """Index of the first True in ``mask``."""
    return int(np.flatnonzero(mask)[0])


def no_nulls(plan: EdgeFile, row0: int, column: str, array: pa.Array) -> None:
    """Raise InputError naming the first empty field of ``array``."""
    if array.null_count:
        row = first_bad(array.is_null().to_numpy(zero_copy_only=False))
        raise InputError(
            format_problem(plan.at_row(row0 + row, column), "a value in every row",
                           "an empty field", "fill it in or drop the row.")
        )
