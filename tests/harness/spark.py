"""A real Spark standalone cluster and a Spark Connect server, from pyspark's own jars.

The pyspark wheel is a complete Spark distribution (``bin/spark-class``,
``bin/spark-submit``, ``jars/``), so the planner's cluster tests need nothing else:

* ``SparkMaster``: ``org.apache.spark.deploy.master.Master`` on a loopback port;
* ``SparkWorker``: ``org.apache.spark.deploy.worker.Worker spark://...`` with a core
  and a small memory budget (it starts the executors of every application);
* ``SparkConnectServer``: ``spark-submit --class ...SparkConnectServer`` (what
  ``sbin/start-connect-server.sh`` runs, minus the daemonizing).

They go through ``bin/spark-class``/``bin/spark-submit`` rather than ``java -cp`` because
the launcher adds the ``--add-opens`` options Spark needs on Java 17. Every part binds
127.0.0.1 (``SPARK_LOCAL_IP``: ``spark_env``), puts its web UI on a free port, and reads
an empty ``SPARK_CONF_DIR`` so a developer's spark-defaults.conf cannot change what a test
runs. ``app_env`` is that environment without the address, for the planner's tests: a
local master's driver must be on loopback by featurectl's own doing (a cluster's driver
is given ``SPARK_LOCAL_IP`` by its test, as an operator gives it a reachable address).
"""

from __future__ import annotations

import json
import os
import sys
import urllib.request
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from .ports import LOOPBACK, free_port, port_accepts
from .procs import ManagedProcess, pyspark_jars_dir

__all__ = [
    "SparkConnectServer",
    "SparkMaster",
    "SparkWorker",
    "app_env",
    "pyspark_home",
    "spark_env",
]

#: Heap of the master and worker daemons (they only schedule; executors have their own).
DAEMON_MEMORY = "256m"


def pyspark_home() -> Path:
    """The installed pyspark package: a Spark home (``bin/``, ``jars/``)."""
    return pyspark_jars_dir().parent


