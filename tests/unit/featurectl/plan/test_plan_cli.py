"""``featurectl plan`` end to end on a small synthetic dataset, as an operator runs it.

Each run is a real process with its own local Spark (what ``featurectl plan`` and
``spark-submit`` do), so runs are few: one run as an operator makes it
(``operator_plan``) serves every test that reads a plan of the whole dataset with its
targets, and a test starts its own only for what that run cannot show. They are marked
slow (``-m "not slow"`` keeps the quick usage checks).
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from featurectl.plan import synth
from featurectl.plan.columnar import PARQUET_SUFFIX, SAMPLES
from featurectl.plan.layout import STATE
from gateway.commands import shell_command
from tests.harness.spark import app_env

# How the plan's commands name featurectl, run from here (gateway.commands).
FEATURECTL = shell_command("featurectl")

REPO = Path(__file__).resolve().parents[4]
RUN_TIMEOUT_S = 240
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
# Four gateways, one of them in front of an old broker; a restart; clients as in synth.
SPEC = synth.SynthSpec(gateways=4, scrapes=8, old_gateways=1, restart_gateway=1)
# What the JVM itself may say on stderr before Spark runs: Spark's launcher always adds
# --add-modules=jdk.incubator.vector, and the JDK announces an incubator module with no
# switch to silence it. Nothing of Spark's.
JVM_NOTICES = {"WARNING: Using incubator modules: jdk.incubator.vector"}
# A line of Spark's log4j2 layout (its default one and featurectl's): "yy/MM/dd HH:mm:ss LEVEL".
LOG4J_LINE = re.compile(r"^\d\d/\d\d/\d\d \d\d:\d\d:\d\d (TRACE|DEBUG|INFO|WARN|ERROR) ", re.M)


@pytest.fixture(scope="module")
def dataset(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("metrics")
    synth.generate(out, SPEC)
    return out


def env() -> dict[str, str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("KAFKA_GATEWAY_ZOOKEEPER")}
    # spark-submit starts the driver with this Python (else whatever "python3" is).
    clean["PYSPARK_PYTHON"] = sys.executable
    return clean


def featurectl(
    *args: str, environ: Mapping[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "featurectl", *args],
        capture_output=True,
        text=True,
        env=dict(environ) if environ is not None else env(),
        timeout=RUN_TIMEOUT_S,
        cwd=REPO,
    )


# Two targets neither of which is safe yet: a gateway blocks one, clients the other; and
# Kafka 4.0, which the old gateway's protocol data predates.
TARGETS = ("--target", "transaction.version=2", "--target", "group.version=0", "--release", "4.0")


@pytest.fixture(scope="module")
def operator_plan(
    dataset: Path, tmp_path_factory: pytest.TempPathFactory
) -> tuple[subprocess.CompletedProcess[str], Path]:
    """``featurectl plan`` as an operator runs it, read by several tests: the default
    master, no SPARK_LOCAL_IP (loopback must be featurectl's doing) and an empty
    SPARK_CONF_DIR (Spark's default logging, which warns here of the hostname resolving
    to loopback and of no native Hadoop library). Its process and its --out."""
    out = tmp_path_factory.mktemp("plan")
    done = featurectl(
        "plan",
        "--metrics",
        str(dataset),
        "--out",
        str(out),
        *TARGETS,
        environ=operator_env(tmp_path_factory.mktemp("spark")),
    )
    return done, out


def operator_env(workdir: Path) -> dict[str, str]:
    """The tests' Spark with an empty SPARK_CONF_DIR and no address, nor a ZooKeeper."""
    environ = app_env(workdir)
    return {k: v for k, v in environ.items() if not k.startswith("KAFKA_GATEWAY_ZOOKEEPER")}


def comparable(plan: dict[str, Any]) -> dict[str, Any]:
    """plan.json but for when it was written, how fast, and the dataset's path."""
    plan = {k: v for k, v in plan.items() if k not in ("generated_at", "timings_s")}
    plan["dataset"] = {k: v for k, v in plan["dataset"].items() if k != "path"}
    return plan


@pytest.mark.slow
def test_plan_blocks_targets_names_who_and_writes_report_and_charts(operator_plan) -> None:
    done, out = operator_plan
    # 1: the plan was written, but neither target can be applied yet.
    assert done.returncode == 1, done.stderr[-3000:]
    assert "transaction.version: 1 -> 2 (upgrade): NOT safe yet" in done.stdout
    assert "gw-000.example:9092" in done.stdout

    plan = json.loads((out / "plan.json").read_text())
    assert {
        "version",
        "dataset",
        "state",
        "features",
        "verdicts",
        "blocking_gateways",
        "clients",
        "steps",
        "charts",
        "timings_s",
    } <= set(plan)
    assert plan["dataset"]["gateways"] == 4 and plan["dataset"]["samples"] > 0
    assert plan["state"]["source"] == "snapshot"
    verdicts = {v["feature"]: v for v in plan["verdicts"]}
    assert verdicts["transaction.version"]["blocking_gateways"] == ["gw-000.example:9092"]
    assert verdicts["group.version"]["kind"] == "disable"
    users = {
        (c["client_software_name"], c["client_software_version"])
        for c in verdicts["group.version"]["blocking_clients"]
    }
    assert ("apache-kafka-java", "4.0.0") in users
    features = {f["feature"]: f for f in plan["features"]}
    assert features["transaction.version"]["cluster_max_level"] == 1
    assert features["group.version"]["finalized_level"] == 1
    heartbeats = [c for c in plan["clients"] if c["api"] == "ConsumerGroupHeartbeat"]
    assert heartbeats and all(c["feature"] == "group.version" for c in heartbeats)
    assert all(c["first_seen"] and c["connections_peak"] > 0 for c in heartbeats)

    # By risk, not by name: both are blocked; the upgrade adds, the disable takes away.
    commands = [s["command"] for s in plan["steps"] if s["kind"] == "command"]
    assert commands == [
        f"{FEATURECTL} finalize --zookeeper zk-0.example:2181 --feature transaction.version=2",
        f"{FEATURECTL} disable --zookeeper zk-0.example:2181 --feature group.version "
        "--allow-downgrade",
    ]
    assert all(not s["safe_now"] for s in plan["steps"])
    # Why transaction.version=2 is capped: the API versions gw-000's upstream lacks.
    (capped,) = plan["blocking_gateways"]
    assert "Produce v12+, TxnOffsetCommit v5+, EndTxn v5+" in capped["reason"]
    assert "their upstreams lack at least one of Produce v12+" in done.stdout
    # The KIP-848 consumers would lose ConsumerGroupHeartbeat altogether: they must move.
    lost = {x["api"]: x for x in verdicts["group.version"]["losses"]}
    assert lost["ConsumerGroupHeartbeat"]["remedy"] == "switch"
    # Broken now: the pinned kafka-python refused Produce v2, with the remedy.
    (pinned,) = [b for b in plan["broken_now"] if b["client_software_name"] == "kafka-python"]
    assert (pinned["api"], pinned["api_version"], pinned["reason"]) == (
        "Produce",
        2,
        "unsupported_version",
    )
    assert "upgrade the library or unpin" in pinned["remedy"]
    # Wanting: the Streams app refused StreamsGroupHeartbeat wants streams.version=1.
    (wants,) = plan["wanting"]
    assert (wants["client_software_name"], wants["feature"], wants["level"]) == (
        "apache-kafka-streams",
        "streams.version",
        1,
    )
    # Kafka 4.0: no client used a version it refuses; the old gateway's data predates it.
    (release,) = plan["releases"]
    assert (release["release"], release["safe"]) == ("4.0", False)
    assert {c["verdict"] for c in release["clients"]} == {"works"}
    assert [g["gateway_id"] for g in release["gateways"] if not g["ready"]] == [
        "gw-000.example:9092"
    ]
    assert "Kafka 4.0: NOT safe yet; gateways to upgrade first: gw-000.example:9092" in (
        done.stdout
    )
    assert [s["kind"] for s in release["steps"]] == ["upgrade gateway", "roll brokers", "finalize"]
    by_client = {c["client_software_name"] for c in plan["api_versions_by_client"]}
    assert {"librdkafka", "kafka-python", "apache-kafka-java"} <= by_client

    report = (out / "report.md").read_text()
    for heading in (
        "## Verdicts",
        "## Broken now",
        "## Clients that want a feature they cannot get",
        "## Steps",
        "## Who loses what, per target",
        "## Features",
        "## API versions by client",
        "## Clients on gated API versions",
        "## Kafka 4.0 readiness",
    ):
        assert heading in report
    assert set(plan["charts"]) == {
        "charts/clients_over_time.png",
        "charts/api_versions.png",
        "charts/gated_requests_over_time.png",
        "charts/release_4.0.png",
    }
    for chart in plan["charts"]:
        assert (out / chart).read_bytes().startswith(PNG_MAGIC)
        assert f"]({chart})" in report


@pytest.mark.slow
def test_a_parquet_dataset_plans_as_the_text_one(operator_plan, tmp_path) -> None:
    """collect's Parquet (synth writes through its sink) against the text of the same fleet."""
    parquet = tmp_path / "parquet"
    synth.generate(parquet, dataclasses.replace(SPEC, format="parquet"))
    _, text_out = operator_plan
    out = tmp_path / "plan"
    done = featurectl(
        "plan",
        "--metrics",
        str(parquet),
        "--out",
        str(out),
        *TARGETS,
        environ=operator_env(tmp_path / "spark"),
    )
    assert done.returncode == 1, done.stderr[-3000:]
    plans = [json.loads((d / "plan.json").read_text()) for d in (text_out, out)]
    assert plans[0]["verdicts"] and plans[0]["clients"]
    assert comparable(plans[1]) == comparable(plans[0])


@pytest.mark.slow
def test_without_state_or_targets_it_plans_what_the_gauges_allow(dataset, tmp_path) -> None:
    metrics = tmp_path / "metrics"
    shutil.copytree(dataset, metrics)
    shutil.rmtree(metrics / STATE)
    out = tmp_path / "plan"
    done = featurectl("plan", "--metrics", str(metrics), "--master", "local[1]", "--out", str(out))
    # Every default target is a level all gateways support: safe, exit 0.
    assert done.returncode == 0, done.stderr[-3000:]
    assert "kraft.version: 0 -> 1 (upgrade): safe now" in done.stdout
    plan = json.loads((out / "plan.json").read_text())
    assert plan["state"]["source"] == "metrics"
    assert plan["state"]["finalized"] == {"group.version": 1, "transaction.version": 1}
    targets = {(v["feature"], v["level"]) for v in plan["verdicts"]}
    # share.version and transaction.version 2 are held back by the old gateway.
    assert targets == {
        ("eligible.leader.replicas.version", 1),
        ("kraft.version", 1),
        ("streams.version", 1),
    }
    assert "ZK_HOST:2181" in plan["steps"][0]["command"]


def spark_noise(stderr: str) -> list[str]:
    """The lines of ``stderr`` that are not the JVM's own notices."""
    return [line for line in stderr.splitlines() if line not in JVM_NOTICES]


@pytest.mark.slow
def test_a_local_plan_is_quiet_and_keeps_the_driver_on_loopback(
    operator_plan, dataset, tmp_path
) -> None:
    """The operator's run logs nothing of Spark's; with --verbose, the same plan with
    Spark's own logging and the driver's address (on loopback by featurectl's doing)."""
    quiet, quiet_out = operator_plan
    assert quiet.returncode == 1, quiet.stderr[-3000:]
    assert "transaction.version: 1 -> 2 (upgrade): NOT safe yet" in quiet.stdout
    for noise in ("loopback address", "native-hadoop", "Setting default log level", "log4j"):
        assert noise not in quiet.stderr
    assert not LOG4J_LINE.search(quiet.stderr)
    # Nothing else either (a progress bar, a WARN of another layout): the JVM's notice only.
    assert spark_noise(quiet.stderr) == []

    environ = operator_env(tmp_path / "spark")
    assert not [k for k in environ if k.startswith("SPARK_LOCAL")]
    out = tmp_path / "verbose"
    args = ["plan", "--metrics", str(dataset), "--out", str(out)]
    loud = featurectl(*args, *TARGETS, "--verbose", environ=environ)
    assert loud.returncode == 1, loud.stderr[-3000:]
    # Spark's own logging is back: its profile's banner, and its shell-level notice.
    assert "Using Spark's default log4j profile" in loud.stderr
    assert 'Setting default log level to "WARN"' in loud.stderr
    # The address Spark really configured its driver with, from its own conf.
    assert re.search(
        r"^featurectl: Spark \S+ on local\[\*\], driver 127\.0\.0\.1:\d+ "
        r"\(bound to 127\.0\.0\.1\)$",
        loud.stderr,
        re.M,
    ), loud.stderr
    assert "loopback address" not in loud.stderr
    plans = [json.loads((d / "plan.json").read_text()) for d in (quiet_out, out)]
    assert plans[0]["verdicts"] != []
    assert comparable(plans[1]) == comparable(plans[0])


@pytest.mark.slow
def test_a_failing_job_still_says_why_without_verbose(tmp_path) -> None:
    """Quiet is errors only, not silence: a dataset Spark cannot read fails the run, and
    stderr names the file and what is wrong with it."""
    metrics = tmp_path / "metrics"
    day = metrics / SAMPLES / "date=2025-01-06"
    day.mkdir(parents=True)
    (day / f"part-00000{PARQUET_SUFFIX}").write_text("not parquet\n")
    out = tmp_path / "plan"
    done = featurectl(
        "plan",
        "--metrics",
        str(metrics),
        "--master",
        "local[1]",
        "--out",
        str(out),
        environ=app_env(tmp_path / "spark"),
    )
    assert done.returncode != 0
    assert not (out / "plan.json").exists()
    assert f"part-00000{PARQUET_SUFFIX} is not a Parquet file" in done.stderr
    # Spark's ERROR lines stay (the task that failed, the job it aborted); no WARN does.
    levels = {m[1] for m in LOG4J_LINE.finditer(done.stderr)}
    assert levels == {"ERROR"}, levels


def test_the_driver_stays_where_the_operator_put_it(monkeypatch) -> None:
    """Loopback only when neither SPARK_LOCAL_IP nor the driver's address is given."""
    from featurectl.plan import session

    monkeypatch.delenv("SPARK_LOCAL_IP", raising=False)
    assert session.loopback_driver({}, {})
    assert session.loopback_driver({"spark.driver.memory": "4g"}, {})
    assert not session.loopback_driver({"spark.driver.host": "10.0.0.5"}, {})
    assert not session.loopback_driver({}, {"spark.driver.bindAddress": "0.0.0.0"})
    monkeypatch.setenv("SPARK_LOCAL_IP", "10.0.0.5")
    assert not session.loopback_driver({}, {})


def test_quiet_logging_adds_to_the_drivers_java_options() -> None:
    from featurectl.plan import session

    options = session.quiet_java_options(session.JIT_OPTIONS)
    assert options.startswith(f"{session.JIT_OPTIONS} -Dlog4j2.configurationFile=file:///")
    profile = Path(options.rsplit("=file://", 1)[1])
    assert (
        profile.name == session.QUIET_LOG4J2 and "rootLogger.level = error" in profile.read_text()
    )
    assert session.quiet_java_options("") == options.removeprefix(f"{session.JIT_OPTIONS} ")
    # An operator's own log4j configuration is theirs to keep.
    own = "-Xss4m -Dlog4j2.configurationFile=/etc/spark/log4j2.properties"
    assert session.quiet_java_options(own) == own


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--metrics", "/nonexistent/metrics"], "is not a directory"),
        (["--target", "no.such.feature=1"], "unknown feature 'no.such.feature'"),
        (["--target", "group.version=7"], "highest level of group.version is 1"),
        (["--target", "group.version"], "expected NAME=LEVEL"),
    ],
)
def test_usage_errors_exit_2_before_spark_starts(dataset, tmp_path, args, message) -> None:
    base = ["plan", "--out", str(tmp_path)]
    if "--metrics" not in args:
        base += ["--metrics", str(dataset)]
    done = featurectl(*base, *args)
    assert done.returncode == 2
    assert message in done.stderr


