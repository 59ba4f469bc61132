"""Ingest of a text edge list in original ids (docs/design.md#incremental-ingest).

``asepr ingest OUT new.tsv`` takes the edge sources ``asepr import edgelist`` takes: a
CSV/TSV or blank-separated edge list whose ids are the original ids of the imported
input. :func:`text_ingest` maps them to node ids through the input's ``id_map.parquet``
(:mod:`asepr.storage.importers.edge_increment`), numbers the ids the map lacks from the
output's next free id, writes their node rows, and hands ingest Parquet shards that
are kept in the input, ``INPUT/ingested/`` (named by their content; the manifest records
them and ``asepr verify`` reads them again, as it reads every ingested shard).
:func:`commit_id_map` appends the new ids to the input's map just before ingest commits
the generation.

The map is the input's, shared by every output partitioned from that input, and the
outputs' node ids diverge as each numbers its own new ids. So every row an ingest appends
names the output it was numbered for (:data:`asepr.storage.importers.edge_increment.OWNER_COLUMN`),
and an output reads only the import's rows and its own (:func:`owner_of`: the output's
path at its first text ingest, then the name its manifest records, so a moved output
keeps its rows). Ingests into two outputs of one input update the same file, so an
ingest holds the map's lock (:func:`id_map_lock`) from its read of the map through its
commit: the second reads the rows the first appended and keeps them.

Each ingest that maps ids records in the output's manifest the digest of the rows it
leaves in its view of the map (``increments[].edge_list.id_map``); the next one checks
that the rows below that bound are still those, and that no other rows sit between them
and the output's node count. Rows at or above the output's node count belong to an
ingest of this output that did not commit and are numbered again.
"""

from __future__ import annotations

import contextlib
import logging
import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow.compute as pc

from asepr.storage.commit.lease import Lease
from asepr.storage.commit.lock import waiting_file_lock
from asepr.storage.errors import InputError, format_problem
from asepr.storage.importers.edge_increment import (
    ID_MAP_NAME,
    EdgeListIncrement,
    IdMap,
    constant_features,
    id_map_digest,
    map_edge_list,
    read_id_map,
    write_id_map,
)
from asepr.storage.inputs.schema import META_NAME
from asepr.storage.locations.fs import Shard, fingerprint, join, resolve, url_of
from asepr.storage.locations.location import is_local

__all__ = ["INGESTED_DIR", "TEXT_WORK_NAME", "TextIngest", "check_id_map", "commit_id_map", "id_map_lock",
           "owner_of", "refuse_node_shards", "text_ingest"]

log = logging.getLogger(__name__)

#: The directory inside the output where the converted shards are written during one ingest.
TEXT_WORK_NAME = ".asepr-text-edges"
#: The directory inside the input that keeps the converted shards of every ingest.
INGESTED_DIR = "ingested"


@dataclass
class TextIngest:
    """The converted shards of a text edge list, and what the map becomes."""

    edge_shards: list[Shard]
    node_shards: list[Shard]
    increment: EdgeListIncrement
    first_id: int
    text_files: list[str]

    def record(self) -> dict[str, Any] | None:
        """The manifest record of the map after the commit (None without a map)."""
        id_map = self.increment.id_map
        if id_map is None:
            return None
        table = self.increment.grown_map if self.increment.grown_map is not None else id_map.table
        return {"url": id_map.url, "rows_below": self.first_id + self.increment.new_nodes,
                "sha256": id_map_digest(table), "owner": id_map.owner}

    def source(self) -> dict[str, Any]:
        """The manifest record of where the edges came from: the text files and the map."""
        return {"files": self.text_files, "id_map": self.record()}


def _input_url(manifest: dict[str, Any], out_path: Path, storage_options: dict | None) -> str:
    """The input the output was partitioned from, whose id map names the original ids."""
    url = str((manifest.get("input") or {}).get("url") or "")
    if not url:
        raise InputError(format_problem(
            f"output {out_path}, manifest.json", "the url of the input it was partitioned from",
            "none", "give the new edges as Parquet with int64 columns src, dst in the output's node ids.",
        ))
    fs, path = resolve(url, storage_options)
    if not fs.exists(join(path, META_NAME)):
        raise InputError(format_problem(
            f"input {url} (named by {out_path}/manifest.json)", "the input directory the output was partitioned "
            "from: an edge list's ids are read through its id_map.parquet", "no input there",
            "put the input back where it was, or give the new edges as Parquet in the output's node ids.",
        ))
    return url


def _map_records(manifest: dict[str, Any]) -> list[dict[str, Any]]:
    """The id-map records of the output's text ingests, oldest first."""
    return [r["edge_list"]["id_map"] for r in manifest.get("increments", [])
            if isinstance(r, dict) and isinstance(r.get("edge_list"), dict)
            and isinstance(r["edge_list"].get("id_map"), dict)]


def owner_of(manifest: dict[str, Any], out_path: Path) -> str:
    """The name under which the output's rows of the id map are kept: the one its last
    text ingest recorded, else (its first) the output's absolute path."""
    for record in reversed(_map_records(manifest)):
        if isinstance(record.get("owner"), str) and record["owner"]:
            return record["owner"]
    return str(Path(out_path).resolve())


@contextlib.contextmanager
def id_map_lock(input_url: str, storage_options: dict | None = None) -> Iterator[None]:
    """Hold the lock of the input's id map for the block.

    A local input: an OS lock on ``INPUT/.id_map.parquet.lock``; a second ingest waits for
    the first. An input on an object store has no OS lock: the lease object
    ``INPUT/.id_map.parquet.lease`` (:class:`asepr.storage.commit.lease.Lease`); a second ingest
    is refused, naming the first.
    """
    fs, base = resolve(input_url, storage_options)
    if is_local(fs):
        with waiting_file_lock(join(base, f".{ID_MAP_NAME}.lock"), what=f"the id map of input {input_url}"):
            yield
        return
    path = join(base, f".{ID_MAP_NAME}.lease")
    with Lease(fs, path, url_of(fs, path)):
        yield


