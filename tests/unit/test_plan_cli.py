"""``featurectl plan`` end to end on a small synthetic dataset, as an operator runs it.

Each run is a real process with its own local Spark (what ``featurectl plan`` and
``spark-submit`` do), so runs are few, each checks everything about its output, and
they are marked slow (``-m "not slow"`` keeps the quick usage checks).
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from featurectl.plan import synth
from featurectl.plan.layout import STATE

REPO = Path(__file__).resolve().parents[2]
RUN_TIMEOUT_S = 240
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
# Four gateways, one of them in front of an old broker; a restart; clients as in synth.
SPEC = synth.SynthSpec(gateways=4, scrapes=8, old_gateways=1, restart_gateway=1)


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


def featurectl(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "featurectl", *args],
        capture_output=True,
        text=True,
        env=env(),
        timeout=RUN_TIMEOUT_S,
        cwd=REPO,
    )


@pytest.mark.slow
def test_plan_blocks_targets_names_who_and_writes_report_and_charts(dataset, tmp_path) -> None:
    out = tmp_path / "plan"
    done = featurectl(
        "plan",
        "--metrics",
        str(dataset),
        "--master",
        "local[1]",
        "--out",
        str(out),
        "--target",
        "transaction.version=2",
        "--target",
        "group.version=0",
    )
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

    commands = [s["command"] for s in plan["steps"] if s["kind"] == "command"]
    assert commands == [
        "featurectl disable --zookeeper zk-0.example:2181 --feature group.version "
        "--allow-downgrade",
        "featurectl finalize --zookeeper zk-0.example:2181 --feature transaction.version=2",
    ]
    assert all(not s["safe_now"] for s in plan["steps"])

    report = (out / "report.md").read_text()
    for heading in ("## Verdicts", "## Steps", "## Features", "## Clients on gated API versions"):
        assert heading in report
    assert set(plan["charts"]) == {
        "charts/clients_over_time.png",
        "charts/api_versions.png",
        "charts/gated_requests_over_time.png",
    }
    for chart in plan["charts"]:
        assert (out / chart).read_bytes().startswith(PNG_MAGIC)
        assert f"]({chart})" in report


@pytest.mark.slow
def test_a_parquet_dataset_plans_as_the_text_one(dataset, tmp_path) -> None:
    """collect's Parquet (synth writes through its sink) against the text of the same fleet."""
    parquet = tmp_path / "parquet"
    synth.generate(parquet, dataclasses.replace(SPEC, format="parquet"))
    plans = []
    for metrics in (dataset, parquet):
        out = tmp_path / f"plan-{metrics.name}"
        args = ["--metrics", str(metrics), "--master", "local[1]", "--out", str(out)]
        done = featurectl("plan", *args, "--target", "transaction.version=2")
        assert done.returncode == 1, done.stderr[-3000:]
        plan = json.loads((out / "plan.json").read_text())
        for key in ("generated_at", "timings_s"):
            plan.pop(key)
        plan["dataset"].pop("path")
        plans.append(plan)
    assert plans[0]["verdicts"] and plans[0]["clients"]
    assert plans[1] == plans[0]


@pytest.mark.slow
def test_without_state_or_targets_it_plans_what_the_gauges_allow(dataset, tmp_path) -> None:
    metrics = tmp_path / "metrics"
    shutil.copytree(dataset, metrics)
    shutil.rmtree(metrics / STATE)
    out = tmp_path / "plan"
    done = featurectl("plan", "--metrics", str(metrics), "--master", "local[1]", "--out", str(out))
    # Every default target is a level all gateways support: safe, exit 0.
    assert done.returncode == 0, done.stderr[-3000:]
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
    from featurectl.plan import job

    monkeypatch.setenv("SPARK_CONF_DIR", str(tmp_path))
    assert job.spark_defaults_keys() == set()
    (tmp_path / "spark-defaults.conf").write_text(
        "\n".join(
            (
                "# site settings",
                "spark.executor.extraJavaOptions  -XX:+UseG1GC",
                "spark.driver.memory=4g",
                "spark.eventLog.enabled: true",
                "",
            )
        )
    )
    assert job.spark_defaults_keys() == {
        "spark.executor.extraJavaOptions",
        "spark.driver.memory",
        "spark.eventLog.enabled",
    }