def test_a_directory_without_scrapes_is_not_a_dataset(tmp_path) -> None:
    (tmp_path / "metrics" / "scrapes").mkdir(parents=True)
    done = featurectl("plan", "--metrics", str(tmp_path / "metrics"), "--master", "local[1]")
    assert done.returncode == 2
    assert "holds no samples" in done.stderr and "featurectl collect" in done.stderr


@pytest.mark.slow
def test_the_job_runs_under_spark_submit(dataset, tmp_path) -> None:
    spark_submit = Path(sys.executable).with_name("spark-submit")
    if not spark_submit.exists():
        pytest.skip("spark-submit is not installed next to this Python")
    out = tmp_path / "plan"
    done = subprocess.run(
        [
            str(spark_submit),
            "--master",
            "local[1]",
            str(REPO / "featurectl" / "plan" / "job.py"),
            "--metrics",
            str(dataset),
            "--out",
            str(out),
            "--target",
            "kraft.version=1",
        ],
        capture_output=True,
        text=True,
        env=env(),
        timeout=RUN_TIMEOUT_S,
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    plan = json.loads((out / "plan.json").read_text())
    assert [(v["feature"], v["kind"], v["safe"]) for v in plan["verdicts"]] == [
        ("kraft.version", "upgrade", True)
    ]


def test_jvm_options_yield_to_the_clusters_spark_defaults(tmp_path, monkeypatch) -> None:
    from featurectl.plan import session

    monkeypatch.setenv("SPARK_CONF_DIR", str(tmp_path))
    assert session.spark_defaults() == {}
    (tmp_path / "spark-defaults.conf").write_text(
        "\n".join(
            (
                "# site settings",
                "spark.executor.extraJavaOptions  -XX:+UseG1GC",
                "spark.driver.memory=4g",
                "spark.eventLog.enabled: true",
                "spark.driver.host = 10.0.0.5",
                "",
            )
        )
    )
    assert session.spark_defaults() == {
        "spark.executor.extraJavaOptions": "-XX:+UseG1GC",
        "spark.driver.memory": "4g",
        "spark.eventLog.enabled": "true",
        "spark.driver.host": "10.0.0.5",
    }
