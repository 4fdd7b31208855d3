"""Apache Kafka's own broker, fetched with Maven and started on loopback ports.

The embedded stack (``kafka-gateway --embedded-broker kafka``, ``scripts/run --broker
kafka``) and the test harness start the real broker through this module, so the
properties a one-node Kafka needs are written once:

* **4.x** runs in KRaft combined mode (broker and controller in one JVM); its storage is
  formatted first (``kafka.tools.StorageTool format``), which finalizes the release's
  default feature levels (metadata.version, group.version, transaction.version, ...).
* **3.9** runs in ZooKeeper mode against a ZooKeeper the caller gives, under a chroot.

Every broker has two listeners: ``PLAINTEXT`` for clients, advertised as whatever host the
caller wants (tests advertise an unresolvable one, so a client only works through a
gateway that rewrites every address), and ``INTERNAL`` on 127.0.0.1, which the broker's
own controller uses to reach it (ZooKeeper mode sends LeaderAndIsr there). Internal
topics get one partition and one replica: a one-node broker then serves its first
consumer group or transaction in well under a second instead of creating 50 partitions.

The jars come from Maven Central (``gateway/data/apache-kafka-pom.xml``) into
``<cache_dir>/apache-kafka-<version>`` (the ``cache_dir`` setting: by default
``$XDG_CACHE_HOME/kafka-gateway``, ``~/.cache`` without it), once per version; a file
lock keeps parallel fetches (pytest workers, two shells) from racing.
"""

from __future__ import annotations

import base64
import contextlib
import fcntl
import shutil
import subprocess
import uuid
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path

from ..environment import default_cache_dir

#: The newest Apache Kafka the project's machines resolve, and the last ZooKeeper-mode line.
KRAFT_VERSION = "4.4.0"
ZOOKEEPER_MODE_VERSION = "3.9.2"

#: Small heap, serial GC and the C1 compiler only: a broker on a 2-core box that starts in
#: ~3 s. Benchmarks pass their own (full JIT) options.
LIGHT_JVM_OPTIONS = ("-Xms128m", "-Xmx512m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1")

_STAMP = ".complete"


class KafkaDistError(RuntimeError):
    """Apache Kafka could not be fetched or prepared; the message says what to do."""


def is_zookeeper_mode(version: str) -> bool:
    """Kafka before 4.0 runs here in ZooKeeper mode; 4.0 removed it."""
    return int(version.split(".", 1)[0]) < 4


def cache_root(cache_dir: str | None = None) -> Path:
    """The gateway's cache: ``cache_dir`` (the running gateway's setting), else the
    setting's default, for callers without a Config (the Kafka tools, the harness)."""
    return Path(cache_dir or default_cache_dir())


def jars_dir(version: str, cache_dir: str | None = None) -> Path:
    return cache_root(cache_dir) / f"apache-kafka-{version}"


@contextlib.contextmanager
def file_lock(path: Path) -> Iterator[None]:
    """Hold an exclusive lock on ``path`` (made if missing): one builder of a cache entry
    at a time, across processes (pytest workers, two shells)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def is_fetched(version: str = KRAFT_VERSION, cache_dir: str | None = None) -> bool:
    """Whether ``fetch(version)`` would return at once (the jars are in the cache)."""
    return (jars_dir(version, cache_dir) / _STAMP).exists()


def fetch(version: str = KRAFT_VERSION, cache_dir: str | None = None) -> Path:
    """The folder holding Apache Kafka ``version``'s jars; fetched with Maven on first use."""
    target = jars_dir(version, cache_dir)
    if is_fetched(version, cache_dir):
        return target
    with file_lock(target.with_suffix(".lock")):
        if (target / _STAMP).exists():
            return target
        shutil.rmtree(target, ignore_errors=True)
        pom = resources.files("gateway") / "data" / "apache-kafka-pom.xml"
        with resources.as_file(pom) as pom_path:
            maven(
                f"fetch Apache Kafka {version}",
                "-f", str(pom_path), f"-Dkafka.version={version}",
                "dependency:copy-dependencies", f"-DoutputDirectory={target}",
            )  # fmt: skip
        (target / _STAMP).write_text(version + "\n")
    return target


