"""The planner's SparkSession: which settings, on which master, and a quiet driver.

A local master's driver listens on loopback and logs errors only (its own log4j2
profile, ``featurectl/data/``); a cluster keeps its spark-defaults and gets the JVM
options below; Spark Connect gets the session settings alone. PySpark is imported only
when a session starts, so the CLI's parsers load without it.
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Mapping, Sequence
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

DEFAULT_MASTER = "local[*]"
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
# C2 within the first 100k rows, so large runs keep it (C1 alone had halved 100M's
# speed; docs/planner.md#jvm-settings).
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
    # as slow as local[2] on the same data (docs/planner.md#few-spark-jobs); adaptive
    # execution coalesces further where it can.
    "spark.sql.shuffle.partitions": "8",
}


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


__all__ = [
    "APP_CONF",
    "CLUSTER_JVM_CONF",
    "DEFAULT_MASTER",
    "JIT_OPTIONS",
    "JVM_CONF",
    "LOCAL_CONF",
    "LOOPBACK",
    "QUIET_LOG4J2",
    "SESSION_CONF",
    "TUNING_CONF",
    "loopback_driver",
    "quiet_java_options",
    "spark_defaults",
    "spark_session",
    "under_spark_submit",
]
