"""``featurectl plan`` on a real Spark standalone cluster and through Spark Connect.

A master and two workers (one core each) and a Spark Connect server start from
pyspark's own jars (``tests/harness/spark.py``). The same synthetic dataset is planned
four ways: ``--master local[2]`` (the reference), ``--master spark://...``,
``spark-submit --master spark://... featurectl/plan/job.py`` and ``--remote sc://...``.
Each plan.json must equal the reference but for its timings and time of writing, and
the cluster runs must really have run tasks on both workers' executors.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from featurectl.plan import synth
from tests.harness.featurectl_plan import featurectl_plan, plan_command
from tests.harness.ports import LOOPBACK
from tests.harness.spark import (
    SparkConnectServer,
    SparkMaster,
    SparkWorker,
    app_env,
    pyspark_home,
)
from tests.unit.featurectl.plan.test_plan_cli import SPEC

REPO = Path(__file__).resolve().parents[2]
RUN_TIMEOUT_S = 280
TARGETS = ("--target", "transaction.version=2", "--target", "group.version=0")
# Fields of plan.json that say when and how fast, not what.
UNSTABLE = ("generated_at", "timings_s")
# Executor heap per worker: the planner's data here is a few MB.
EXECUTOR_MEMORY = "512m"

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("spark")


@pytest.fixture(scope="module")
def dataset(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("metrics")
    synth.generate(out, SPEC)
    return out


@pytest.fixture(scope="module")
def cluster(workdir: Path) -> Iterator[tuple[SparkMaster, list[SparkWorker]]]:
    with SparkMaster(workdir) as master:
        workers = [SparkWorker(workdir, master, name=f"spark-worker-{i}") for i in range(2)]
        try:
            for worker in workers:
                worker.start()
            yield master, workers
        finally:
            for worker in workers:
                worker.stop()


@pytest.fixture(scope="module")
def connect_server(workdir: Path) -> Iterator[SparkConnectServer]:
    with SparkConnectServer(workdir) as server:
        yield server


def env(workdir: Path, driver_ip: str | None = None) -> dict[str, str]:
    """No SPARK_LOCAL_IP but ``driver_ip``: a local master's driver must be on loopback
    by featurectl's doing; a cluster's, on an address its executors reach (here they
    run on loopback), which is the operator's to give."""
    clean = app_env(workdir)
    clean.pop("KAFKA_GATEWAY_ZOOKEEPER", None)
    # spark-submit runs job.py as a script: the project must be importable by the driver.
    clean["PYTHONPATH"] = str(REPO)
    if driver_ip is not None:
        clean["SPARK_LOCAL_IP"] = driver_ip
    return clean


def run(
    argv: list[str], workdir: Path, driver_ip: str | None = None
) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(
        argv,
        capture_output=True,
        text=True,
        env=env(workdir, driver_ip),
        timeout=RUN_TIMEOUT_S,
        cwd=REPO,
    )
    # 1: written, and the synthetic fleet's targets are not safe yet.
    assert done.returncode == 1, done.stderr[-4000:]
    return done


def plan_dataset(
    dataset: Path, out: Path, workdir: Path, *args: str, driver_ip: str | None = None
) -> dict[str, Any]:
    # Exits 1: written, and the synthetic fleet's targets are not safe yet.
    return featurectl_plan(
        dataset,
        out,
        *TARGETS,
        *args,
        env=env(workdir, driver_ip),
        timeout_s=RUN_TIMEOUT_S,
        cwd=REPO,
    )


def comparable(plan: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in plan.items() if k not in UNSTABLE}


@pytest.fixture(scope="module")
def local_plan(dataset: Path, workdir: Path) -> dict[str, Any]:
    plan = plan_dataset(dataset, workdir / "plan-local", workdir, "--master", "local[2]")
    # The reference itself must be a real plan, or equal plans prove nothing.
    verdicts = {v["feature"]: v for v in plan["verdicts"]}
    assert verdicts["transaction.version"]["blocking_gateways"] == ["gw-000.example:9092"]
    assert verdicts["group.version"]["blocking_clients"]
    assert plan["api_usage"] and plan["clients"]
    return plan


def app_ids(master: SparkMaster) -> set[str]:
    state = master.state()
    return {a["id"] for a in state.get("activeapps", []) + state.get("completedapps", [])}


def assert_ran_on_both_workers(master: SparkMaster, workers: list[SparkWorker], before: set[str]):
    """One new application, and each worker's executor for it ran tasks."""
    (app,) = app_ids(master) - before
    for worker in workers:
        logs = list((worker.work_dir / app).glob("*/stderr"))
        assert logs, f"{worker.name} started no executor for {app}"
        assert any("Running task" in log.read_text(errors="replace") for log in logs), (
            f"{worker.name}'s executor for {app} ran no task"
        )


def test_plan_on_a_standalone_cluster_equals_the_local_plan(
    cluster: tuple[SparkMaster, list[SparkWorker]],
    dataset: Path,
    workdir: Path,
    local_plan: dict[str, Any],
) -> None:
    master, workers = cluster
    before = app_ids(master)
    plan = plan_dataset(
        dataset,
        workdir / "plan-cluster",
        workdir,
        "--master",
        master.url,
        "--conf",
        f"spark.executor.memory={EXECUTOR_MEMORY}",
        driver_ip=LOOPBACK,
    )
    assert comparable(plan) == comparable(local_plan)
    assert_ran_on_both_workers(master, workers, before)


def test_plan_through_spark_submit_on_the_cluster_equals_the_local_plan(
    cluster: tuple[SparkMaster, list[SparkWorker]],
    dataset: Path,
    workdir: Path,
    local_plan: dict[str, Any],
) -> None:
    master, workers = cluster
    before = app_ids(master)
    out = workdir / "plan-submit"
    done = run(
        [
            str(pyspark_home() / "bin" / "spark-submit"),
            "--master",
            master.url,
            "--deploy-mode",
            "client",
            "--executor-memory",
            EXECUTOR_MEMORY,
            str(REPO / "featurectl" / "plan" / "job.py"),
            "--metrics",
            str(dataset),
            "--out",
            str(out),
            *TARGETS,
        ],
        workdir,
        LOOPBACK,
    )
    assert "transaction.version: 1 -> 2 (upgrade): NOT safe yet" in done.stdout
    plan = json.loads((out / "plan.json").read_text())
    assert comparable(plan) == comparable(local_plan)
    assert_ran_on_both_workers(master, workers, before)


def test_plan_through_spark_connect_equals_the_local_plan(
    connect_server: SparkConnectServer,
    dataset: Path,
    workdir: Path,
    local_plan: dict[str, Any],
) -> None:
    plan = plan_dataset(dataset, workdir / "plan-connect", workdir, "--remote", connect_server.url)
    assert comparable(plan) == comparable(local_plan)


def test_remote_refuses_a_master_and_static_settings(workdir: Path, dataset: Path) -> None:
    for extra, said in (
        (["--master", "local[1]"], "not both"),
        (["--conf", "spark.driver.memory=4g"], "only session settings"),
        ([], "sc://HOST:PORT"),
    ):
        remote = "sc://127.0.0.1:1" if extra else "http://127.0.0.1:1"
        done = subprocess.run(
            plan_command(dataset, "--remote", remote, *extra),
            capture_output=True,
            text=True,
            env=env(workdir),
            timeout=60,
            cwd=REPO,
        )
        assert done.returncode == 2, done.stderr
        assert said in done.stderr