def check_id_map(id_map: IdMap, manifest: dict[str, Any], out_path: Path) -> None:
    """Refuse a map whose rows this output did not write (module docstring)."""
    increments = manifest.get("increments", [])
    records = _map_records(manifest)
    num_nodes = int(manifest["num_nodes"])
    if records:
        base = int(records[-1]["rows_below"])
    else:
        base = num_nodes - sum(int(r.get("new_nodes", 0)) for r in increments)
    gnid = id_map.table.column("global_nid")
    trusted = id_map.table.filter(pc.less(gnid, base))
    fix = ("the map's rows of this output were changed since its last ingest (the map was edited, restored "
           "from an older copy, or grown by an older asepr for another output of the same input); give this "
           "output's new edges as Parquet in its node ids, or partition the grown input again.")
    if records and id_map_digest(trusted) != records[-1]["sha256"]:
        raise InputError(format_problem(
            f"id map {id_map.url}", f"the rows below node {base} that generation {manifest['generation']} of "
            f"{out_path} recorded (sha256 {records[-1]['sha256'][:12]}…)",
            f"other rows (sha256 {id_map_digest(trusted)[:12]}…)", fix,
        ))
    foreign = np.asarray(gnid.to_numpy()) >= base
    if foreign.any():
        first = int(np.asarray(gnid.to_numpy())[foreign].min())
        raise InputError(format_problem(
            f"id map {id_map.url}", f"no rows for nodes {base}..{num_nodes - 1} (nodes {out_path} added "
            "from Parquet shards, which have no original ids)", f"a row for node {first}", fix,
        ))


def refuse_node_shards(nodes) -> None:
    """A text edge list's new nodes are numbered by ingest: node shards cannot name them."""
    if nodes is not None:
        raise InputError(format_problem(
            "option --nodes", "no node shards with a text edge list (its new ids are numbered by ingest, "
            "from the output's next free id, in sorted order of the original ids)",
            f"--nodes {nodes}", "ingest the edge list without --nodes; to give the new nodes features, write "
            "edges and nodes as Parquet in node ids instead.",
        ))


@contextlib.contextmanager
def text_ingest(out_path: Path, files: list[tuple[Any, str]], nodes, manifest: dict[str, Any],
                storage_options: dict | None = None) -> Iterator[TextIngest]:
    """Convert the text edge ``files`` for the output at ``out_path`` (holding its lock).

    Yields the Parquet shards ingest reads, kept in ``INPUT/ingested/`` (:func:`_store`).

    Raises
    ------
    InputError
        ``--nodes`` was given (the new nodes of an edge list are numbered here), the map is
        not this output's (:func:`check_id_map`), or a file is not a valid edge list.
    """
    refuse_node_shards(nodes)
    first_id = int(manifest["num_nodes"])
    input_url = _input_url(manifest, out_path, storage_options)
    with id_map_lock(input_url, storage_options):  # held through the commit: see the module docstring
        id_map = read_id_map(input_url, first_id, storage_options, owner=owner_of(manifest, out_path))
        if id_map is not None:
            check_id_map(id_map, manifest, out_path)
            if id_map.pending:
                log.warning("id map %s: %d row(s) of an ingest that did not commit are numbered again", id_map.url,
                            id_map.pending)
        work = out_path / TEXT_WORK_NAME
        shutil.rmtree(work, ignore_errors=True)
        work.mkdir()
        try:
            increment = map_edge_list(files, work, id_map=id_map, first_id=first_id,
                                      feat_dim=int(manifest.get("feat_dim", 1)),
                                      constant=constant_features(input_url, storage_options))
            edge_shards = [_store(path, input_url, "edges", storage_options) for _, path in increment.edge_files]
            node_shards = ([_store(increment.node_file, input_url, "nodes", storage_options)]
                           if increment.node_file is not None else [])
            yield TextIngest(edge_shards, node_shards, increment, first_id, [url for url, _ in increment.edge_files])
        finally:
            shutil.rmtree(work, ignore_errors=True)


def _store(local: Path, input_url: str, kind: str, storage_options: dict | None) -> Shard:
    """Keep a converted file in the input, named by its content: ``INPUT/ingested/KIND-SHA.parquet``.

    The manifest records ingested shards by URL and ``asepr verify`` reads them again, so
    they must outlive the ingest; a name by content makes a rerun (or an ingest of the same
    edges into another output of the input) find the same file.
    """
    sha = fingerprint(Shard(resolve(str(local))[0], str(local), str(local), local.stat().st_size))
    fs, base = resolve(input_url, storage_options)
    directory = join(base, INGESTED_DIR)
    path = join(directory, f"{kind}-{sha[:32]}.parquet")
    if not fs.exists(path):
        fs.makedirs(directory, exist_ok=True)
        partial = join(directory, f".{kind}-{sha[:32]}.partial")
        fs.put_file(str(local), partial)
        fs.mv(partial, path)
    return Shard(fs, path, url_of(fs, path), local.stat().st_size)


def commit_id_map(text: TextIngest | None) -> None:
    """Write the grown map (before the generation commits; rerun-safe: see module docstring)."""
    if text is None or text.increment.grown_map is None:
        return
    write_id_map(text.increment.id_map, text.increment.grown_map)
    log.info("id map %s: %d new id(s) appended from node %d", text.increment.id_map.url, text.increment.new_nodes,
             text.first_id)
