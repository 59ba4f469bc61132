"""The ``asepr`` command line.

Each subcommand parses its flags, sets up logging and calls one library function; no
algorithm lives here. Errors from the asepr hierarchy print one clear message and
exit with status 1 (2 for usage errors, as argparse does); so do the OS errors a user can
fix (a full disk, a directory it may not write: :func:`asepr.storage.errors.os_error_problem`).
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import logging
import multiprocessing
import os
import sys
from collections.abc import Sequence

from asepr.storage.commit.holder import set_command_name
from asepr.storage.errors import AseprError, os_errors_as_problems
from asepr.storage.progress import reporting
from asepr.storage.resources import tune_malloc
from asepr.workflows.extras import missing_extra, require_extra
from asepr.workflows.progress import reporter_for

__all__ = ["build_parser", "main", "run"]

log = logging.getLogger("asepr")

IMPORT_FORMATS = ("gnn-npz", "hetero-npz", "musae", "edgelist", "ogb")
#: What SRC is for each import format (``asepr import -h``).
_IMPORT_SOURCES = """SRC by FORMAT:
  gnn-npz     a gnn-benchmark .npz file (cora.npz, amazon_electronics_computers.npz, ms_academic_cs.npz),
              or the folder that holds exactly one
  hetero-npz  a heterophilous-graphs .npz file (tolokers.npz, squirrel.npz), or the folder that holds one
  musae       the folder of a MUSAE dataset: its edges CSV, features JSON and target CSV
              (e.g. facebook-pagepage/ with facebook_edges.csv, facebook.json, facebook_target.csv)
  ogb         an OGB dataset folder as its download unpacks (ogbn-arxiv/ with raw/ and split/)
  edgelist    an edge list: a file (csv, tsv or blank-separated, optionally compressed: .gz, .bz2,
              .zst), a folder or a glob of them; --node-table adds node features and labels
