"""``featurectl plan``'s arguments: the parser, its value types and its help text.

Shared by ``featurectl plan``, ``spark-submit job.py`` and ``featurectl convert``
(``--verbose``); nothing here imports PySpark.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable
from datetime import datetime

from featurectl.plan.layout import parse_utc
from featurectl.plan.model import DEFAULT_OUT
from featurectl.plan.session import DEFAULT_MASTER
from gateway.features.store import DEFAULT_CHROOT, ZOOKEEPER_ENV

EPILOG = """\
examples:
  # what would finalizing these levels need? (offline, from a collected dataset)
  featurectl plan --metrics metrics/ --target transaction.version=2 --target group.version=1

  # no --target: plan the highest level every live gateway supports, per feature
  featurectl plan --metrics metrics/ --zookeeper zk-0:2181 --out plan/

  # can the brokers go to Kafka 4.0, and which clients must move first?
  featurectl plan --metrics metrics/ --release 4.0

  # who still uses share groups, before disabling them?
  featurectl plan --metrics metrics/ --target share.version=0

  # on a cluster (see 'pydoc featurectl.plan.job')
  spark-submit --master spark://m:7077 featurectl/plan/job.py --metrics hdfs:///gw/metrics

output (in --out): plan.json (machine-readable), report.md (with charts/*.png),
                   report.html (one file, charts inside: to mail or keep as a CI artefact)

state: --zookeeper reads finalized levels and live gateways now; without it the newest
       DIR/state/*.json snapshot is used, else the gateways' feature gauges.

spark: a local master (the default) keeps the driver on 127.0.0.1; to bind it elsewhere
       set SPARK_LOCAL_IP=ADDRESS, or --conf spark.driver.host=HOST (with
       spark.driver.bindAddress=ADDRESS where the two differ). Spark logs errors only;
       --verbose gives its usual logging (a log4j2.properties in SPARK_CONF_DIR applies
       then) and says where the driver listens.

exit codes: 0 plan written and every target and --release is safe to apply now,
            1 plan written but some target or release is not safe yet (see report.md),
            2 usage error, no dataset, or ZooKeeper unreachable
"""


def target_arg(text: str) -> tuple[str, int]:
    """argparse type of ``--target NAME=LEVEL``."""
    name, sep, level = text.partition("=")
    try:
        value = int(level) if sep and name.strip() else -1
    except ValueError:
        value = -1
    if value < 0:
        raise argparse.ArgumentTypeError(
            f"expected NAME=LEVEL with LEVEL >= 0 (for example group.version=1), got {text!r}"
        )
    return name.strip(), value


def utc_arg(text: str) -> datetime:
    """argparse type of ``--since``/``--until``: RFC 3339; without a zone, UTC."""
    try:
        return parse_utc(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected RFC 3339 like 2025-01-06T00:00:00Z, got {text!r}"
        ) from None


def conf_arg(text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {text!r}")
    return key, value


def configure_parser(
    parser: argparse.ArgumentParser, handler: Callable[[argparse.Namespace], int]
) -> argparse.ArgumentParser:
    """``plan``'s arguments on ``parser``, which runs ``handler`` with them."""
    parser.add_argument(
        "--metrics", required=True, metavar="DIR", help="the dataset 'featurectl collect' wrote"
    )
    parser.add_argument(
        "--target",
        action="append",
        default=[],
        type=target_arg,
        metavar="NAME=LEVEL",
        help="a feature level to plan for (repeatable; 0 plans disabling it) "
        "[per feature: the highest level every live gateway supports]",
    )
    parser.add_argument(
        "--release",
        action="append",
        default=[],
        metavar="VERSION",
        help="a Kafka release to plan the brokers' upgrade to, as kafka-features.sh "
        "writes --release-version (4.0, 4.1): who breaks on it, which gateways are too "
        "old, the roll and the finalize (repeatable; with or without --target)",
    )
    parser.add_argument(
        "--out", default=DEFAULT_OUT, metavar="DIR", help=f"where to write [{DEFAULT_OUT}]"
    )
    parser.add_argument(
        "--master",
        metavar="URL",
        help=f"Spark master [{DEFAULT_MASTER}; under spark-submit: its --master]",
    )
    parser.add_argument(
        "--remote",
        metavar="sc://HOST:PORT",
        help="run through a Spark Connect server instead of a local or cluster driver",
    )
    parser.add_argument(
        "--zookeeper",
        metavar="CONNECT",
        default=os.environ.get(ZOOKEEPER_ENV) or None,
        help="read the live state from ZooKeeper, else the dataset's newest snapshot "
        f"[${ZOOKEEPER_ENV}]",
    )
    parser.add_argument(
        "--chroot", default=DEFAULT_CHROOT, help="gateways' ZooKeeper chroot [%(default)s]"
    )
    parser.add_argument(
        "--catalogue", metavar="FILE", help="feature catalogue TOML [the built-in one]"
    )
    parser.add_argument(
        "--since",
        type=utc_arg,
        metavar="TIME",
        help="only samples at or after this time (RFC 3339, e.g. 2025-01-06T00:00:00Z); "
        "a Parquet dataset then reads only the days from there [all]",
    )
    parser.add_argument(
        "--until", type=utc_arg, metavar="TIME", help="only samples before this time [all]"
    )
    parser.add_argument(
        "--conf",
        action="append",
        default=[],
        type=conf_arg,
        metavar="KEY=VALUE",
        help="a Spark setting, e.g. spark.driver.memory=4g (repeatable)",
    )
    add_verbose_argument(parser)
    parser.set_defaults(handler=handler, parser=parser)
    return parser


def add_verbose_argument(parser: argparse.ArgumentParser) -> None:
    """``--verbose``, for every subcommand that starts Spark (``plan``, ``convert``)."""
    parser.add_argument(
        "--verbose",
        action="store_true",
        help="Spark's usual logging and the driver's address on stderr [errors only]",
    )


__all__ = ["EPILOG", "add_verbose_argument", "configure_parser"]
