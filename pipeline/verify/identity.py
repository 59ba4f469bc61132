"""Input identity and the node map: the shards an output was partitioned from (the base
input's and every ingested increment's) against the manifest's fingerprints, and
``node_map.parquet`` against the masters the stores hold (:mod:`asepr.pipeline.verify.output`)."""

from __future__ import annotations

import numpy as np
import pyarrow.parquet as pq

from asepr.storage.commit.confine import confined_join
from asepr.storage.errors import AseprError
from asepr.storage.inputs.directory import open_input
from asepr.storage.locations.fs import Shard, discover_shards, fingerprint, join, resolve, url_of
from asepr.storage.partitions.manifest import NODE_MAP_NAME, OLD_DIR, STAGING_NAME

__all__ = ["check_fingerprints", "check_node_map", "input_shards", "recorded_shards"]


def input_shards(input_url, storage_options, manifest=None):
    """The base input's shards plus, in order, every ingested increment's (by recorded URL)."""
    source = open_input(input_url, storage_options)
    edges, nodes = list(source.edge_shards), list(source.node_shards)
    for inc in (manifest or {}).get("increments", []):
        for kind, shards in (("edges", edges), ("nodes", nodes)):
            for entry in inc.get(kind, []):
                shards.extend(discover_shards(entry["url"], what=f"ingested {kind} shard (generation "
                                              f"{inc.get('generation')})", storage_options=storage_options))
    return edges, nodes


def recorded_shards(manifest, kind):
    out = list(manifest.get("input", {}).get(kind, []))
    for inc in manifest.get("increments", []):
        out += inc.get(kind, [])
    return out


def check_fingerprints(manifest, edge_shards, node_shards, edge_hashes, node_hashes, problems) -> None:
    for kind, shards, have in (("edges", edge_shards, edge_hashes), ("nodes", node_shards, node_hashes)):
        want = [s.get("sha256") for s in recorded_shards(manifest, kind)]
        if want != have:
            problems.add("input", f"the {kind} shards differ from the ones partitioned ({len(want)} recorded, "
                                  f"{len(have)} found, {sum(a != b for a, b in zip(want, have))} with another "
                                  "sha256); the comparisons below are against the input as it is now")


def check_node_map(out, manifest, storage_options, master_part, master_local, problems) -> None:
    fs, base = resolve(out, storage_options)
    want = manifest.get("node_map", {}).get("sha256")
    try:
        named = confined_join(fs, base, manifest.get("node_map", {}).get("path", NODE_MAP_NAME),
                              what=f"manifest {url_of(fs, join(base, 'manifest.json'))} (node_map path)")
    except AseprError as exc:
        problems.add("node_map", str(exc))
        return
    path = next((c for c in (named, join(base, STAGING_NAME, OLD_DIR, NODE_MAP_NAME))
                 if fs.exists(c) and want in (None, fingerprint(Shard(fs=fs, path=c, url=c, size=0)))), None)
    if path is None:
        problems.add("node_map", f"no {NODE_MAP_NAME} with the manifest's sha256 in {url_of(fs, base)}")
        return
    pf = pq.ParquetFile(fs.open(path, "rb"))
    start = 0
    for batch in pf.iter_batches(batch_size=1 << 20, columns=["global_nid", "part_id", "part_local_nid"]):
        gid = batch.column("global_nid").to_numpy()
        if not np.array_equal(gid, np.arange(start, start + len(gid))):
            problems.add("node_map", f"global_nid must run 0..N-1 in order; rows from {start} do not")
            return
        for column, expect in (("part_id", master_part), ("part_local_nid", master_local)):
            got = batch.column(column).to_numpy()
            bad = np.flatnonzero(got != expect[start : start + len(gid)])
            if len(bad):
                v = start + int(bad[0])
                problems.add("node_map", f"{column} of global_nid {v} is {int(got[bad[0]])}, "
                                         f"the stores say {int(expect[v])} ({len(bad):,} such rows)")
                return
        start += len(gid)
    if start != len(master_part):
        problems.add("node_map", f"{start:,} rows, expected one per node ({len(master_part):,})")