def maven(what: str, *args: str) -> None:
    """Run ``mvn -q -B args``; KafkaDistError saying what could not be done and why."""
    mvn = shutil.which("mvn")
    if mvn is None:
        raise KafkaDistError(
            f"to {what}, Maven fetches from Maven Central and `mvn` is not on PATH; "
            "install Maven (apt-get install maven) and try again"
        )
    done = subprocess.run([mvn, "-q", "-B", *args], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        tail = (done.stdout + done.stderr).strip().splitlines()[-20:]
        raise KafkaDistError(
            f"Maven could not {what} (exit {done.returncode}); is Maven Central reachable "
            "from here (a proxy in ~/.m2/settings.xml)?\n" + "\n".join(tail)
        )


def classpath(version: str = KRAFT_VERSION, cache_dir: str | None = None) -> str:
    return f"{fetch(version, cache_dir)}/*"


def java() -> str:
    found = shutil.which("java")
    if found is None:
        raise KafkaDistError("java is not on PATH; Apache Kafka needs Java 17+")
    return found


@dataclass
class KafkaNode:
    """One Apache Kafka broker's files and ports (nothing runs until ``command()`` is run).

    ``properties`` overrides or adds broker properties (SASL or TLS listeners, say);
    ``jvm_options`` replaces ``LIGHT_JVM_OPTIONS``.
    """

    workdir: Path
    port: int
    internal_port: int
    controller_port: int = 0  # KRaft only
    version: str = KRAFT_VERSION
    advertised_host: str = "127.0.0.1"
    zookeeper: str | None = None  # ZooKeeper mode: connect string with chroot
    node_id: int = 1
    properties: Mapping[str, str] = field(default_factory=dict)
    jvm_options: tuple[str, ...] = LIGHT_JVM_OPTIONS
    cache_dir: str | None = None  # where the jars are kept; None: cache_root's default

    @property
    def zookeeper_mode(self) -> bool:
        return is_zookeeper_mode(self.version)

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def properties_path(self) -> Path:
        return self.workdir / "server.properties"

    @property
    def data_dir(self) -> Path:
        return self.workdir / "data"

    def broker_properties(self) -> dict[str, str]:
        props = {
            "listeners": f"PLAINTEXT://127.0.0.1:{self.port},INTERNAL://127.0.0.1:{self.internal_port}",
            "advertised.listeners": (
                f"PLAINTEXT://{self.advertised_host}:{self.port},"
                f"INTERNAL://127.0.0.1:{self.internal_port}"
            ),
            "inter.broker.listener.name": "INTERNAL",
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,INTERNAL:PLAINTEXT",
            "log.dirs": str(self.data_dir),
            "num.partitions": "1",
            "offsets.topic.replication.factor": "1",
            "offsets.topic.num.partitions": "1",
            "transaction.state.log.replication.factor": "1",
            "transaction.state.log.min.isr": "1",
            "transaction.state.log.num.partitions": "1",
            "group.initial.rebalance.delay.ms": "0",
        }
        if self.zookeeper_mode:
            if not self.zookeeper:
                raise KafkaDistError(f"Kafka {self.version} runs in ZooKeeper mode: give zookeeper")
            props |= {"broker.id": str(self.node_id), "zookeeper.connect": self.zookeeper}
        else:
            controller = f"127.0.0.1:{self.controller_port}"
            props |= {
                "process.roles": "broker,controller",
                "node.id": str(self.node_id),
                "controller.quorum.voters": f"{self.node_id}@{controller}",
                "controller.listener.names": "CONTROLLER",
                "listeners": props["listeners"] + f",CONTROLLER://{controller}",
                "listener.security.protocol.map": (
                    props["listener.security.protocol.map"] + ",CONTROLLER:PLAINTEXT"
                ),
                "share.coordinator.state.topic.replication.factor": "1",
                "share.coordinator.state.topic.min.isr": "1",
                "share.coordinator.state.topic.num.partitions": "1",
            }
        return props | dict(self.properties)

    def write_properties(self) -> None:
        self.workdir.mkdir(parents=True, exist_ok=True)
        lines = [f"{key}={value}" for key, value in self.broker_properties().items()]
        self.properties_path.write_text("\n".join(lines) + "\n")

    def format_storage(self, cluster_id: str | None = None) -> None:
        """KRaft: format the log directory (once; a formatted one is kept)."""
        if self.zookeeper_mode or (self.data_dir / "meta.properties").exists():
            return
        cluster_id = cluster_id or _kafka_uuid()
        argv = [
            java(), "-Xmx256m", "-XX:TieredStopAtLevel=1",
            "-cp", classpath(self.version, self.cache_dir),
            "kafka.tools.StorageTool", "format", "-t", cluster_id,
            "-c", str(self.properties_path), "--ignore-formatted",
        ]  # fmt: skip
        done = subprocess.run(argv, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            raise KafkaDistError(
                f"formatting Kafka {self.version} storage failed:\n{done.stdout}{done.stderr}"
            )

    def prepare(self) -> None:
        """Fetch the jars, write server.properties and format storage: ready to ``command()``."""
        fetch(self.version, self.cache_dir)
        self.write_properties()
        self.format_storage()

    def command(self) -> list[str]:
        return [
            java(),
            *self.jvm_options,
            "-Djava.awt.headless=true",
            "-Dorg.slf4j.simpleLogger.showDateTime=true",
            # The broker's INFO is a config dump and a line per partition change; warnings
            # and the start/stop lines are what a reader of this log wants.
            "-Dorg.slf4j.simpleLogger.defaultLogLevel=warn",
            "-Dorg.slf4j.simpleLogger.log.kafka.server.KafkaRaftServer=info",
            "-Dorg.slf4j.simpleLogger.log.kafka.server.KafkaServer=info",
            "-Dorg.slf4j.simpleLogger.log.kafka.server.BrokerServer=info",
            "-cp",
            classpath(self.version, self.cache_dir),
            "kafka.Kafka",
            str(self.properties_path),
        ]


def _kafka_uuid() -> str:
    """A cluster id as Kafka makes them: 16 random bytes, URL-safe base64, unpadded, and
    never starting with "-" (StorageTool would read that as an option)."""
    while True:
        text = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        if not text.startswith("-"):
            return text
