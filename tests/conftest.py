"""Fixtures that start REAL parts: ZooKeeper, Apache Kafka or Tansu, and the gateway.

Scopes follow one rule: share what no test changes, isolate what a test may break.

* ``broker`` is session-scoped: topics are per test (``unique_topic``) so sharing is
  safe and saves a start per test. It advertises an unresolvable host, so a client
  works only if the gateway rewrote every broker address. Which broker it is, is the
  suite's parameter ``KAFKA_GATEWAY_TEST_BROKER``:

  - unset or ``kafka``: Apache Kafka 4.x (newest that resolves), KRaft combined mode;
  - ``kafka-3.9`` (or any ``kafka-X.Y.Z``): that Apache Kafka; before 4.0 in ZooKeeper
    mode, against the session's ZooKeeper;
  - ``tansu``: Tansu, the Rust re-implementation;
  - ``host:port``: a broker the user runs; tests that must stop it skip.

* ``tansu_broker`` is the session's Tansu, for the tests about Tansu's own deviations
  (it answers acks=0 produces, lacks ConsumerGroupHeartbeat, ...); they keep Tansu
  whatever the parameter says.
* ``isolated_broker``/``broker_factory`` give a test its own Tansu it may stop/start.
* ``zookeeper`` is function-scoped (outage tests kill it; feature tests write znodes);
  ``shared_zookeeper`` is the session-wide one for tests that only need *a* server.
* ``gateway``/``gateway_factory`` are function-scoped: each test gets its own log file
  to grep, and teardown checks the gateway exits 0 on SIGTERM.
"""

from __future__ import annotations

import enum
import os
import re
import uuid
from collections.abc import Generator, Iterator
from pathlib import Path
from typing import Literal

import pytest

from gateway.server.apache_kafka import is_zookeeper_mode
from tests.harness import (
    UNREACHABLE_HOST,
    Broker,
    ExternalBroker,
    GatewayProcess,
    ManagedProcess,
    TansuBroker,
    ZooKeeperProcess,
)
from tests.harness.apache_kafka import KRAFT_VERSION, ApacheKafkaBroker
from tests.harness.prometheus import PrometheusProcess
from tests.harness.tools import MISSING_TOOL, OPTIONAL_TOOLS, find_tool, missing_tool_reason

EXTERNAL_BROKER_ENV = "KAFKA_GATEWAY_TEST_BROKER"


def test_broker_choice() -> str:
    """KAFKA_GATEWAY_TEST_BROKER as given: "kafka" (the default), "kafka-X.Y.Z", "tansu"
    or a user's "host:port"."""
    return os.environ.get(EXTERNAL_BROKER_ENV, "").strip() or "kafka"


def apache_kafka_version() -> str | None:
    """The Apache Kafka version the session broker runs, or None (Tansu or external)."""
    choice = test_broker_choice()
    if choice == "kafka":
        return KRAFT_VERSION
    if choice.startswith("kafka-"):
        version = choice.removeprefix("kafka-")
        # "kafka-3.9" means the newest 3.9 this project knows.
        return {"3.9": "3.9.2", "4": KRAFT_VERSION}.get(version, version)
    return None


def external_broker_address() -> str | None:
    """The user's broker from KAFKA_GATEWAY_TEST_BROKER (``host:port``), or None."""
    choice = test_broker_choice()
    if choice == "tansu" or choice == "kafka" or choice.startswith("kafka-"):
        return None
    return choice


def skip_if_external_broker(reason: str) -> None:
    """Skip the current test when the suite runs against an external broker."""
    address = external_broker_address()
    if address is not None:
        pytest.skip(f"{reason}; {EXTERNAL_BROKER_ENV}={address} is not ours to control")


def pytest_configure(config: pytest.Config) -> None:
    # kafka-python 3 loads its schemas with importlib.resources' legacy API and warns
    # once per schema (~200 lines per run); that is noise about a dependency.
    for message in ("read_text is deprecated", "open_text is deprecated"):
        config.addinivalue_line("filterwarnings", f"ignore:{message}:DeprecationWarning")


