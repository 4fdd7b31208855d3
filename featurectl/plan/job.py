"""``featurectl plan``: which gateways and clients stand between the cluster and a level.

Reads a metrics dataset (``featurectl collect``) with PySpark, plus the live state
(ZooKeeper with ``--zookeeper``, else the dataset's newest state snapshot, else the
gateways' own feature gauges), and writes ``plan.json``, ``report.md`` and PNG charts.

Locally (``--master local[*]`` is the default)::

    featurectl plan --metrics metrics/ --target transaction.version=2 --out plan/

On a Spark cluster, submit this file from a machine with kafka-gateway installed (the
driver imports it). Executors need PySpark's usual Python but no project code: the
transformations are Spark SQL expressions, not Python UDFs. The dataset may live on
any file system Spark reads; ``--out`` is a directory on the driver (client deploy
mode). ``PYSPARK_PYTHON`` (or ``PYSPARK_DRIVER_PYTHON``) picks the driver's Python (else
spark-submit runs ``python3`` from the PATH)::

    PYSPARK_PYTHON=.venv/bin/python spark-submit --master spark://spark-master:7077 \\
        --deploy-mode client --driver-memory 4g --executor-memory 4g \\
        featurectl/plan/job.py --metrics s3a://ops/kafka-gateway/metrics \\
        --target group.version=1 --zookeeper zk-0:2181 --out plan/

``python featurectl/plan/job.py ...`` and ``python -m featurectl.plan.job ...`` take the
same arguments as ``featurectl plan``.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any

from featurectl.plan.columnar import PARQUET_SUFFIX, SAMPLES, has_parquet
from featurectl.plan.layout import PROM_SUFFIX, SCRAPES, StateSnapshot, parse_utc
from gateway.commands import add_command, pasteable
from gateway.features.store import DEFAULT_CHROOT, ZOOKEEPER_ENV

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from gateway.features.catalogue import Catalogue

EXIT_OK = 0
EXIT_UNSAFE = 1
EXIT_USAGE = 2

DEFAULT_MASTER = "local[*]"
DEFAULT_OUT = "plan"
# Chart resolution: at most this many time buckets per chart (one per scrape is noise).
CHART_BUCKETS = 120
# Tiered compilation's C2 (tier 4) thresholds, raised from the JVM's defaults (600/5000
# invocations, 15000 invocations and loops, 40000 loop back edges).
JIT_OPTIONS = (
    "-XX:Tier4InvocationThreshold=100000 -XX:Tier4MinInvocationThreshold=20000 "
    "-XX:Tier4CompileThreshold=100000 -XX:Tier4BackEdgeThreshold=400000"
)
# Settings for a local master; a cluster keeps its own spark-defaults.
LOCAL_CONF = {
    "spark.ui.enabled": "false",
    # Local mode runs tasks inside the driver JVM: its heap is the cache.
    "spark.driver.memory": "2g",
    # List the dataset's round directories on the driver: a local listing is quick, a
    # listing job costs a task per directory.
    "spark.sql.sources.parallelPartitionDiscovery.threshold": "1000000",
}
# Settings of the application featurectl starts, on any master (spark-submit included).
APP_CONF = {
    # The progress bar garbles the planner's own console output.
    "spark.ui.showConsoleProgress": "false",
}
# JVM options of the driver featurectl starts on a local master, set unless --conf or
# spark-defaults.conf name the key (a cluster's: CLUSTER_JVM_CONF). The JIT's optimizing
# tier (C2) only for code that is really hot: a run is a few dozen short queries, each
# with freshly generated code, and C2 spent more CPU compiling lukewarm methods than it
# saved (10M samples on local[2]: ~28 of ~72 CPU s in the compiler threads; on a
# cluster every executor JVM compiles the same code again). Per-row code still reaches
# C2 within the first 100k rows, so large runs keep it (docs/planner.md#jvm-settings; C1 alone had
# halved 100M's speed).
JVM_CONF = {"spark.driver.extraJavaOptions": JIT_OPTIONS}
# On a cluster (any master but local) the driver runs no tasks: it plans a handful of
# queries, compiles their generated code once to check it, and joins a few thousand
# collected rows, the same work at 100M samples as at 1M. C1 alone does that for less
# CPU than C2 compiling it too, and the serial collector runs no GC threads beside it.
# Executors do the per-row work, so they keep C2 for hot code (JIT_OPTIONS), with the
# throughput collector instead of G1: a run is a batch of short tasks whose objects
# die young, where G1's concurrent threads and barriers cost CPU and its short pauses
# buy nothing (the serial collector measured the same on 1-core executors; the
# parallel one also uses the cores of larger executors). 10M samples, 2 workers x 1
# core on the 2-core box (docs/planner.md#jvm-settings): executors 33-38 -> 28-30
# CPU s, the driver JVM 16-19 -> 11-13, the run 51-61 -> 43-49 CPU s; 100M 116 -> 97-104.
CLUSTER_JVM_CONF = {
    "spark.driver.extraJavaOptions": "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC",
    "spark.executor.extraJavaOptions": f"{JIT_OPTIONS} -XX:+UseParallelGC",
}
DRIVER_JAVA_OPTIONS = "spark.driver.extraJavaOptions"
# Where the driver of a local master listens (its block manager and RPC port): a plan
# reads local files and needs no other machine, and an address on the LAN would let any
# of them reach the driver. Spark's default is the address of the hostname, or of the
# first interface when that resolves to loopback, which Spark warns about on every run.
LOOPBACK = "127.0.0.1"
# What the operator sets to choose the driver's address instead (any one of them).
LOCAL_IP_ENV = "SPARK_LOCAL_IP"
DRIVER_ADDRESS_KEYS = ("spark.driver.host", "spark.driver.bindAddress")
# Spark's log4j2 profile for the driver featurectl starts, unless --verbose: errors only
# (featurectl/data/). A healthy run's WARN lines are about the machine, not the plan.
QUIET_LOG4J2 = "plan-log4j2.properties"
LOG4J2_PROPERTIES = ("-Dlog4j2.configurationFile=", "-Dlog4j.configurationFile=")
SESSION_CONF = {
    # Timestamps in the report are UTC whatever the machine's zone.
    "spark.sql.session.timeZone": "UTC",
    # A scrape line that repeats a label must not fail the whole job (last one wins).
    "spark.sql.mapKeyDedupPolicy": "LAST_WIN",
}
# Sizing for the planner's data, set per session unless --conf or the cluster's own
# spark-defaults (spark-submit --conf included) name the key.
TUNING_CONF = {
    # A scrape file is tens of KB; Spark's default cost of opening one (4 MB) packs ~30
    # per task and makes thousands of tasks, each later scan of the cache paying for
    # them all. Costed at 64 KB, a task reads ~128 MB.
    "spark.sql.files.openCostInBytes": "65536",
    # The planner's shuffles carry a few thousand series or per-series samples: Spark's
    # default of 200 partitions makes ~200 tasks per stage, each a scheduling round trip
    # to an executor. On a standalone cluster that overhead alone made the plan twice
    # as slow as local[2] on the same data (docs/planner.md#few-spark-jobs); adaptive execution
    # coalesces further where it can.
    "spark.sql.shuffle.partitions": "8",
}

EPILOG = """\
examples:
  # what would finalizing these levels need? (offline, from a collected dataset)
  featurectl plan --metrics metrics/ --target transaction.version=2 --target group.version=1

  # no --target: plan the highest level every live gateway supports, per feature
  featurectl plan --metrics metrics/ --zookeeper zk-0:2181 --out plan/

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

