"""A real Prometheus scrapes real gateways: the stored series keep the metrics contract.

The smoke test checks the harness itself. The module-scoped ``scraped`` setup runs two
gateways (``WORKERS`` worker processes each, where the gateway has ``--workers``) on one
ZooKeeper, real librdkafka traffic through both, and a Prometheus that scrapes them with
the real ``deploy/prometheus/alerts.yml`` loaded. The Grafana dashboard's queries run
against the same setup (Grafana's interpolation done by tests/harness/grafana.py).
"""

from __future__ import annotations

import functools
import json
import math
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from gateway.features.store import FeatureStore, make_client
from tests.conftest import GatewayFactory, require_tool
from tests.harness import GatewayProcess, KafkaConnection, ManagedProcess, ZooKeeperProcess
from tests.harness.grafana import interpolate, panels, resolve_variables
from tests.harness.prometheus import PrometheusProcess
from tests.integration.conftest import CHROOT
from tests.integration.test_clients import ConfluentDriver
from tests.integration.test_features import CATALOGUE_A, FEATURE, start_gateway
from tests.integration.test_metrics import PINNED
from tests.unit.project.test_dashboard import DASHBOARD, generator
from tests.unit.project.test_deploy import PROM, alert_rules

# Worker processes per gateway (issue 12's `--workers`). /metrics must be the sum over a
# gateway's workers, so the Prometheus tests run every gateway with several; the flag is
# passed only when this gateway lists it in --help (see worker_args).
WORKERS = 2
# The `kafka_cluster` target label the scrape configs in deploy/ set; the alerts group by it.
KAFKA_CLUSTER = "test"
# Labels Prometheus adds to every scraped series (the target's), not the gateway's own.
TARGET_LABELS = frozenset({"__name__", "instance", "job", "kafka_cluster"})


