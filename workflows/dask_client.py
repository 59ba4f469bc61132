"""Where the Dask stages run: an existing scheduler, a LocalCluster, or local threads.

Order of precedence (docs/design.md#command-line-conventions): ``--scheduler-address``, ``--scheduler-file``, the
``DASK_SCHEDULER_ADDRESS`` environment variable, and otherwise a ``LocalCluster`` of
``--workers`` single-threaded worker processes (``--workers 0``: no cluster, the
stages run on threads of this process).

Without ``--workers`` a machine of up to two cores runs on threads: there, worker
processes only compete with the driver's streaming stages for the same two cores, and
their start-up and the transfers between processes cost more than they return
(``docs/results/implementation-choices/workers.md``). Larger machines start up to four worker
processes.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import sys
from collections.abc import Iterator

from asepr.storage.errors import AseprError, format_problem

__all__ = ["add_dask_arguments", "client_from_args", "dask_client", "default_workers"]

log = logging.getLogger(__name__)


def default_workers() -> int:
    """Local worker processes when nothing else is said: none (threads) on up to two
    cores, otherwise up to 4 (see the module docstring)."""
    cores = os.cpu_count() or 1
    return 0 if cores <= 2 else min(4, cores)


def add_dask_arguments(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("Dask")
    g.add_argument("--scheduler-address", help="address of a running Dask scheduler (tcp://host:8786); "
                                               "default: $DASK_SCHEDULER_ADDRESS, else a local cluster")
    g.add_argument("--scheduler-file", help="scheduler file written by `dask scheduler --scheduler-file`")
    g.add_argument("--workers", type=int, default=None,
                   help=f"local cluster: worker processes (default on this machine: {default_workers()}; "
                        "0 runs the stages on threads of this process, the default on up to two cores)")
    g.add_argument("--memory-limit", default=None,
                   help="local cluster: memory limit per worker, e.g. 2GiB (default: dask's 'auto')")


@contextlib.contextmanager
def dask_client(
    *,
    scheduler_address: str | None = None,
    scheduler_file: str | None = None,
    workers: int | None = None,
    memory_limit: str | None = None,
) -> Iterator[object | None]:
    """Yield a ``distributed.Client`` (or None for local threads); close what it opened."""
    address = scheduler_address or (None if scheduler_file else os.environ.get("DASK_SCHEDULER_ADDRESS"))
    if address or scheduler_file:
        from distributed import Client

        target = address or scheduler_file
        try:
            client = Client(address, timeout="20s") if address else Client(scheduler_file=scheduler_file, timeout="20s")
        except (OSError, TimeoutError, ValueError) as exc:
            raise AseprError(
                format_problem(
                    f"Dask scheduler {target}",
                    "a running scheduler that answers",
                    f"{type(exc).__name__}: {exc}",
                    "start one (`dask scheduler`), fix the address, or drop --scheduler-address "
                    "and unset DASK_SCHEDULER_ADDRESS to use a local cluster.",
                )
            ) from exc
        log.info("using the Dask scheduler at %s", client.scheduler.address)
        with client:
            yield client
        return
    if workers is not None and workers < 0:
        raise AseprError(format_problem("--workers", "a count >= 0", str(workers)))
    if workers is None:
        workers = default_workers()
    if workers == 0:
        yield None
        return
    from distributed import Client, LocalCluster

    n = workers
    cluster = LocalCluster(
        n_workers=n,
        threads_per_worker=1,
        processes=True,
        memory_limit=memory_limit or "auto",
        # A free port: the scheduler serves HTTP even without a dashboard address, and on
        # the default 8787 a second run beside a first printed a port warning through -q.
        dashboard_address=":0",
        silence_logs=logging.ERROR,
    )
    log.info("started a local Dask cluster of %d worker process(es); dashboard %s", n, cluster.dashboard_link)
    with cluster, Client(cluster) as client:
        yield client


@contextlib.contextmanager
def client_from_args(args: argparse.Namespace) -> Iterator[object | None]:
    """:func:`dask_client` configured from :func:`add_dask_arguments` flags. A run on a
    Dask cluster (local or remote) prints where its dashboard is, unless ``-q``: the
    dashboard is where a long run's tasks can be watched."""
    with dask_client(
        scheduler_address=args.scheduler_address,
        scheduler_file=args.scheduler_file,
        workers=args.workers,
        memory_limit=args.memory_limit,
    ) as client:
        link = getattr(client, "dashboard_link", None) if client is not None else None
        if link and not getattr(args, "quiet", False):
            print(f"asepr {args.command}: Dask dashboard at {link}", file=sys.stderr, flush=True)
        yield client