def pytest_report_header(config: pytest.Config) -> list[str]:
    address = external_broker_address()
    if address:
        return [f"broker: external {address} ({EXTERNAL_BROKER_ENV})"]
    version = apache_kafka_version()
    if version is not None:
        mode = "ZooKeeper mode" if is_zookeeper_mode(version) else "KRaft"
        return [f"broker: Apache Kafka {version} ({mode}) advertising {UNREACHABLE_HOST}"]
    return [f"broker: Tansu (memory storage) advertising {UNREACHABLE_HOST}"]


# --------------------------------------------------------------------------------------
# Optional tools: one way to skip without them, one line at the end saying what was missing
# --------------------------------------------------------------------------------------


def require_tool(name: str, detail: str = "") -> str:
    """The path of optional tool ``name`` (tests/harness/tools.py); skip the test without it."""
    found = find_tool(name)
    if found is None:
        pytest.skip(missing_tool_reason(name, detail))
    return found


def _skips_per_missing_tool(reporter: pytest.TerminalReporter) -> dict[str, int]:
    counts: dict[str, int] = {}
    for report in reporter.stats.get("skipped", []):
        # A skip's longrepr is (path, line, "Skipped: <reason>").
        if isinstance(report.longrepr, tuple):
            reason = report.longrepr[2].removeprefix("Skipped: ")
            if reason.startswith(MISSING_TOOL):
                tool = reason.removeprefix(MISSING_TOOL).split()[0]
                counts[tool] = counts.get(tool, 0) + 1
    return counts


def optional_tools_line(reporter: pytest.TerminalReporter) -> str:
    """'optional tools: all present', or which are missing and how many tests they skipped."""
    skipped = _skips_per_missing_tool(reporter)
    missing = sorted({n for n in OPTIONAL_TOOLS if find_tool(n) is None} | set(skipped))
    if not missing:
        return f"optional tools: all present ({', '.join(OPTIONAL_TOOLS)})"
    total = sum(skipped.values())
    per_tool = ", ".join(f"{n} {skipped.get(n, 0)}" for n in missing)
    tests = "test" if total == 1 else "tests"
    return (
        f"optional tools: missing {', '.join(missing)}; "
        f"{total} {tests} skipped because of them ({per_tool})"
    )


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_sessionfinish(session: pytest.Session) -> Generator[None, None, None]:
    # Outermost wrapper: runs after the terminal reporter's summary, so this is the last line.
    result = yield
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    if reporter is not None:
        reporter.write_line(optional_tools_line(reporter))
    return result


# --------------------------------------------------------------------------------------
# Attach the logs of the parts a failed test used to its report
# --------------------------------------------------------------------------------------


def _parts_of(item: pytest.Item) -> list[ManagedProcess]:
    parts: list[ManagedProcess] = []
    for value in getattr(item, "funcargs", {}).values():
        if isinstance(value, ManagedProcess):
            parts.append(value)
        parts.extend(p for p in getattr(value, "processes", ()) if isinstance(p, ManagedProcess))
    return list(dict.fromkeys(parts))


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    """On failure, add the tail of every part's log as a report section.

    Most failures here are "the client timed out"; the reason is usually in the
    gateway's or broker's log, so put it next to the traceback.
    """
    report = yield
    if report.failed and call.when in ("setup", "call"):
        for part in _parts_of(item):
            report.sections.append((f"log tail: {part.name} ({part.log_path})", part.log_tail()))
    return report


# --------------------------------------------------------------------------------------
# Names
# --------------------------------------------------------------------------------------


@pytest.fixture
def unique_topic(request: pytest.FixtureRequest) -> str:
    """A topic name no other test (or earlier run against the same broker) uses."""
    base = re.sub(r"[^a-zA-Z0-9._-]+", "-", request.node.name).strip("-.")[:60]
    return f"t-{base}-{uuid.uuid4().hex[:8]}"