@functools.cache
def worker_args() -> tuple[str, ...]:
    """``--workers WORKERS`` when this gateway has the flag, else nothing."""
    usage = subprocess.run(
        [sys.executable, "-m", "gateway", "--help"],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout
    return ("--workers", str(WORKERS)) if "--workers" in usage else ()


def exposed_series(gateway: GatewayProcess) -> dict[str, set[frozenset[str]]]:
    """Series name -> the label-name sets of its samples, as the gateway exposes them now."""
    with urllib.request.urlopen(gateway.metrics_url, timeout=5) as response:
        text = response.read().decode()
    exposed: dict[str, set[frozenset[str]]] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            exposed.setdefault(sample.name, set()).add(frozenset(sample.labels))
    return exposed


def test_prometheus_scrapes_gateway_metrics(
    prometheus: PrometheusProcess, gateway_factory: GatewayFactory
) -> None:
    gateway = gateway_factory(*worker_args(), metrics=True)
    prometheus.set_targets([gateway.metrics_address])
    prometheus.wait_targets_up()
    up = prometheus.wait_for(f'up{{instance="{gateway.metrics_address}"}} == 1')
    assert up[0]["metric"]["job"] == "kafka-gateway"
    # A gateway series, not just Prometheus' own `up`: the scrape parsed the exposition.
    series = prometheus.wait_for("kafka_gateway_info")
    assert series[0]["metric"]["instance"] == gateway.metrics_address


# --------------------------------------------------------------------------------------
# Two gateways with live traffic, scraped with the real alert rules loaded
# --------------------------------------------------------------------------------------


@dataclass
class Scraped:
    prometheus: PrometheusProcess
    gateways: list[GatewayProcess]
    topic: str
    traffic_started: float  # Unix time just before the first client request

    @property
    def instances(self) -> set[str]:
        return {gw.metrics_address for gw in self.gateways}

    @property
    def processes(self) -> list[ManagedProcess]:
        """What tests/conftest.py attaches the logs of to a failed test's report."""
        return [self.prometheus, *self.gateways]


@pytest.fixture(scope="module")
def scraped(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Scraped]:
    require_tool("prometheus")
    workdir = tmp_path_factory.mktemp("scraped")
    zookeeper = ZooKeeperProcess(workdir / "zookeeper")
    gateways = GatewayFactory(request, workdir)
    prometheus = PrometheusProcess(
        workdir / "prometheus",
        rule_files=[PROM / "alerts.yml"],
        target_labels={"kafka_cluster": KAFKA_CLUSTER},
    )
    zk_client = None
    probe: KafkaConnection | None = None
    problems: list[str] = []
    try:
        zookeeper.start()
        zk_client = make_client(zookeeper.connect_string)
        zk_client.start(timeout=15)
        # Finalized before the gateways start, so their level and epoch series carry it.
        epoch = FeatureStore(zk_client, CHROOT).write({FEATURE: 1}, -1)
        for name in ("gw-a", "gw-b"):
            start_gateway(gateways, zookeeper, workdir, name, CATALOGUE_A, *worker_args())
        prometheus.start()
        prometheus.set_targets([gw.metrics_address for gw in gateways.processes])
        prometheus.wait_targets_up()

        traffic_started = time.time()
        client = ConfluentDriver()
        topic = f"t-scraped-{int(traffic_started)}"
        client.create_topic(gateways.processes[0].bootstrap, topic)
        for gw in gateways.processes:
            values = [f"{gw.name}-{i}".encode() for i in range(20)]
            client.produce(gw.bootstrap, topic, values, acks="all")
        for gw in gateways.processes:
            assert len(client.consume_assigned(gw.bootstrap, topic, 40)) == 40
        # A connection that stays open, so connection gauges read above zero.
        first = gateways.processes[0]
        probe = KafkaConnection(first.host, first.port)
        probe.api_versions(3)
        for gw in gateways.processes:
            # Two samples of the last series the traffic creates, so that rate() in a
            # panel has what it needs however late the scrapes come on a loaded box.
            prometheus.wait_for(
                "count_over_time(kafka_gateway_requests_total"
                f'{{api="Fetch", instance="{gw.metrics_address}"}}[5m]) >= 2'
            )
            prometheus.wait_for(
                f'kafka_gateway_feature_finalized_epoch{{instance="{gw.metrics_address}"}}'
                f" == {epoch}"
            )
        prometheus.wait_for(
            f'kafka_gateway_connections_active{{instance="{first.metrics_address}"}} > 0'
        )
        yield Scraped(prometheus, list(gateways.processes), topic, traffic_started)
    finally:
        if probe is not None:
            probe.close()
        prometheus.stop()
        problems = gateways.close()
        if zk_client is not None:
            zk_client.stop()
            zk_client.close()
        zookeeper.stop()
    if problems:
        pytest.fail("\n\n".join(problems), pytrace=False)


def contract_series(name: str, kind: str) -> dict[str, str]:
    """Series name -> family name for one entry of the contract, as Prometheus stores it."""
    if kind == "counter":
        return {f"{name}_total": name}
    if kind == "histogram":
        return {f"{name}{suffix}": name for suffix in ("_bucket", "_sum", "_count")}
    return {name: name}


def test_stored_series_carry_the_contracts_names_labels_and_types(scraped: Scraped) -> None:
    prometheus = scraped.prometheus
    by_series: dict[str, str] = {}
    for name, (kind, _) in PINNED.items():
        by_series.update(contract_series(name, kind))

    stored_names = {
        n for n in prometheus.label_values("__name__") if n.startswith("kafka_gateway_")
    }
    assert stored_names - set(by_series) == set(), "stored series outside the contract"

    # Types as Prometheus recorded them from the TYPE lines it scraped.
    metadata = prometheus.metadata()
    for name, (kind, _) in PINNED.items():
        # The text format names a counter's family with its _total suffix.
        entries = metadata.get(name) or metadata.get(f"{name}_total")
        assert entries, f"{name}: no metadata stored"
        assert {e["type"] for e in entries} == {kind}, f"{name}: {entries}"

    for series_name in sorted(stored_names):
        family = by_series[series_name]
        own_labels = set(PINNED[family][1]) | ({"le"} if series_name.endswith("_bucket") else set())
        label_sets = prometheus.series(series_name)
        for labels in label_sets:
            assert set(labels) - TARGET_LABELS == own_labels, f"{series_name}: {labels}"
            assert labels["job"] == "kafka-gateway" and labels["kafka_cluster"] == KAFKA_CLUSTER
        assert {labels["instance"] for labels in label_sets} == scraped.instances, series_name

    # What Prometheus stored is what each gateway exposes (no series lost in the scrape).
    for gw in scraped.gateways:
        exposed = {n for n in exposed_series(gw) if n.startswith("kafka_gateway_")}
        stored = {
            n for n in stored_names if prometheus.series(f'{n}{{instance="{gw.metrics_address}"}}')
        }
        assert stored == exposed, gw.name


def test_the_real_alert_rules_evaluate_cleanly_and_stay_quiet(scraped: Scraped) -> None:
    # The real alerts.yml against real series: every rule evaluates without error, and
    # two healthy gateways on one epoch raise nothing (not even pending).
    rules = scraped.prometheus.rules_evaluated_since(time.time())
    assert {r["name"] for r in rules} == {r["alert"] for r in alert_rules()}
    for rule in rules:
        assert rule["health"] == "ok", rule
        assert rule["state"] == "inactive", rule


# --------------------------------------------------------------------------------------
# The Grafana dashboard's queries
# --------------------------------------------------------------------------------------

# Issue 12's metric: its panel must return data once gateways export it, and exactly
# "No data" until then.
WORKER_RESTARTS: str = generator().WORKER_RESTARTS
# Series that exist only once something was counted: worker restarts, and requests below
# ``upgrade_target_release`` (none without a target, or without a client it refuses).
# Their panels must read "No data" until then, and show data once exported.
ONLY_WHEN_COUNTED = (WORKER_RESTARTS, "kafka_gateway_requests_below_target_release_total")


# The scrape interval the test's Grafana data source is set to (its ``timeInterval``),
# which sizes ``$__rate_interval``. Wider than the real 1 s scrape: on a loaded CI box a
# scrape comes late or times out, and a 4 s rate window can then hold fewer than the two
# samples rate() needs, so a panel would read "No data" although the series exist.
DATASOURCE_SCRAPE_INTERVAL_S = 5.0


def finite_values(result: list[dict[str, object]]) -> list[float]:
    """The non-NaN sample values of an instant or range query result."""
    values: list[float] = []
    for series in result:
        samples = series.get("values") or [series["value"]]
        values += [float(v) for _, v in samples]  # type: ignore[attr-defined]
    return [v for v in values if not math.isnan(v)]


def test_every_dashboard_query_returns_data_after_live_traffic(scraped: Scraped) -> None:
    prometheus = scraped.prometheus
    board = json.loads(DASHBOARD.read_text())
    # The variables' queries list what was scraped; select every option, as "All" does.
    variables = resolve_variables(board, prometheus)
    assert variables == {"kafka_cluster": [KAFKA_CLUSTER], "instance": sorted(scraped.instances)}

    exported = set(prometheus.label_values("__name__"))
    end = time.time()
    start = scraped.traffic_started - 5  # the range a "last N minutes" view covers
    step = prometheus.interval_s

    def concrete(expr: str) -> str:
        return interpolate(
            expr,
            variables,
            step_s=step,
            scrape_interval_s=DATASOURCE_SCRAPE_INTERVAL_S,
            range_s=end - start,
        )

    empty, unexpected = [], []
    results: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for panel in panels(board):
        for target in panel["targets"]:
            expr = concrete(target["expr"])
            if target.get("instant"):
                result = prometheus.query(expr)
            else:
                result = prometheus.query_range(expr, start, end, step)
            results[panel["title"], target["refId"]] = result
            where = (panel["title"], target["refId"], expr)
            optional = [m for m in ONLY_WHEN_COUNTED if m in expr and m not in exported]
            if optional:
                if result:
                    unexpected.append(where)
            elif not finite_values(result):
                empty.append(where)
    assert not empty, f"queries without data: {empty}"
    assert not unexpected, f"not exported, yet returned data: {unexpected}"

    # And the data says what the traffic was.
    def labels(title: str, *names: str) -> set[tuple[str, ...]]:
        return {tuple(r["metric"][n] for n in names) for r in results[title, "A"]}

    apis = {api for api, _ in labels("Requests by API and version", "api", "api_version")}
    assert {"ApiVersions", "Metadata", "Produce", "Fetch", "CreateTopics"} <= apis
    software = labels("Requests by client software (KIP-511)", "client_software_name")
    assert ("confluent-kafka-python",) in software
    connected = {
        r["metric"]["client_software_name"]: float(r["values"][-1][1])
        for r in results["Connections by client software (KIP-511)", "A"]
    }
    assert connected["kafka-gateway-tests"] >= 1  # the probe connection, still open
    brokers = labels("Broker software per gateway (KIP-885)", "instance", "gateway_id")
    assert brokers == {(gw.metrics_address, gw.name) for gw in scraped.gateways}
    levels = {
        (r["metric"]["instance"], r["metric"]["feature"]): float(r["value"][1])
        for r in results["Finalized feature levels per gateway", "A"]
    }
    assert levels == {(instance, FEATURE): 1.0 for instance in scraped.instances}
    (divergence,) = results["Feature epoch divergence", "A"]
    assert divergence["metric"] == {"kafka_cluster": KAFKA_CLUSTER}
    assert float(divergence["values"][-1][1]) == 0

    # The annotation query runs too; nothing fires on this healthy pair.
    for annotation in board["annotations"]["list"]:
        assert prometheus.query(concrete(annotation["expr"])) == []