exit codes: 0 plan written and every target is safe to apply now,
            1 plan written but some target is not safe yet (see report.md),
            2 usage error, no dataset, or ZooKeeper unreachable
"""


class UsageError(Exception):
    """Bad arguments; the message says what to change."""


@dataclass(frozen=True)
class PlanInputs:
    metrics: str
    catalogue: Catalogue
    targets: Mapping[str, int]
    zookeeper: str | None = None
    # The --catalogue file as given (None: the built-in one), for the plan's own commands.
    catalogue_path: str | None = None
    chroot: str = DEFAULT_CHROOT
    out: Path = Path(DEFAULT_OUT)
    since: datetime | None = None
    until: datetime | None = None


@dataclass
class PlanData:
    """Everything the report needs, collected to the driver (small by construction)."""

    dataset: dict[str, Any]
    state: dict[str, Any]
    features: list[dict[str, Any]]
    verdicts: list[dict[str, Any]]
    blockers: list[dict[str, Any]]
    clients: list[dict[str, Any]]
    usage: list[dict[str, Any]]
    connections_series: list[dict[str, Any]]
    gated_series: list[dict[str, Any]]
    timings: dict[str, float] = field(default_factory=dict)


# -- arguments -------------------------------------------------------------------------------


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


def configure_parser(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
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
    parser.set_defaults(handler=run_plan, parser=parser)
    return parser


def add_verbose_argument(parser: argparse.ArgumentParser) -> None:
    """``--verbose``, for every subcommand that starts Spark (``plan``, ``convert``)."""
    parser.add_argument(
        "--verbose",
        action="store_true",
        help="Spark's usual logging and the driver's address on stderr [errors only]",
    )


def add_plan_subcommand(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    parser = add_command(
        subparsers,
        "plan",
        help_text="plan feature upgrades/downgrades from collected metrics (PySpark)",
        description=(
            "Read a dataset from 'featurectl collect' with Spark and tell, per feature, the "
            "highest level every live gateway supports, which gateways must be upgraded "
            "before each --target level, which client software still uses API versions a "
            "downgrade would withdraw, and the featurectl commands to run, in order. Writes "
            "plan.json, report.md and charts to --out."
        ),
        epilog=EPILOG,
    )
    return configure_parser(parser)


def build_parser() -> argparse.ArgumentParser:
    """The parser of ``spark-submit job.py`` / ``python -m featurectl.plan.job``."""
    parser = argparse.ArgumentParser(
        prog="featurectl plan",
        description="Plan feature upgrades/downgrades from collected gateway metrics.",
        epilog=pasteable(EPILOG),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    return configure_parser(parser)


# -- Spark -------------------------------------------------------------------------------------


def under_spark_submit() -> bool:
    """True when spark-submit started this Python (its JVM is already running)."""
    return "PYSPARK_GATEWAY_PORT" in os.environ


def spark_session(
    master: str | None,
    conf: Sequence[tuple[str, str]] = (),
    remote: str | None = None,
    *,
    verbose: bool = False,
) -> SparkSession:
    """The planner's session: classic (``master``) or Spark Connect (``remote``).

    With ``remote`` the driver is the Connect server's; only session settings (SQL
    confs) travel, and the transforms run unchanged (they are DataFrame code only).

    A driver JVM this starts (not spark-submit's, which runs already) logs errors only
    unless ``verbose``, and on a local master listens on 127.0.0.1 unless the operator
    chose an address (``SPARK_LOCAL_IP``, ``--conf spark.driver.host``/``bindAddress``,
    or the same in spark-defaults.conf).
    """
    from pyspark.sql import SparkSession

    given = dict(conf)
    if remote is not None:
        spark = SparkSession.builder.remote(remote).getOrCreate()
        _apply_session_conf(spark, given, cluster_set=set())
        if verbose:
            print(
                f"featurectl: Spark {spark.version} through Spark Connect {remote}",
                file=sys.stderr,
            )
        return spark
    launching = not under_spark_submit()
    if master is None and launching:
        master = DEFAULT_MASTER
    builder = SparkSession.builder.appName("featurectl-plan")
    settings = dict(APP_CONF)
    defaults: dict[str, str] = {}
    if master is not None:
        builder = builder.master(master)
        local = master.startswith("local")
        if local:
            jvm = JVM_CONF
            settings.update(LOCAL_CONF)
            # PySpark's helper processes (small local frames) must run this Python, not
            # whatever "python3" the PATH finds: versions must match and it has PySpark.
            os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
        else:
            jvm = CLUSTER_JVM_CONF
        defaults = spark_defaults()
        settings.update({k: v for k, v in jvm.items() if k not in defaults})
        if launching and local and loopback_driver(given, defaults):
            # The JVM resolves its own address at launch, before any conf is read (and
            # warns when the hostname is loopback): the environment PySpark starts it with.
            os.environ[LOCAL_IP_ENV] = LOOPBACK
            settings.update(dict.fromkeys(DRIVER_ADDRESS_KEYS, LOOPBACK))
    settings.update(given)
    if launching and not verbose:
        # Appended to whatever the driver's options are (ours, --conf's or the cluster's
        # spark-defaults.conf): --conf replaces that file's value, not adds to it.
        options = settings.get(DRIVER_JAVA_OPTIONS, defaults.get(DRIVER_JAVA_OPTIONS, ""))
        settings[DRIVER_JAVA_OPTIONS] = quiet_java_options(options)
    for key, value in settings.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    if not verbose:
        # Under spark-submit the JVM logs as its profile says; the planner's own queries
        # at least log errors only. (A driver featurectl started does so already.)
        spark.sparkContext.setLogLevel("ERROR")
    else:
        _print_driver(spark)
    # What spark-defaults.conf and spark-submit --conf set (static conf of the app).
    cluster_set = {k for k, _ in spark.sparkContext.getConf().getAll()} - set(given)
    _apply_session_conf(spark, given, cluster_set)
    return spark


def loopback_driver(given: Mapping[str, str], defaults: Mapping[str, str]) -> bool:
    """Whether a local master's driver goes on 127.0.0.1: unless the operator chose an
    address (``SPARK_LOCAL_IP``, or the driver's host or bind address by --conf or in
    spark-defaults.conf)."""
    if os.environ.get(LOCAL_IP_ENV):
        return False
    return not any(key in given or key in defaults for key in DRIVER_ADDRESS_KEYS)


def quiet_java_options(options: str) -> str:
    """The driver's Java ``options`` plus featurectl's errors-only log4j2 profile, unless
    they name a log4j configuration of their own."""
    if any(prop in options for prop in LOG4J2_PROPERTIES):
        return options
    # A file: URI has no spaces to quote (Spark splits these options as a shell would).
    profile = Path(str(resources.files("featurectl").joinpath(f"data/{QUIET_LOG4J2}")))
    return f"{options} {LOG4J2_PROPERTIES[0]}{profile.resolve().as_uri()}".strip()


def _print_driver(spark: SparkSession) -> None:
    """--verbose: where the driver listens (the first thing to check when executors or a
    firewall cannot reach it)."""
    conf = spark.sparkContext.getConf()
    host = conf.get("spark.driver.host")
    bind = conf.get("spark.driver.bindAddress", host)
    print(
        f"featurectl: Spark {spark.version} on {spark.sparkContext.master}, driver "
        f"{host}:{conf.get('spark.driver.port')} (bound to {bind})",
        file=sys.stderr,
    )


def spark_defaults_keys() -> set[str]:
    """The keys the spark-defaults.conf that spark-submit will read sets (none: empty)."""
    return set(spark_defaults())


def spark_defaults() -> dict[str, str]:
    """What the spark-defaults.conf that spark-submit will read sets (none: empty)."""
    conf_dir = os.environ.get("SPARK_CONF_DIR")
    if conf_dir is None:
        home = os.environ.get("SPARK_HOME")
        if home is None:
            import pyspark

            home = str(Path(pyspark.__file__).parent)
        conf_dir = str(Path(home) / "conf")
    try:
        text = (Path(conf_dir) / "spark-defaults.conf").read_text()
    except OSError:
        return {}
    settings = {}
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            # Java properties: the key ends at whitespace, "=" or ":"; the separator is
            # whitespace, or one "=" or ":" with whitespace around it.
            key = re.split(r"[\s=:]", line, maxsplit=1)[0]
            settings[key] = re.sub(r"^\s*[=:]?\s*", "", line[len(key) :])
    return settings


def _apply_session_conf(
    spark: SparkSession, given: Mapping[str, str], cluster_set: set[str]
) -> None:
    """SESSION_CONF always; TUNING_CONF where neither --conf nor the cluster set a key."""
    settings = dict(SESSION_CONF)
    settings.update({k: v for k, v in TUNING_CONF.items() if k not in cluster_set})
    settings.update(given)
    for key, value in settings.items():
        if key.startswith("spark.sql."):
            spark.conf.set(key, value)


# -- the plan ------------------------------------------------------------------------------------


class _Clock:
    def __init__(self) -> None:
        self.timings: dict[str, float] = {}
        self._last = time.perf_counter()

    def lap(self, name: str) -> None:
        now = time.perf_counter()
        self.timings[name] = round(now - self._last, 3)
        self._last = now


def compute_plan(spark: SparkSession, inputs: PlanInputs) -> PlanData:
    """Run the Spark side: read, transform, collect the small results.

    Two passes over the samples, each one query collected once: the gateway spans and
    label sets, which the second pass is planned from, then everything else (usage per
    series, chart buckets, connections, and the state when only the gauges tell it).
    What those few thousand rows add up to is Python on the driver (``tally``,
    ``decide``): a run used to be ~40 short Spark jobs, and planning and JIT-compiling
    them was most of a 10M-sample run (docs/planner.md#few-spark-jobs).
    """
    from pyspark.sql import functions as F

    from featurectl.plan import decide, readers, tally
    from featurectl.plan import transforms as tx

    clock = _Clock()
    root = readers.dataset_uri(inputs.metrics)
    dataset_samples = readers.read_samples(
        spark,
        root,
        metrics=tx.PLAN_METRICS,
        parse_labels=False,
        since=inputs.since,
        until=inputs.until,
    )
    keyed = tx.key_samples(dataset_samples.frame)
    if dataset_samples.text_count is not None:
        # Text lines are parsed per pass: parse them once. Parquet is read again
        # instead; reading the columns a pass needs costs less than building a cache.
        keyed = keyed.cache()
    spans_exact = tx.gateway_spans(keyed).withColumns(
        {"first_us": F.unix_micros("first_ts"), "last_us": F.unix_micros("last_ts")}
    )
    span_rows, label_rows = _collect_together(spans_exact, tx.label_sets(keyed))
    if not span_rows:
        raise readers.DatasetError(
            f"{inputs.metrics} has no kafka_gateway_* samples the planner reads; "
            "check that the scraped URLs are kafka-gateway /metrics endpoints"
        )
    total_samples = dataset_samples.total()
    clock.lap("parse")

    snapshot = _snapshot_state(spark, inputs, root)
    clock.lap("state")

    # The second pass joins these back as small local frames, times as exact integers
    # (a Python datetime would go through the driver's time zone and back).
    spans = _local_frame(
        spark, span_rows, "gateway_id string, first_us long, last_us long, scrapes long"
    ).select(
        "gateway_id",
        F.timestamp_micros("first_us").alias("first_ts"),
        F.timestamp_micros("last_us").alias("last_ts"),
        "scrapes",
    )
    labels_frame = _local_frame(spark, label_rows, tx.LABEL_SETS_SCHEMA)
    levels = tally.gated_levels(inputs.catalogue, label_rows)
    first = min(r["first_ts"] for r in span_rows)
    last = max(r["last_ts"] for r in span_rows)
    bucket_s = max(1, int((last - first).total_seconds() / CHART_BUCKETS) + 1)
    increases = tx.counter_increases(keyed, spans)
    gauges = [m for m in tx.PLAN_METRICS if m != tx.REQUESTS] if snapshot is None else []
    small = tx.labelled(keyed, labels_frame, [tx.CONNECTIONS, *gauges])
    frames = [
        tx.request_usage(increases, bucket_s, tally.gated_label_ids(label_rows, levels)),
        tx.connections_by_bucket(small, spans, bucket_s),
    ]
    if snapshot is None:
        frames += _metrics_state_frames(small, spans)
    usage_rows, connection_rows, *state_rows = (
        [_row(r) for r in part] for part in _collect_together(*frames)
    )
    state = snapshot or _metrics_state(inputs, *state_rows)
    if dataset_samples.text_count is not None:
        keyed.unpersist()

    labels = {r["label_id"]: _row(r) for r in label_rows}
    usage = tally.api_usage((r for r in usage_rows if r["series"] is not None), labels)
    client_dicts = tally.gated_clients(usage, levels, tally.connections_per_client(connection_rows))
    clock.lap("clients")

    # The decisions are Python on the driver: their inputs are a few dozen rows.
    catalogue = {name: spec.max_level for name, spec in inputs.catalogue.items()}
    features = decide.feature_levels(catalogue, state.gateway_ids, state.support, state.finalized)
    targets = dict(inputs.targets) or _default_targets(features)
    blocker_rows = decide.blocking_gateways(targets, state.gateway_ids, state.support)
    verdict_rows = decide.verdicts(
        targets, state.finalized, blocker_rows, client_dicts, len(state.gateway_ids)
    )
    clock.lap("verdicts")

    connections_series = tally.connections_series(connection_rows)
    gated_series = tally.gated_series(
        (r for r in usage_rows if r["series"] is None), labels, levels, bucket_s
    )
    clock.lap("charts")

    dataset = {
        "path": inputs.metrics,
        "samples": total_samples,
        "planner_samples": sum(r["samples"] for r in span_rows),
        "gateways": len(span_rows),
        "scrapes": sum(r["scrapes"] for r in span_rows),
        "start_ms": _ms(first),
        "end_ms": _ms(last),
        "gateway_spans": sorted(
            (
                {
                    "gateway_id": r["gateway_id"],
                    "first_ms": _ms(r["first_ts"]),
                    "last_ms": _ms(r["last_ts"]),
                    "scrapes": r["scrapes"],
                }
                for r in span_rows
            ),
            key=lambda g: g["gateway_id"],
        ),
    }
    return PlanData(
        dataset=dataset,
        state=state.doc,
        features=features,
        verdicts=verdict_rows,
        blockers=blocker_rows,
        clients=sorted(
            client_dicts,
            key=lambda c: (c["feature"], -c["level"], -c["requests"], c["client_software_name"]),
        ),
        usage=usage,
        connections_series=connections_series,
        gated_series=gated_series,
        timings=clock.timings,
    )


def _collect_together(*frames: DataFrame) -> list[list[dict[str, Any]]]:
    """The rows of each (small) frame, as plain dicts, from one query: one job graph to
    plan and run instead of one per frame. Columns of the same name must have one type."""
    from pyspark.sql import functions as F

    columns = [frame.columns for frame in frames]
    tagged = [frame.withColumn("_part", F.lit(i)) for i, frame in enumerate(frames)]
    union = tagged[0]
    for frame in tagged[1:]:
        union = union.unionByName(frame, allowMissingColumns=True)
    parts: list[list[dict[str, Any]]] = [[] for _ in frames]
    for row in union.collect():
        part = row["_part"]
        parts[part].append({c: row[c] for c in columns[part]})
    return parts


# Arrow types of the simple DDL types ``_local_frame`` is given.
_ARROW_TYPES = {"string": "string", "long": "int64", "int": "int32"}


def _local_frame(spark: SparkSession, rows: Sequence[Mapping[str, Any]], ddl: str) -> DataFrame:
    """A frame of ``rows`` (the columns ``ddl`` names, as ``name type, ...``) held in the
    query plan itself. From an Arrow table Spark makes a local relation: joining it
    takes no job, where rows from Python become an RDD whose broadcast runs a job with
    Python workers (~1 s of a 10M-sample run)."""
    import pyarrow as pa

    fields = [field.split() for field in ddl.split(", ")]
    schema = pa.schema([(name, _ARROW_TYPES[kind]) for name, kind in fields])
    table = pa.Table.from_pylist([{name: r[name] for name, _ in fields} for r in rows], schema)
    return spark.createDataFrame(table)


@dataclass
class LiveState:
    """Live gateways, their support and the finalized levels, from the best source."""

    doc: dict[str, Any]  # what plan.json says about the state
    gateway_ids: list[str]
    # (gateway_id, feature, min_level, max_level) per live gateway and feature it lists
    support: list[tuple[str, str, int | None, int | None]]
    finalized: dict[str, int]  # feature -> level, levels >= 1 only


def _snapshot_state(spark: SparkSession, inputs: PlanInputs, root: str) -> LiveState | None:
    """The state from ZooKeeper (``--zookeeper``), else the dataset's newest snapshot."""
    from featurectl.plan import readers

    if inputs.zookeeper:
        snapshot, source = _read_zookeeper(inputs.zookeeper, inputs.chroot), "zookeeper"
    else:
        snapshot, source = readers.read_latest_state(spark, root), "snapshot"
    if snapshot is None:
        return None
    registrations = snapshot.registrations
    gateway_ids = [r.gateway_id for r in registrations]
    doc = {
        "source": source,
        "time_ms": snapshot.time_ms,
        "zookeeper": inputs.zookeeper or snapshot.zookeeper,
        "chroot": snapshot.chroot or inputs.chroot,
        "catalogue": inputs.catalogue_path,
        "epoch": snapshot.finalized.epoch,
        "finalized": dict(snapshot.finalized.levels),
        "gateway_ids": gateway_ids,
        "registrations": [
            {
                "gateway_id": r.gateway_id,
                "listener": r.listener,
                "upstream": r.upstream,
                "gateway_version": r.gateway_version,
                "broker_software": f"{r.broker_software_name} {r.broker_software_version}",
                "metrics_url": r.metrics_url,
            }
            for r in registrations
        ],
    }
    support = [
        (reg.gateway_id, name, low, high)
        for reg in registrations
        for name, (low, high) in sorted(reg.features.items())
    ]
    finalized = {k: v for k, v in snapshot.finalized.levels.items() if v >= 1}
    return LiveState(doc, gateway_ids, support, finalized)


def _metrics_state_frames(samples: DataFrame, spans: DataFrame) -> list[DataFrame]:
    """Neither ZooKeeper nor a snapshot: the gateways' gauges are the best evidence left.
    Support, finalized levels and the newest epoch, collected with the second pass."""
    from pyspark.sql import functions as F

    from featurectl.plan import transforms as tx

    return [
        tx.support_from_metrics(samples, spans),
        tx.finalized_from_metrics(samples),
        tx.latest_per_gateway(samples, spans, tx.FINALIZED_EPOCH).agg(
            F.max("value").alias("epoch")
        ),
    ]


def _metrics_state(
    inputs: PlanInputs,
    support_rows: Sequence[Mapping[str, Any]],
    finalized_rows: Sequence[Mapping[str, Any]],
    epoch_rows: Sequence[Mapping[str, Any]],
) -> LiveState:
    support = [
        (r["gateway_id"], r["feature"], r["min_level"], r["max_level"]) for r in support_rows
    ]
    finalized = {r["feature"]: r["level"] for r in finalized_rows}
    gateway_ids = sorted({gateway_id for gateway_id, *_ in support})
    epoch = epoch_rows[0]["epoch"] if epoch_rows and epoch_rows[0]["epoch"] is not None else -1
    doc = {
        "source": "metrics",
        "time_ms": None,
        "zookeeper": None,
        "chroot": inputs.chroot,
        "catalogue": inputs.catalogue_path,
        "epoch": int(epoch),
        "finalized": finalized,
        "gateway_ids": gateway_ids,
        "registrations": [],
    }
    return LiveState(doc, gateway_ids, support, finalized)


def _read_zookeeper(connect: str, chroot: str) -> StateSnapshot:
    from featurectl.collect import Registry

    try:
        registry = Registry(connect, chroot, timeout_s=10.0)
    except Exception as exc:  # kazoo's timeout types differ per handler; ValueError
        raise UsageError(
            f"cannot connect to ZooKeeper {connect}: {exc or type(exc).__name__}; "
            "check --zookeeper, or drop it to use the dataset's state snapshot"
        ) from None
    try:
        return registry.snapshot()
    finally:
        registry.close()


def _default_targets(features: Sequence[Mapping[str, Any]]) -> dict[str, int]:
    """Per feature, the highest level every live gateway supports, when above finalized."""
    return {
        f["feature"]: f["cluster_max_level"]
        for f in features
        if f["cluster_max_level"] is not None and f["cluster_max_level"] > f["finalized_level"]
    }


def _ms(value: Any) -> int | None:
    return None if value is None else int(value.timestamp() * 1000)


def _row(row: Mapping[str, Any]) -> dict[str, Any]:
    """A collected row as plain JSON-able Python: timestamps become epoch milliseconds."""
    from pyspark.sql import Row

    def plain(value: Any) -> Any:
        if isinstance(value, Row):
            return {k: plain(v) for k, v in value.asDict().items()}
        if isinstance(value, list):
            return [plain(v) for v in value]
        if isinstance(value, datetime):
            return _ms(value)
        return value

    return {k: plain(v) for k, v in row.items()}


# -- entry points ------------------------------------------------------------------------------


def run_plan(args: argparse.Namespace) -> int:
    """``featurectl plan``: validate arguments, run Spark, write the report."""
    from featurectl.plan.readers import DatasetError
    from featurectl.plan.report import write_report
    from gateway.features.catalogue import CatalogueError, load_catalogue

    started = time.perf_counter()
    try:
        catalogue = load_catalogue(args.catalogue)
        inputs = PlanInputs(
            metrics=args.metrics,
            catalogue=catalogue,
            catalogue_path=args.catalogue,
            targets=_check_targets(args.target, catalogue),
            zookeeper=args.zookeeper,
            chroot=args.chroot,
            out=Path(args.out),
            since=args.since,
            until=args.until,
        )
        if "://" not in args.metrics:
            _check_local_dataset(Path(args.metrics))
        if args.since and args.until and args.since >= args.until:
            raise UsageError(f"--since {args.since} is not before --until {args.until}")
    except (UsageError, CatalogueError) as exc:
        print(f"featurectl plan: {exc}", file=sys.stderr)
        return EXIT_USAGE

    if args.remote is not None:
        problem = _check_remote(args.remote, args.master, args.conf)
        if problem:
            print(f"featurectl plan: {problem}", file=sys.stderr)
            return EXIT_USAGE
    spark = spark_session(args.master, args.conf, remote=args.remote, verbose=args.verbose)
    try:
        data = compute_plan(spark, inputs)
    except (DatasetError, UsageError) as exc:
        print(f"featurectl plan: {exc}", file=sys.stderr)
        return EXIT_USAGE
    finally:
        if not under_spark_submit():
            spark.stop()
    data.timings["total"] = round(time.perf_counter() - started, 3)
    written = write_report(inputs, data)
    _print_summary(data, written)
    return EXIT_OK if all(v["safe"] for v in data.verdicts) else EXIT_UNSAFE


def _check_remote(remote: str, master: str | None, conf: Sequence[tuple[str, str]]) -> str:
    """Why ``--remote`` cannot be used with these arguments ("" when it can)."""
    if master is not None:
        return "give --master or --remote, not both (the Connect server has its own master)"
    if not remote.startswith("sc://"):
        return f"--remote takes sc://HOST:PORT (a Spark Connect server), got {remote!r}"
    static = [key for key, _ in conf if not key.startswith("spark.sql.")]
    if static:
        return (
            f"--conf {', '.join(static)}: through Spark Connect only session settings "
            "(spark.sql.*) apply; set the others on the Connect server"
        )
    return ""


def _check_local_dataset(root: Path) -> None:
    """Fail before starting Spark when a local --metrics cannot be a dataset."""
    if not root.is_dir():
        raise UsageError(
            f"--metrics {root} is not a directory; collect one with 'featurectl collect --out DIR'"
        )
    if next((root / SCRAPES).glob(f"*/*{PROM_SUFFIX}"), None) is None and not has_parquet(root):
        raise UsageError(
            f"--metrics {root} holds no samples ({SAMPLES}/*/*{PARQUET_SUFFIX}) nor scrapes "
            f"({SCRAPES}/<round>/*{PROM_SUFFIX}); collect some with "
            "'featurectl collect --out DIR'"
        )


def _check_targets(targets: Sequence[tuple[str, int]], catalogue: Catalogue) -> dict[str, int]:
    out: dict[str, int] = {}
    for name, level in targets:
        spec = catalogue.get(name)
        if spec is None:
            raise UsageError(
                f"unknown feature {name!r} in --target; the catalogue has: "
                f"{', '.join(sorted(catalogue))}"
            )
        if level > spec.max_level:
            raise UsageError(
                f"--target {name}={level}: the catalogue's highest level of {name} is "
                f"{spec.max_level}"
            )
        if name in out:
            raise UsageError(f"--target names {name} twice")
        out[name] = level
    return out


def _print_summary(data: PlanData, written: Mapping[str, Path]) -> None:
    ds = data.dataset
    print(
        f"featurectl plan: {ds['samples']:,} samples from {ds['gateways']} gateway(s), "
        f"{ds['scrapes']} scrape(s); state from {data.state['source']}"
    )
    for v in data.verdicts:
        status = "safe now" if v["safe"] else "NOT safe yet"
        detail = ""
        if v["blocking_gateways"]:
            detail += f"; upgrade gateways first: {', '.join(v['blocking_gateways'])}"
        if v["blocking_clients"]:
            names = ", ".join(
                f"{c['client_software_name']} {c['client_software_version']}"
                for c in v["blocking_clients"]
            )
            detail += f"; clients still using it: {names}"
        print(
            f"  {v['feature']}: {v['current_level']} -> {v['level']} ({v['kind']}): "
            f"{status}{detail}"
        )
    if not data.verdicts:
        print("  nothing to plan: every feature is at the highest level all gateways support")
    print(
        f"wrote {written['report']}, {written['html']} and {written['plan']} "
        f"({data.timings['total']:.1f} s)"
    )


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return args.handler(args)


if __name__ == "__main__":
    sys.exit(main())