def app_env(workdir: Path) -> dict[str, str]:
    """The environment of a Spark application a test starts (``featurectl plan``,
    ``spark-submit``): the tests' Spark and Python and an empty ``SPARK_CONF_DIR``, but
    no address (nor any other ``SPARK_*`` of the caller's)."""
    conf_dir = Path(workdir) / "spark-conf"
    conf_dir.mkdir(parents=True, exist_ok=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SPARK_", "PYSPARK_"))}
    env.update(
        {
            "SPARK_HOME": str(pyspark_home()),
            "SPARK_CONF_DIR": str(conf_dir),
            # Executors and the Connect server run Python helpers with the tests' Python.
            "PYSPARK_PYTHON": sys.executable,
        }
    )
    return env


def spark_env(workdir: Path, daemon_memory: str = DAEMON_MEMORY) -> dict[str, str]:
    """The environment every Spark daemon of the harness runs with: ``app_env`` on
    127.0.0.1 (also what a cluster's driver needs here, its executors being on loopback).

    ``daemon_memory``: the heap of a master, a worker or a Connect server (spark-submit
    counts the last as a daemon too and gives it this, not --driver-memory).
    """
    env = app_env(workdir)
    env.update(
        {
            "SPARK_LOCAL_IP": LOOPBACK,
            "SPARK_LOCAL_HOSTNAME": LOOPBACK,
            "SPARK_DAEMON_MEMORY": daemon_memory,
        }
    )
    return env


def _get_json(url: str, timeout: float = 2.0) -> Any:
    with urllib.request.urlopen(url, timeout=timeout) as response:
        return json.load(response)


class SparkMaster(ManagedProcess):
    """A standalone master; ``url`` is what ``--master`` takes.

    Ready when its web UI's ``/json`` says ALIVE (it has elected itself leader).
    """

    start_timeout = 60.0

    def __init__(self, workdir: Path, name: str = "spark-master") -> None:
        workdir = Path(workdir)
        super().__init__(name, workdir / f"{name}.log", env=spark_env(workdir))
        self.host = LOOPBACK
        self.port = free_port()
        self.webui_port = free_port()
        self._spark_class = str(pyspark_home() / "bin" / "spark-class")

    @property
    def url(self) -> str:
        return f"spark://{self.host}:{self.port}"

    def command(self) -> list[str]:
        return [
            self._spark_class,
            "org.apache.spark.deploy.master.Master",
            "--host",
            self.host,
            "--port",
            str(self.port),
            "--webui-port",
            str(self.webui_port),
        ]

    def state(self) -> dict[str, Any]:
        """The master's own JSON view: status, workers, applications."""
        return _get_json(f"http://{self.host}:{self.webui_port}/json/")

    def alive_workers(self) -> list[dict[str, Any]]:
        return [w for w in self.state().get("workers", []) if w.get("state") == "ALIVE"]

    def _probe_ready(self) -> bool:
        if not port_accepts(self.host, self.webui_port):
            self._last_probe_error = "web UI not accepting yet"
            return False
        return self.state().get("status") == "ALIVE"


class SparkWorker(ManagedProcess):
    """A standalone worker of ``master`` with ``cores`` and ``memory`` to give executors.

    Ready when the master lists it as ALIVE: only then does it get executors.
    """

    start_timeout = 60.0

    def __init__(
        self,
        workdir: Path,
        master: SparkMaster,
        *,
        cores: int = 1,
        memory: str = "1g",
        name: str = "spark-worker",
    ) -> None:
        workdir = Path(workdir)
        super().__init__(name, workdir / f"{name}.log", env=spark_env(workdir))
        self.master = master
        self.host = LOOPBACK
        self.port = free_port()
        self.webui_port = free_port()
        self.cores = cores
        self.memory = memory
        self.work_dir = workdir / f"{name}-work"
        self._spark_class = str(pyspark_home() / "bin" / "spark-class")

    def _before_start(self) -> None:
        self.work_dir.mkdir(parents=True, exist_ok=True)

    def command(self) -> list[str]:
        return [
            self._spark_class,
            "org.apache.spark.deploy.worker.Worker",
            self.master.url,
            "--host",
            self.host,
            "--port",
            str(self.port),
            "--webui-port",
            str(self.webui_port),
            "--cores",
            str(self.cores),
            "--memory",
            self.memory,
            "--work-dir",
            str(self.work_dir),
        ]

    def _probe_ready(self) -> bool:
        for worker in self.master.alive_workers():
            if (worker.get("host"), worker.get("port")) == (self.host, self.port):
                return True
        self._last_probe_error = f"master lists no ALIVE worker {self.host}:{self.port} yet"
        return False


class SparkConnectServer(ManagedProcess):
    """A Spark Connect server on a free loopback port; ``url`` is ``sc://host:port``.

    It runs its own Spark application on ``master`` (``local[2]`` by default: the
    server's driver does the work) and is ready when its gRPC port accepts.
    """

    start_timeout = 120.0

    def __init__(
        self,
        workdir: Path,
        *,
        master: str = "local[2]",
        memory: str = "1g",
        conf: Mapping[str, str] | None = None,
        name: str = "spark-connect",
    ) -> None:
        workdir = Path(workdir)
        env = spark_env(workdir, daemon_memory=memory)
        super().__init__(name, workdir / f"{name}.log", env=env)
        self.host = LOOPBACK
        self.port = free_port()
        self.spark_master = master
        self.conf = {
            "spark.connect.grpc.binding.address": LOOPBACK,
            "spark.connect.grpc.binding.port": str(self.port),
            "spark.ui.enabled": "false",
            **(conf or {}),
        }
        self._spark_submit = str(pyspark_home() / "bin" / "spark-submit")

    @property
    def url(self) -> str:
        return f"sc://{self.host}:{self.port}"

    def command(self) -> list[str]:
        argv = [
            self._spark_submit,
            "--class",
            "org.apache.spark.sql.connect.service.SparkConnectServer",
            "--name",
            self.name,
            "--master",
            self.spark_master,
        ]
        for key, value in self.conf.items():
            argv += ["--conf", f"{key}={value}"]
        return argv

    def _probe_ready(self) -> bool:
        if port_accepts(self.host, self.port):
            return True
        self._last_probe_error = "gRPC port not accepting yet"
        return False
