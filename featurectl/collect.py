"""``featurectl collect``: scrape every live gateway's /metrics into a dataset for ``plan``.

Each round finds the live gateways in ZooKeeper (their registrations carry
``metrics_url``), adds the ``--gateway`` URLs, scrapes them concurrently
(``featurectl.scrape``) and buffers the samples for the Parquet dataset
(``featurectl.plan.columnar``; ``--format text``: one ``.prom`` file plus sidecar per
gateway), and writes a snapshot of the finalized levels and registrations, so
``featurectl plan`` can run later without ZooKeeper. The layout is described in
``featurectl.plan.layout``. Each gateway's /clients (who connected, from where, since
when, which versions were used and refused) goes to ``DIR/clients/``
(``featurectl.plan.clients_dataset``), written when the samples are.

``--prometheus URL`` and ``--from-prometheus FILE`` take the same series from Prometheus
instead (``featurectl.prometheus``).

This module is the command: the rounds loop and the ZooKeeper session; its arguments and
help are ``featurectl.collect_options``'.
"""

from __future__ import annotations

import argparse
import logging
import signal
import sys
import threading
import time
from datetime import UTC, datetime
from pathlib import Path

from kazoo.exceptions import KazooException
from kazoo.handlers.threading import KazooTimeoutError

from .exits import EXIT_NOTHING, EXIT_OK, EXIT_USAGE
from .plan.clients_dataset import ClientSink
from .plan.columnar import SampleSink
from .plan.layout import TextSink
from .plan.layout import write_state as write_state_file
from .plan.live_state import Registry
from .prometheus import (
    FIRST_PAGE_POINTS,
    MAX_POINTS_PER_SERIES,
    ExportError,
    PrometheusError,
    import_exports,
    pull_prometheus,
)
from .scrape import (
    Sink,
    Target,
    collect_round,
    merge_targets,
    targets_from_registry,
)

log = logging.getLogger("featurectl.collect")

DEFAULT_INTERVAL_S = 15.0
# Parquet: scrapes are buffered and written every this many seconds (and at exit); a file
# per 15 s round would be thousands of tiny files a day, each costing the planner an open.
DEFAULT_FLUSH_S = 300.0


def run_collect(args: argparse.Namespace) -> int:
    logging.basicConfig(level=logging.INFO, format="featurectl collect: %(message)s")
    if not (args.zookeeper or args.gateway or args.from_prometheus or args.prometheus):
        print(
            "featurectl collect: nothing to collect from; give --zookeeper CONNECT, "
            "--gateway URL, --prometheus URL or --from-prometheus FILE (see --help)",
            file=sys.stderr,
        )
        return EXIT_USAGE
    if args.rounds is not None and args.rounds < 1:
        print("featurectl collect: --rounds must be >= 1", file=sys.stderr)
        return EXIT_USAGE
    out = Path(args.out)
    sink: Sink = SampleSink(out) if args.format == "parquet" else TextSink(out)
    total = 0
    try:
        total += len(import_exports(out, args.from_prometheus, sink=sink))
        if args.prometheus:
            total += _pull(args, sink)
    except (ExportError, PrometheusError) as exc:
        print(f"featurectl collect: {exc}", file=sys.stderr)
        return EXIT_USAGE
    finally:
        sink.flush()
    if not (args.zookeeper or args.gateway):
        return _finish(out, total, rounds=0)

    registry = None
    if args.zookeeper:
        try:
            registry = Registry(args.zookeeper, args.chroot, args.timeout)
        except Exception as exc:  # kazoo raises its own timeout types, and ValueError
            print(
                f"featurectl collect: cannot connect to ZooKeeper {args.zookeeper}: "
                f"{exc or type(exc).__name__}; check the connect string and that it is up",
                file=sys.stderr,
            )
            return EXIT_USAGE
    rounds = 1 if args.once else args.rounds
    clients = ClientSink(out)
    stop = _stop_event()
    done = 0
    registered: list[Target] = []
    flushed = time.monotonic()
    try:
        while True:
            written, registered = _one_round(out, registry, args, registered, sink, clients)
            total += written
            done += 1
            if rounds is not None and done >= rounds:
                break
            if time.monotonic() - flushed >= args.flush:
                sink.flush()
                clients.flush()
                flushed = time.monotonic()
            if stop.wait(args.interval):
                break
    finally:
        # Also on Ctrl-C/SIGTERM (the loop ends after its round): nothing buffered is lost.
        sink.flush()
        clients.flush()
        if registry is not None:
            registry.close()
    return _finish(out, total, rounds=done)


