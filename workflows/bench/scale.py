"""`asepr bench scale`: end-to-end ``asepr partition`` speed and memory against |E|.

For each size a synthetic graph (``asepr synth``, |V| = |E| / 10, cached in the work
directory) is partitioned by the real command, ``python -m asepr partition``, in a
child process, exactly as a user runs it (validation to committed stores, the default
Dask setup). The harness measures:

- ``wall_s``: the child's wall time (process start-up included), and ``edges_per_s``;
- ``kernel_edges_per_s``: the streaming kernel's rate *in the same run* (|E| over the
  run's own ``assignment kernel`` seconds from its manifest), and ``kernel_ratio``, how
  many times slower the whole command is than its kernel;
- ``peak_gib``: the peak, over the run, of the summed RSS of the child and all its
  descendants (the Dask workers), sampled every 50 ms (shared pages count once per
  process, so this errs high); ``plan_gib``: what ``asepr.pipeline.planning.plan`` predicted for the
  same run, and their ratio;
- ``cpu_s``: the user + system CPU seconds of the command and every descendant it
  reaped (the Dask workers), a fact about the run itself: on a machine shared with
  other work the wall time stretches while the CPU time changes much less;
- ``disk_gib``: the committed output's size; ``rf``: its replication factor;
- ``local_disk_peak_gib``: the driver's largest local disk use during the run, sampled
  every 0.2 s: for a local output the growth of the used bytes of the work directory's
  filesystem (the staged and committed stores; other writers count too, so it errs
  high), for a remote one the files under its scratch directory;
- with ``--verify``, the same for ``asepr verify`` on the output.

With ``--out-url URL`` every size is also partitioned into ``URL/out-e<E>-k<k>`` (an
fsspec URL such as ``s3://bucket/prefix``, with ``--storage-options``), right after the
local run of the same input, so that the two rows are measured side by side under the
same conditions; its row's ``target`` is the URL's scheme and ``remote_ratio`` its wall
time over the local run's. The local scratch of the remote run is a directory of the
work directory (``--scratch``), removed after it.

With ``--baseline TREE`` every size is also partitioned by the code of another
checkout (:mod:`asepr.workflows.bench.code`), alternating with this code ``--pairs``
times on the same input (each code first partitions a tiny graph once, unmeasured, so
that no row counts numba's compilation), so that the two are measured side by side under the same
conditions; each row's ``code`` says which ran (``base`` or ``this``), and a ``this``
row's ``same_stores`` whether its stores, state and node map have the same checksums
as the base run's before it.

A figure is written too: seconds and GiB against edges.
"""

from __future__ import annotations

import json
import resource
import shutil
import subprocess
import threading
import time
from pathlib import Path

import pyarrow.parquet as pq

from asepr.storage.errors import InputError, format_problem
from asepr.storage.locations.location import remove_tree, tree_bytes
from asepr.storage.partitions.manifest import read_manifest
from asepr.workflows.bench.code import Code, code_of, this_code
from asepr.workflows.bench.tables import machine_info, markdown_table, parquet_table, pyplot, save_figure

__all__ = ["COLUMNS", "DEFAULT_SIZES", "bench_scale", "children_cpu_seconds", "run_measured"]

DEFAULT_SIZES = [5_000_000, 20_000_000, 50_000_000, 100_000_000]
COLUMNS = ["edges", "nodes", "k", "code", "same_stores", "target", "wall_s", "remote_ratio", "edges_per_s", "kernel_edges_per_s", "kernel_ratio",
           "peak_gib", "plan_gib", "plan_ratio", "disk_gib", "rf", "verify_s", "verify_edges_per_s",
           "verify_peak_gib", "cpu_s", "verify_cpu_s", "local_disk_peak_gib"]
_DISK_POLL_S = 0.2
_POLL_S = 0.05


def _tree_rss(proc) -> int:
    import psutil

    total = 0
    for p in [proc, *proc.children(recursive=True)]:
        try:
            total += p.memory_info().rss
        except (psutil.NoSuchProcess, psutil.ZombieProcess):
            pass
    return total