# --------------------------------------------------------------------------------------
# ZooKeeper
# --------------------------------------------------------------------------------------


@pytest.fixture
def zookeeper(tmp_path: Path) -> Iterator[ZooKeeperProcess]:
    """A ZooKeeper of this test's own (may be stopped/started; same port and data)."""
    zk = ZooKeeperProcess(tmp_path / "zookeeper")
    zk.start()
    try:
        yield zk
    finally:
        zk.stop()


@pytest.fixture(scope="session")
def shared_zookeeper(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ZooKeeperProcess]:
    """One ZooKeeper for the session; tests must not stop it and should use own paths."""
    zk = ZooKeeperProcess(tmp_path_factory.mktemp("zookeeper"))
    zk.start()
    try:
        yield zk
    finally:
        zk.stop()


# --------------------------------------------------------------------------------------
# Brokers
# --------------------------------------------------------------------------------------


@pytest.fixture(scope="session")
def broker(request: pytest.FixtureRequest) -> Broker:
    """The session's broker (KAFKA_GATEWAY_TEST_BROKER), advertising an unresolvable host."""
    address = external_broker_address()
    if address is not None:
        external = ExternalBroker(address)
        external.check_reachable()
        return external
    if apache_kafka_version() is None:
        return request.getfixturevalue("tansu_broker")
    return request.getfixturevalue("apache_kafka")


@pytest.fixture(scope="session")
def apache_kafka(request: pytest.FixtureRequest) -> Iterator[ApacheKafkaBroker]:
    """Apache Kafka for the session: the parameter's version, else 4.x (KRaft).

    One broker per test run: a JVM start costs seconds on a 2-core box. Tests that need
    Apache Kafka whatever the parameter says (features merged from a KRaft broker, the
    real kafka-features.sh) ask for this fixture by name.
    """
    version = apache_kafka_version() or KRAFT_VERSION
    tmp = request.getfixturevalue("tmp_path_factory").mktemp("apache-kafka")
    zookeeper = None
    if is_zookeeper_mode(version):
        zookeeper = request.getfixturevalue("shared_zookeeper").connect_string
    kafka = ApacheKafkaBroker(tmp, version=version, zookeeper=zookeeper)
    kafka.start()
    try:
        yield kafka
    finally:
        kafka.stop()


@pytest.fixture(scope="session")
def tansu_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TansuBroker]:
    """The session's Tansu, for tests about Tansu's own behaviour (whatever the parameter)."""
    tansu = TansuBroker(tmp_path_factory.mktemp("tansu"), advertised_host=UNREACHABLE_HOST)
    tansu.start()
    try:
        yield tansu
    finally:
        tansu.stop()


class BrokerFactory:
    """Implementation of ``broker_factory``; see that fixture."""

    def __init__(self, workdir: Path) -> None:
        self._workdir = workdir
        self.processes: list[TansuBroker] = []

    def __call__(
        self,
        *,
        advertised_host: str = UNREACHABLE_HOST,
        port: int | None = None,
        name: str | None = None,
        start: bool = True,
        cluster_id: str = "tansu_cluster",
    ) -> TansuBroker:
        skip_if_external_broker("this test starts and controls its own Tansu broker")
        part = TansuBroker(
            self._workdir,
            port=port,
            advertised_host=advertised_host,
            cluster_id=cluster_id,
            name=name or f"tansu-{len(self.processes) + 1}",
        )
        self.processes.append(part)
        if start:
            part.start()
        return part

    def close(self) -> None:
        for part in reversed(self.processes):
            part.stop()


@pytest.fixture
def broker_factory(tmp_path: Path) -> Iterator[BrokerFactory]:
    """Start Tansu brokers for this test: ``broker_factory(advertised_host=..., port=...)``.

    All are stopped at teardown. Skips under KAFKA_GATEWAY_TEST_BROKER: a test that asks
    for its own Tansu relies on controlling it (or on Tansu's behaviour).
    """
    factory = BrokerFactory(tmp_path)
    try:
        yield factory
    finally:
        factory.close()