"""


def _positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, found {text}")
    return value


def _shares(text: str) -> tuple[float, ...]:
    try:
        return tuple(float(part) for part in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated numbers, found {text}") from None


def _version() -> str:
    try:
        return importlib.metadata.version("asepr")
    except importlib.metadata.PackageNotFoundError:  # run from a checkout that is not installed
        return "(not installed)"


def _add_common(p: argparse.ArgumentParser) -> None:
    p.add_argument("-v", "--verbose", action="count", default=0, help="more logging (-vv: debug)")
    p.add_argument("-q", "--quiet", action="store_true", help="only errors: no progress, no summary")
    p.add_argument("--no-progress", action="store_true",
                   help="no progress bars (on a terminal) or progress lines (elsewhere)")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="asepr",
        description="Attribute-driven streaming edge partitioning with reconciliations.",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {_version()}",
                        help="print the installed version of asepr and exit")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    p = sub.add_parser("import", help="convert a published dataset into the asepr input format",
                       formatter_class=argparse.RawDescriptionHelpFormatter, epilog=_IMPORT_SOURCES)
    _add_common(p)
    p.add_argument("format", choices=IMPORT_FORMATS, help="source format")
    p.add_argument("src", help="what to import: a file or a folder, depending on FORMAT (see below)")
    p.add_argument("out", help="output input-directory (edges/, nodes/, meta.json)")
    p.add_argument("--shard-rows", type=_positive_int, default=1_000_000, help="max rows per shard")
    p.add_argument("--seed", type=int, default=0, help="seed of the stratified split when none is published")
    p.add_argument("--split-index", type=int, help="hetero-npz: which published split (default 0)")
    p.add_argument("--split-scheme", help="ogb: the folder under split/ (needed when there are several)")
    p.add_argument("--label-column", help="musae/edgelist: label column of the node table")
    p.add_argument("--node-table", help="edgelist: csv or parquet node table (id, label, features)")
    p.add_argument("--delimiter", help="edgelist: field delimiter (default: sniffed)")
    p.add_argument("--name", help="dataset name recorded in meta.json (default: from SRC)")
    header = p.add_mutually_exclusive_group()
    header.add_argument("--header", dest="header", action="store_true", default=None,
                        help="edgelist: the first line is a header")
    header.add_argument("--no-header", dest="header", action="store_false",
                        help="edgelist: the first line is data")
    p.add_argument("--undirected", action="store_true", default=None,
                   help="edgelist: each edge is stored once for both directions")
    p.add_argument("--drop-self-loops", action="store_true", help="drop self-loops")
    p.add_argument("--drop-duplicates", action="store_true",
                   help="drop duplicate edges (keeps the first occurrence)")
    p.add_argument("--overwrite", action="store_true", help="replace an existing output")

    p = sub.add_parser("synth", help="write a synthetic attributed graph, streaming")
    _add_common(p)
    p.add_argument("out", help="the input directory to write (edges/, nodes/, meta.json)")
    p.add_argument("--nodes", type=_positive_int, required=True, help="number of nodes N")
    p.add_argument("--edges", type=_positive_int, required=True, help="number of edges")
    p.add_argument("--classes", type=_positive_int, default=8, help="number of classes (default 8)")
    p.add_argument("--dim", type=_positive_int, default=32, help="feature width d (default 32)")
    p.add_argument("--homophily", type=float, default=0.8, help="share of intra-class edges")
    p.add_argument("--exponent", type=float, default=2.1, help="power-law degree exponent")
    p.add_argument("--noise", type=float, default=1.0,
                   help="std of the feature noise around the class centroid")
    p.add_argument("--category-purity", type=float, default=0.8,
                   help="probability that the 'category' column equals the class")
    p.add_argument("--split", type=_shares, default=None, metavar="TRAIN,VAL,TEST",
                   help="shares of the random split (default 0.6,0.2,0.2; ogbn-products: 0.08,0.02,0.9)")
    p.add_argument("--seed", type=int, default=0, help="seed of the generator (default 0)")
    p.add_argument("--shard-rows", type=_positive_int, default=1_000_000,
                   help="max rows per Parquet shard (default 1,000,000)")
    p.add_argument("--overwrite", action="store_true", help="replace an existing output")

    p = sub.add_parser("validate", help="check an input directory, streaming; non-zero exit on a problem")
    _add_common(p)
    p.add_argument("input", nargs="?", help="input directory (edges/, nodes/)")
    p.add_argument("--edges", help="edge shards: directory, glob or URL (overrides INPUT/edges)")
    p.add_argument("--nodes", help="node shards: directory, glob or URL (overrides INPUT/nodes)")
    direction = p.add_mutually_exclusive_group()
    direction.add_argument("--undirected", dest="undirected", action="store_true", default=None,
                           help="each edge is stored once for both directions: (v, u) duplicates (u, v) "
                                "(default: from meta.json, else directed)")
    direction.add_argument("--directed", dest="undirected", action="store_false",
                           help="(u, v) and (v, u) are different edges")
    p.add_argument("--num-classes", type=_positive_int, help="labels must lie in [-1, C)")
    p.add_argument("--no-duplicate-check", action="store_true", help="skip the duplicate-edge count")
    p.add_argument("--json", action="store_true", help="print the report as JSON")

    p = sub.add_parser("clean", help="copy an input without self-loops and/or duplicate edges")
    _add_common(p)
    p.add_argument("input", help="the input directory to copy")
    p.add_argument("out", help="the cleaned input directory to write")
    p.add_argument("--drop-self-loops", action="store_true", help="drop edges (u, u)")
    p.add_argument("--drop-duplicates", action="store_true",
                   help="drop repeated edges (keeps the first occurrence)")
    p.add_argument("--undirected", action="store_true", default=None,
                   help="(v, u) duplicates (u, v) (default: from meta.json)")
    p.add_argument("--overwrite", action="store_true", help="replace an existing output")

    p = sub.add_parser("demo", help="the whole flow on the bundled Cora graph")
    _add_common(p)
    p.add_argument("--workdir", help="keep the outputs here (default: a temporary directory)")

    # Commands that live in their own modules register themselves: each module has
    # ``register(subparsers, add_common)`` that adds parsers with a ``handler`` default.
    for module in _command_modules():
        module.register(sub, _add_common)
    return parser


def _command_modules():
    from asepr.workflows import commands_bench, commands_ingest, commands_partition, commands_train, plot

    return [commands_partition, commands_ingest, commands_train, plot, commands_bench]


def _setup_logging(args: argparse.Namespace) -> None:
    if args.quiet:
        level = logging.WARNING
    else:
        level = {0: logging.WARNING, 1: logging.INFO}.get(args.verbose, logging.DEBUG)
    logging.basicConfig(level=level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    if level >= logging.WARNING:
        # distributed sets its own loggers to INFO when it is imported (after this), in
        # this process and in every worker process it spawns (which read the config
        # from the environment): drop their INFO records at our handlers.
        os.environ.setdefault("DASK_LOGGING__DISTRIBUTED", "warning")
        # With -q also its warnings (e.g. a worker killed at cluster shutdown).
        floor = logging.ERROR if args.quiet else logging.WARNING
        for handler in logging.getLogger().handlers:
            handler.addFilter(lambda r: r.levelno >= floor or not r.name.startswith("distributed"))


def _cmd_import(args: argparse.Namespace) -> int:
    from asepr.workflows.importing import run_import

    meta = run_import(
        args.format,
        args.src,
        args.out,
        shard_rows=args.shard_rows,
        seed=args.seed,
        overwrite=args.overwrite,
        drop_duplicates=args.drop_duplicates,
        options={
            "split_index": args.split_index,
            "split_scheme": args.split_scheme,
            "label_column": args.label_column,
            "node_table": args.node_table,
            "header": args.header,
            "delimiter": args.delimiter,
            "name": args.name,
            "undirected": args.undirected,
            "drop_self_loops": args.drop_self_loops or None,
        },
    )
    if not args.quiet:
        print(import_summary(meta, args.out))
    return 0


def import_summary(meta: dict, out: str) -> str:
    """The line ``asepr import`` ends with: what was written, and the self-loops and
    repeated edges left out of it (the published formats drop them as they import)."""
    counts = meta.get("counts") or {}
    left_out = [f"{counts[key]:,} {what}{'' if counts[key] == 1 else 's'} dropped" for key, what in
                (("self_loops_dropped", "self-loop"), ("exact_duplicates", "duplicate edge"))
                if counts.get(key)]
    return (f"imported {meta.get('name')} into {out}: {meta['num_nodes']:,} nodes, "
            f"{meta['num_edges']:,} edges{' (' + ', '.join(left_out) + ')' if left_out else ''}, "
            f"{meta['feat_dim']} features, {meta.get('num_classes')} classes")


def _cmd_synth(args: argparse.Namespace) -> int:
    from asepr.pipeline.inputs.synth import SynthConfig, generate

    config = SynthConfig(
        num_nodes=args.nodes,
        num_edges=args.edges,
        num_classes=args.classes,
        dim=args.dim,
        homophily=args.homophily,
        exponent=args.exponent,
        noise=args.noise,
        category_purity=args.category_purity,
        seed=args.seed,
        **({} if args.split is None else {"split": args.split}),
    )
    meta = generate(args.out, config, shard_rows=args.shard_rows, overwrite=args.overwrite)
    if not args.quiet:
        print(
            f"wrote synthetic graph to {args.out}: {meta['num_nodes']:,} nodes, "
            f"{meta['num_edges']:,} edges in {len(meta['shards']['edges'])} shard(s)"
        )
    return 0


def _cmd_validate(args: argparse.Namespace) -> int:
    from asepr.storage.integrity.validate import validate_input

    if args.input is None and (args.edges is None or args.nodes is None):
        raise AseprError("give an INPUT directory, or both --edges and --nodes.")
    report = validate_input(
        args.input,
        edges=args.edges,
        nodes=args.nodes,
        undirected=args.undirected,
        num_classes=args.num_classes,
        check_duplicates=not args.no_duplicate_check,
    )
    if args.json:
        print(json.dumps(report.to_dict(), indent=2))
    elif not args.quiet:
        print(report.summary())
        print("valid")
    return 0


def _cmd_clean(args: argparse.Namespace) -> int:
    from asepr.storage.inputs.clean import clean_input

    meta = clean_input(
        args.input,
        args.out,
        drop_self_loops=args.drop_self_loops,
        drop_duplicates=args.drop_duplicates,
        undirected=args.undirected,
        overwrite=args.overwrite,
    )
    c = meta["clean"]
    if not args.quiet:
        print(f"wrote {args.out}: {meta['num_edges']:,} edges; dropped {c['self_loops_dropped']:,} "
              f"self-loops and {c['duplicates_dropped']:,} duplicates")
    return 0


def _cmd_demo(args: argparse.Namespace) -> int:
    from asepr.workflows.demo import run_demo

    require_extra("torch", "asepr demo, which trains")  # before any step of the flow

    run_demo(args.workdir)
    return 0


_COMMANDS = {
    "import": _cmd_import,
    "synth": _cmd_synth,
    "validate": _cmd_validate,
    "clean": _cmd_clean,
    "demo": _cmd_demo,
}


def _without_prefix(message: str, command: str) -> str:
    """``message`` without a leading ``asepr COMMAND`` (or ``asepr COMMAND:``), which the
    error line already starts with: a library message may name the command it checks
    (``asepr partition OUT: the memory and disk plan: ...``)."""
    prefix = f"asepr {command}"
    if message.startswith((prefix + ":", prefix + " ")):
        return message[len(prefix):].lstrip(": ")
    return message


def main(argv: Sequence[str] | None = None) -> int:
    tune_malloc()  # before any thread starts: see asepr.storage.resources
    parser = build_parser()
    args = parser.parse_args(argv)
    _setup_logging(args)
    set_command_name(f"asepr {args.command}")  # what a lock or lease records: the name, never the arguments
    handler = getattr(args, "handler", None) or _COMMANDS[args.command]
    try:
        # A full disk or an unwritable directory: the project's error. Long steps show
        # their progress unless -q or --no-progress (asepr.workflows.progress).
        with os_errors_as_problems(), reporting(reporter_for(args)):
            return handler(args)
    except AseprError as exc:
        print(f"asepr {args.command}: error: {_without_prefix(str(exc), args.command)}", file=sys.stderr)
        return 1
    except ImportError as exc:  # an optional extra (torch, PyG, pymetis) that is not installed
        problem = missing_extra(exc, "this command")
        if problem is None:
            raise
        print(f"asepr {args.command}: error: {problem}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print(f"asepr {args.command}: interrupted", file=sys.stderr)
        return 130


def run() -> None:
    """The ``asepr`` console script: :func:`main`, then the process ends at once.

    Every command has finished its work when :func:`main` returns (its files written
    and closed, its threads and worker processes joined), so the interpreter's teardown
    (collecting every object, unloading the modules) only adds time, noticeably after a
    large ``asepr partition`` (``docs/results/scale/README.md``). The output streams and the log handlers are
    flushed first; a command that left a child process running exits normally.
    """
    code = main()
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    if multiprocessing.active_children():
        sys.exit(code)
    os._exit(code)


if __name__ == "__main__":
    run()