def children_cpu_seconds() -> float:
    """User + system CPU seconds of every child this process has waited for, and theirs.

    A child's own reaped descendants are included (the kernel adds them to the child's
    total when it reaps them), so the difference across one ``run_measured`` call is the
    CPU time of that command's whole process tree.
    """
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def run_measured(cmd: list[str], log_path: Path, samples: list | None = None,
                 env: dict[str, str] | None = None) -> tuple[float, int]:
    """Run ``cmd``; return ``(wall seconds, peak summed RSS of its process tree)``.

    Output goes to ``log_path``; a non-zero exit raises ``RuntimeError`` naming the log.
    ``samples``, when given, receives every ``(unix time, summed RSS bytes)`` sample.
    """
    import psutil

    with open(log_path, "wb") as log_file:
        start = time.perf_counter()
        child = subprocess.Popen(cmd, stdout=log_file, stderr=subprocess.STDOUT, env=env)
        proc = psutil.Process(child.pid)
        peak = 0
        done = threading.Event()

        def poll() -> None:
            nonlocal peak
            while not done.is_set():
                try:
                    rss = _tree_rss(proc)
                except psutil.NoSuchProcess:
                    return
                peak = max(peak, rss)
                if samples is not None:
                    samples.append((time.time(), rss))
                time.sleep(_POLL_S)

        poller = threading.Thread(target=poll, daemon=True)
        poller.start()
        code = child.wait()
        wall = time.perf_counter() - start
        done.set()
        poller.join()
    if code != 0:
        raise RuntimeError(f"{' '.join(cmd[:4])} ... exited with {code}; see {log_path}")
    return wall, peak


def _synth(workdir: Path, edges: int, nodes: int, dim: int, classes: int, seed: int) -> Path:
    """The cached synthetic input of this size (made once)."""
    path = workdir / f"synth-e{edges}-v{nodes}-d{dim}-c{classes}-s{seed}"
    if not (path / "meta.json").exists():
        shutil.rmtree(path, ignore_errors=True)
        run_measured(this_code().command("synth", str(path), "--nodes", str(nodes), "--edges", str(edges), "--dim", str(dim),
                          "--classes", str(classes), "--seed", str(seed), "-q"), workdir / f"{path.name}.log")
    return path