@pytest.fixture
def isolated_broker(broker_factory: BrokerFactory) -> TansuBroker:
    """A Tansu of this test's own, which it may stop()/start() (data is lost on restart)."""
    return broker_factory(name="tansu")


@pytest.fixture
def tansu_only() -> None:
    """Use (``@pytest.mark.usefixtures("tansu_only")``) for tests that rely on Tansu quirks."""
    skip_if_external_broker("this test relies on Tansu-specific behaviour")


# --------------------------------------------------------------------------------------
# Gateways
# --------------------------------------------------------------------------------------


class _Default(enum.Enum):
    """Sentinel type: "use the session broker" (None already means "no upstream")."""

    BROKER = "broker"


_BROKER = _Default.BROKER


class GatewayFactory:
    """Implementation of ``gateway_factory``; see that fixture."""

    def __init__(self, request: pytest.FixtureRequest, workdir: Path) -> None:
        self._request = request
        self._workdir = workdir
        self.processes: list[GatewayProcess] = []
        self._unchecked: set[int] = set()

    def __call__(
        self,
        *extra_args: str,
        upstream: str | Literal[_Default.BROKER] | None = _BROKER,
        advertised_host: str | None = "127.0.0.1",
        metrics: bool = False,
        port: int | None = None,
        env: dict[str, str] | None = None,
        name: str | None = None,
        start: bool = True,
        check_exit: bool = True,
    ) -> GatewayProcess:
        if upstream is _BROKER:
            upstream = self._request.getfixturevalue("broker").bootstrap
        part = GatewayProcess(
            self._workdir,
            upstream,
            extra_args=extra_args,
            port=port,
            advertised_host=advertised_host,
            metrics=metrics,
            env=env,
            name=name or ("gateway" if not self.processes else f"gateway-{len(self.processes)}"),
        )
        self.processes.append(part)
        if not check_exit:
            self._unchecked.add(id(part))
        if start:
            part.start()
        return part

    def close(self) -> list[str]:
        """Stop every gateway; return complaints about unclean exits."""
        problems: list[str] = []
        for part in reversed(self.processes):
            was_running = part.running
            code = part.stop()
            if was_running and code != 0 and id(part) not in self._unchecked:
                problems.append(
                    f"{part.name} exited with {code} on SIGTERM (expected 0)\n{part.log_tail()}"
                )
        return problems


@pytest.fixture
def gateway_factory(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[GatewayFactory]:
    """Start gateways: ``gateway_factory(*extra_args, upstream=..., metrics=..., ...)``.

    ``upstream`` defaults to the session ``broker``; pass None for the gateway's own
    embedded stack. Logs go to ``<tmp_path>/<name>.log`` (``.log_path``). At teardown
    every gateway gets SIGTERM, and one still running that does not exit 0 fails the
    test (pass ``check_exit=False`` for gateways a test drives into odd states).
    """
    factory = GatewayFactory(request, tmp_path)
    try:
        yield factory
    finally:
        problems = factory.close()
    if problems:
        pytest.fail("\n\n".join(problems), pytrace=False)


@pytest.fixture
def gateway(gateway_factory: GatewayFactory, broker: Broker) -> GatewayProcess:
    """A sidecar gateway in front of ``broker``, advertising 127.0.0.1 (default args)."""
    return gateway_factory(upstream=broker.bootstrap)


# --------------------------------------------------------------------------------------
# Prometheus
# --------------------------------------------------------------------------------------


@pytest.fixture
def prometheus(tmp_path: Path) -> Iterator[PrometheusProcess]:
    """A real Prometheus (Debian's package) of this test's own, scraping every second.

    It starts with no targets: ``prometheus.set_targets([gw.metrics_address, ...])``.
    Rule files: build your own ``PrometheusProcess(tmp_path, rule_files=[...])``.
    """
    require_tool("prometheus")
    server = PrometheusProcess(tmp_path / "prometheus")
    server.start()
    try:
        yield server
    finally:
        server.stop()
