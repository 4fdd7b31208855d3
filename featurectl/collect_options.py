"""``featurectl collect``'s command line: its options and the help that teaches them. What
it does is ``featurectl.collect``'s.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from gateway.commands import add_command
from gateway.features.store import DEFAULT_CHROOT, ZOOKEEPER_ENV

from .collect import DEFAULT_FLUSH_S, DEFAULT_INTERVAL_S, run_collect
from .options import positive_seconds
from .prometheus import duration_arg, time_arg
from .scrape import SCRAPE_TIMEOUT_S

EPILOG = """\
examples:
  # every gateway registered in ZooKeeper, every 15 s until Ctrl-C
  featurectl collect --zookeeper zk-0:2181 --out metrics/

  # one round (cron), plus a gateway that does not register itself
  featurectl collect --zookeeper zk-0:2181 --gateway http://gw-9:9404/metrics --once --out metrics/

  # no scraping: a week of the gateways' series from Prometheus, one sample a minute
  featurectl collect --prometheus http://prometheus:9090 --range 7d --step 1m --out metrics/

  # or import Prometheus exports (query_range JSON)
  curl -sG http://prometheus:9090/api/v1/query_range \\
       --data-urlencode 'query={__name__=~"kafka_gateway_.*"}' \\
       --data-urlencode start=2025-01-01T00:00:00Z --data-urlencode end=2025-01-02T00:00:00Z \\
       --data-urlencode step=60s > gw.json
  featurectl collect --from-prometheus gw.json --out metrics/

  # then plan offline
  featurectl plan --metrics metrics/ --target group.version=1

format: Parquet under DIR/samples/ by default (buffered, written every --flush seconds
        and at exit); --format text writes the old one-file-per-scrape layout, which
        plan still reads ('featurectl convert' turns it into Parquet).

exit codes: 0 collected, 1 nothing collected (every gateway unreachable, no input, no
            gateway series in the Prometheus range), 2 usage error, ZooKeeper or
            Prometheus unreachable, or a query Prometheus refused
"""


def add_collect_subcommand(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    parser = add_command(
        subparsers,
        "collect",
        help_text="scrape every live gateway's /metrics into a dataset for 'featurectl plan'",
        description=(
            "Find the live gateways in ZooKeeper (plus --gateway URLs), scrape their "
            "Prometheus /metrics every --interval seconds into a Parquet dataset in DIR, and "
            "snapshot the finalized levels and registrations into DIR/state/ so 'featurectl "
            "plan' can run offline. --prometheus pulls the same series from a Prometheus "
            "server instead (query_range, paged in time); --from-prometheus imports "
            "query_range exports."
        ),
        epilog=EPILOG,
    )
    parser.add_argument("--out", required=True, metavar="DIR", help="dataset directory")
    parser.add_argument(
        "--zookeeper",
        metavar="CONNECT",
        default=os.environ.get(ZOOKEEPER_ENV) or None,
        help=f"ZooKeeper connect string (host:port[,...]) to find live gateways [${ZOOKEEPER_ENV}]",
    )
    parser.add_argument(
        "--chroot", default=DEFAULT_CHROOT, help="gateways' ZooKeeper chroot [%(default)s]"
    )
    parser.add_argument(
        "--gateway",
        action="append",
        default=[],
        metavar="URL",
        help="a /metrics URL to scrape as well, e.g. http://gw-0:9404/metrics (repeatable)",
    )
    parser.add_argument(
        "--from-prometheus",
        action="append",
        default=[],
        type=Path,
        metavar="FILE",
        help="import a Prometheus /api/v1/query_range JSON export (repeatable)",
    )
    parser.add_argument(
        "--prometheus",
        metavar="URL",
        help="pull the gateways' series from this Prometheus (/api/v1/query_range) instead",
    )
    parser.add_argument(
        "--range",
        type=duration_arg,
        default=duration_arg("7d"),
        metavar="DURATION",
        help="with --prometheus: how far back from --end, e.g. 7d, 12h [7d]",
    )
    parser.add_argument(
        "--step",
        type=duration_arg,
        default=duration_arg("1m"),
        metavar="DURATION",
        help="with --prometheus: time between samples, e.g. 1m, 15s [1m]",
    )
    parser.add_argument(
        "--end",
        type=time_arg,
        metavar="TIME",
        help="with --prometheus: end of the range, RFC 3339 or Unix seconds [now]",
    )
    parser.add_argument(
        "--format",
        choices=("parquet", "text"),
        default="parquet",
        help="parquet: DIR/samples/ (what plan reads fastest); text: DIR/scrapes/, one "
        "Prometheus text file per scrape (the old layout) [parquet]",
    )
    parser.add_argument(
        "--flush",
        type=positive_seconds,
        default=DEFAULT_FLUSH_S,
        metavar="S",
        help=f"parquet: write buffered scrapes to a file every S seconds [{DEFAULT_FLUSH_S:g}]",
    )
    parser.add_argument(
        "--interval",
        type=positive_seconds,
        default=DEFAULT_INTERVAL_S,
        metavar="S",
        help=f"seconds between rounds [{DEFAULT_INTERVAL_S:g}]",
    )
    rounds = parser.add_mutually_exclusive_group()
    rounds.add_argument("--once", action="store_true", help="one round, then exit")
    rounds.add_argument(
        "--rounds", type=int, metavar="N", help="stop after N rounds [until Ctrl-C/SIGTERM]"
    )
    parser.add_argument(
        "--timeout",
        type=positive_seconds,
        default=SCRAPE_TIMEOUT_S,
        metavar="S",
        help=f"per-scrape and ZooKeeper timeout [{SCRAPE_TIMEOUT_S:g}]",
    )
    parser.set_defaults(handler=run_collect, parser=parser)
    return parser


__all__ = ["add_collect_subcommand"]