def _dir_bytes(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


def _planned_peak(inp: Path, out: str, k: int, storage_options: dict | None = None) -> int:
    """``asepr.pipeline.planning.plan``'s peak for partitioning ``inp`` into ``out`` (a path, or a URL with its options)."""
    from asepr.pipeline.config import PartitionConfig
    from asepr.pipeline.planning.plan import plan_partition
    from asepr.workflows.dask_client import default_workers

    return int(plan_partition(inp, out, PartitionConfig(num_parts=k), workers=default_workers(),
                              storage_options=storage_options).peak_bytes)


class _DiskGrowth:
    """The largest growth of local disk use while the block runs (polled): of the used
    bytes of the filesystem holding ``path``, or with ``tree`` of the files below ``path``."""

    def __init__(self, path: Path, tree: bool = False):
        self.path, self.tree, self.peak, self._done = path, tree, 0, threading.Event()

    def _used(self) -> int:
        return _dir_bytes(self.path) if self.tree else shutil.disk_usage(self.path).used

    def _poll(self) -> None:
        while not self._done.wait(_DISK_POLL_S):
            try:
                self.peak = max(self.peak, self._used() - self._start)
            except FileNotFoundError:  # a file removed while it was listed
                pass

    def __enter__(self) -> _DiskGrowth:
        self._start = 0 if self.tree else self._used()  # before the command starts writing
        self._thread = threading.Thread(target=self._poll, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._done.set()
        self._thread.join()


def _partition_row(inp: Path, out: str, k: int, log: Path, workdir: Path, storage_options: dict | None,
                   code: Code) -> dict:
    """One measured ``asepr partition`` of ``inp`` into ``out`` (a path, or a URL with its options)."""
    cmd = code.command("partition", str(inp), out, "-k", str(k), "-q")
    scratch = None
    if storage_options is not None:
        scratch = workdir / f"scratch-{log.stem}"
        shutil.rmtree(scratch, ignore_errors=True)
        cmd += ["--storage-options", json.dumps(storage_options), "--scratch", str(scratch)]
    remove_tree(out, storage_options)
    cpu_before = children_cpu_seconds()
    with _DiskGrowth(workdir if scratch is None else scratch, tree=scratch is not None) as disk:
        wall, peak = run_measured(cmd, log, env=code.environ())
    cpu = children_cpu_seconds() - cpu_before
    if scratch is not None:
        shutil.rmtree(scratch, ignore_errors=True)
    manifest = read_manifest(out, storage_options=storage_options)
    kernel_s = float(manifest["timings"].get("assignment kernel", float("nan")))
    return {"code": code.label, "target": "local" if storage_options is None else out.split("://", 1)[0], "wall_s": wall,
            "kernel_s": kernel_s, "peak_gib": peak / 2**30, "disk_gib": tree_bytes(out, storage_options) / 2**30,
            "rf": float(manifest["metrics"]["replication_factor"]), "cpu_s": cpu,
            "local_disk_peak_gib": disk.peak / 2**30, "stage_seconds": json.dumps(manifest["timings"], sort_keys=True),
            "checksums": _checksums(manifest)}


def _checksums(manifest: dict) -> list:
    """What two outputs of the same bytes share: every store's checksum and the node map's."""
    return [[p["part_id"], p["checksum"]] for p in manifest["partitions"]] + [manifest.get("node_map", {}).get("sha256")]


def _warm_up(workdir: Path, codes: tuple[Code, ...], k: int, dim: int, classes: int, seed: int) -> None:
    """Partition a tiny input once with each code, unmeasured: numba compiles (and caches)
    a checkout's kernels on its first run, which would otherwise count in its first row."""
    tiny = _synth(workdir, 20_000, 2_000, dim, classes, seed)
    for code in codes:
        out = workdir / f"warm-up-{code.label}"
        remove_tree(str(out), None)
        run_measured(code.command("partition", str(tiny), str(out), "-k", str(k), "-q"),
                     workdir / f"warm-up-{code.label}.log", env=code.environ())
        remove_tree(str(out), None)


def _one_size(workdir: Path, edges: int, *, k: int, dim: int, classes: int, seed: int, verify: bool,
              keep: bool, echo, out_url: str | None = None, storage_options: dict | None = None,
              baseline: Code | None = None, pairs: int = 1) -> list[dict]:
    nodes = max(edges // 10, 2)
    inp = _synth(workdir, edges, nodes, dim, classes, seed)
    out = workdir / f"out-e{edges}-k{k}"
    targets = [(str(out), None)]
    if out_url:
        targets.append((f"{out_url.rstrip('/')}/{out.name}", storage_options or {}))
    runs = [(target, options, this_code()) for target, options in targets]
    if baseline is not None:  # base and this code alternately on the local target, then the remote one
        runs = [(str(out), None, code) for _ in range(pairs) for code in (baseline, this_code())]
        runs += [(target, options, this_code()) for target, options in targets[1:]]
    rows = []
    base_sums = None
    for target, options, code in runs:
        name = (out.name if options is None else f"{out.name}-remote") + ("-base" if code.label == "base" else "")
        # the plan of this run's own target, by this code's planner (none for the baseline's rows)
        plan = _planned_peak(inp, target, k, options) if code.label == "this" else float("nan")
        run = _partition_row(inp, target, k, workdir / f"{name}.log", workdir, options, code)
        kernel_s = run.pop("kernel_s")
        sums = run.pop("checksums")
        if baseline is not None and options is None:
            run["same_stores"] = None if code.label == "base" else sums == base_sums
            base_sums = sums if code.label == "base" else base_sums
        row = {"edges": edges, "nodes": nodes, "k": k, **run, "edges_per_s": edges / run["wall_s"],
               "kernel_edges_per_s": edges / kernel_s, "kernel_ratio": (edges / kernel_s) / (edges / run["wall_s"]),
               "plan_gib": plan / 2**30, "plan_ratio": plan / (run["peak_gib"] * 2**30)}
        if options is not None:
            row["remote_ratio"] = run["wall_s"] / rows[-1]["wall_s"]
        if verify:
            cmd = this_code().command("verify", target, "-q") + ([] if options is None else ["--storage-options", json.dumps(options)])
            cpu_before = children_cpu_seconds()
            v_wall, v_peak = run_measured(cmd, workdir / f"verify-{name}.log")
            row.update(verify_s=v_wall, verify_edges_per_s=edges / v_wall, verify_peak_gib=v_peak / 2**30,
                       verify_cpu_s=children_cpu_seconds() - cpu_before)
        if not keep:
            remove_tree(target, options)
        echo(f"bench scale: {edges:,} edges, {row['target']}, {row['code']} code: {row['wall_s']:.1f} s "
             f"({edges / row['wall_s'] / 1e6:.2f}M edges/s; kernel {row['kernel_edges_per_s'] / 1e6:.1f}M/s), "
             f"peak {row['peak_gib']:.2f} GiB (plan {row['plan_gib']:.2f}), local disk {row['local_disk_peak_gib']:.2f} GiB")
        rows.append(row)
    return rows


def _plot(rows: list[dict], path: Path) -> None:
    plt = pyplot()
    if plt is None:
        return
    remote = [r for r in rows if r.get("target", "local") != "local"]
    rows = [r for r in rows if r.get("target", "local") == "local" and r.get("code", "this") == "this"]
    fig, (a, b) = plt.subplots(1, 2, figsize=(10, 4))
    edges = [r["edges"] / 1e6 for r in rows]
    a.plot(edges, [r["wall_s"] for r in rows], "o-", label="asepr partition (end to end)")
    a.plot(edges, [r["edges"] / r["kernel_edges_per_s"] for r in rows], "s--", label="streaming kernel alone")
    if any("verify_s" in r for r in rows):
        a.plot(edges, [r.get("verify_s", float("nan")) for r in rows], "^:", label="asepr verify")
    if remote:
        a.plot([r["edges"] / 1e6 for r in remote], [r["wall_s"] for r in remote], "D-",
               label=f"asepr partition to {remote[0]['target']}://")
    a.set_xlabel("edges (millions)")
    a.set_ylabel("seconds")
    a.legend()
    b.plot(edges, [r["peak_gib"] for r in rows], "o-", label="measured peak (process tree)")
    b.plot(edges, [r["plan_gib"] for r in rows], "s--", label="plan (--dry-run)")
    b.set_xlabel("edges (millions)")
    b.set_ylabel("GiB")
    b.legend()
    save_figure(fig, path, 120)


def bench_scale(out: Path, sizes: list[int] | None = None, *, k: int = 16, dim: int = 32, classes: int = 8,
                seed: int = 1, workdir: Path | None = None, keep: bool = False, verify: bool = False,
                out_url: str | None = None, storage_options: dict | None = None, baseline: str | Path | None = None,
                pairs: int = 1, echo=print) -> list[dict]:
    """Partition a synthetic graph of each size end to end; write ``scale.md``, ``.parquet``, ``.png``."""
    if out_url is not None and "://" not in out_url:
        raise InputError(format_problem("bench scale --out-url", "an fsspec URL with a scheme, e.g. s3://bucket/prefix",
                                        repr(out_url), "the local run is always measured (its folder is --workdir); "
                                        "give --out-url only for the object store."))
    out.mkdir(parents=True, exist_ok=True)
    workdir = workdir or out / "work"
    workdir.mkdir(parents=True, exist_ok=True)
    base = None if baseline is None else code_of(baseline, workdir)
    if base is not None:
        _warm_up(workdir, (base, this_code()), k, dim, classes, seed)
    started = time.strftime("%Y-%m-%d %H:%M")
    rows = [row for e in sorted(sizes or DEFAULT_SIZES)
            for row in _one_size(workdir, e, k=k, dim=dim, classes=classes, seed=seed, verify=verify, keep=keep,
                                 echo=echo, out_url=out_url, storage_options=storage_options, baseline=base,
                                 pairs=pairs)]
    pq.write_table(parquet_table(rows), out / "scale.parquet")  # every row's columns (a local row has no remote_ratio)
    _plot(rows, out / "scale.png")
    info = machine_info()
    lines = [
        "# asepr bench scale", "",
        f"Run {started}; {info['cores']} cores, {info['memory_gib']} GiB; `asepr synth --nodes E/10 --edges E "
        f"--dim {dim} --classes {classes} --seed {seed}`, then `asepr partition -k {k}` (default Dask setup) "
        "in a child process, one size after the other.", "",
        "`wall_s`: the command's wall time, start-up included; `kernel_edges_per_s`: the streaming "
        "assignment kernel's rate in the same run (from its manifest); `kernel_ratio`: kernel rate / "
        "end-to-end rate; `peak_gib`: peak summed RSS of the command's process tree (driver and Dask "
        "workers, sampled every 50 ms); `plan_gib`: `asepr.pipeline.planning.plan`'s prediction for the run; "
        "`plan_ratio`: plan / measured; `disk_gib`: the committed output; `cpu_s` (`verify_cpu_s`): user + "
        "system CPU seconds of the command's process tree, to set against its wall time; `target`: local, or the "
        "scheme of `--out-url`, partitioned right after the local run of the same input (`remote_ratio`: its wall "
        "time over the local run's); `local_disk_peak_gib`: the driver's largest local disk use during the run "
        "(a local output: the growth of the work directory's filesystem, other writers included; a remote one: "
        "the files under its scratch directory).", "",
        *([] if baseline is None else [
            f"Side by side: `code` base is the checkout `{Path(baseline).resolve()}`, this is the installed "
            f"package; {pairs} alternating pair(s) per size on the same input. `same_stores`: the stores, "
            "state and node map of the `this` run have the checksums of the `base` run's before it.", ""]),
        markdown_table(rows, COLUMNS), "",
        "Seconds per stage (from each run's manifest):", "",
    ]
    for r in rows:
        lines.append(f"- {r['edges']:,} edges, {r.get('target', 'local')}, {r.get('code', 'this')} code: " + ", ".join(
            f"{name} {s:.1f}" for name, s in sorted(json.loads(r["stage_seconds"]).items(), key=lambda kv: -kv[1])))
    lines += ["", "![scale.png](scale.png)", ""]
    (out / "scale.md").write_text("\n".join(lines))
    return rows