def _pull(args: argparse.Namespace, sink: Sink) -> int:
    """``--prometheus``: the samples of ``--range`` before ``--end`` at ``--step``."""
    end = args.end if args.end is not None else time.time()
    start = end - args.range
    if args.step > args.range:
        raise PrometheusError(f"--step {args.step:g}s is longer than --range {args.range:g}s")
    samples = pull_prometheus(args.prometheus, start, end, args.step, sink, timeout=args.timeout)
    if samples == 0:
        log.warning(
            "%s has no kafka_gateway_* series between %s and %s",
            args.prometheus,
            datetime.fromtimestamp(start, UTC).isoformat(),
            datetime.fromtimestamp(end, UTC).isoformat(),
        )
    else:
        log.info("pulled %d samples from %s", samples, args.prometheus)
    return samples


def _one_round(
    out: Path,
    registry: Registry | None,
    args: argparse.Namespace,
    known: list[Target],
    sink: Sink,
    clients: ClientSink | None = None,
) -> tuple[int, list[Target]]:
    """One round; returns the files written and the registered targets it used.

    ``known``: the registered targets of the previous round, scraped again when
    ZooKeeper cannot be read (a ZooKeeper outage is when metrics matter most).
    """
    registered = known
    if registry is not None:
        try:
            snapshot = registry.snapshot()
        except (KazooException, KazooTimeoutError) as exc:
            log.warning(
                "cannot read ZooKeeper this round (%s: %s); scraping the %d gateway(s) of the "
                "last round, no state snapshot",
                type(exc).__name__,
                exc,
                len(known),
            )
        else:
            write_state_file(out, snapshot)
            registered, without = targets_from_registry(snapshot.registrations)
            if without:
                log.warning(
                    "gateways registered without a metrics_url (start them with "
                    "--metrics-listen): %s",
                    ", ".join(without),
                )
            if not snapshot.registrations:
                log.warning("no live gateway is registered under %s", registry.chroot)
    result = collect_round(
        out,
        merge_targets(registered, args.gateway),
        timeout=args.timeout,
        sink=sink,
        clients=clients,
    )
    log.info(
        "round %s: %d scraped, %d unreachable",
        result.round_name,
        len(result.written),
        len(result.failed),
    )
    return len(result.written), registered


def _stop_event() -> threading.Event:
    """Set on SIGINT/SIGTERM so a sleeping loop ends after the round in progress."""
    stop = threading.Event()

    def on_signal(signum: int, frame: object) -> None:
        log.info("stopping after this round (signal %d)", signum)
        stop.set()

    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGINT, on_signal)
        signal.signal(signal.SIGTERM, on_signal)
    return stop


def _finish(out: Path, total: int, rounds: int) -> int:
    if total == 0:
        print(
            f"featurectl collect: nothing collected into {out} after {rounds} round(s); "
            "see the warnings above",
            file=sys.stderr,
        )
        return EXIT_NOTHING
    print(f"featurectl collect: collected into {out}; next: featurectl plan --metrics {out}")
    return EXIT_OK


__all__ = [
    # The Prometheus paging, which the end-to-end test sizes its range by.
    "FIRST_PAGE_POINTS",
    "MAX_POINTS_PER_SERIES",
    "run_collect",
]
