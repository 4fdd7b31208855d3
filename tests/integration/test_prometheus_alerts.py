"""The alert rules of deploy/prometheus/alerts.yml fire for real, in a real Prometheus.

The rules are loaded from a test copy of alerts.yml made by one transformation,
``rules_for_tests``: every ``for:`` divided by ``FOR_SCALE`` (a minute of the real rules
is a second here), everything else (expressions, windows, thresholds, labels,
annotations) as committed. promtool's unit tests (tests/unit/project/test_deploy.py) cover the
full durations with synthetic series; these cover the expressions against the series
real gateways export when the fault is caused.
"""

from __future__ import annotations

import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from gateway.features.store import FeatureStore
from tests.conftest import GatewayFactory, require_tool
from tests.harness import KafkaConnection, TansuBroker, ZooKeeperProcess
from tests.harness.grafana import interpolate, panels, resolve_variables
from tests.harness.prometheus import PrometheusProcess
from tests.integration.test_features import (
    CATALOGUE_A,
    FEATURE,
    UNSUPPORTED_VERSION,
    describe_cluster_v1,
    features_of,
    start_gateway,
    wait_for,
)
from tests.integration.test_prometheus_scrape import KAFKA_CLUSTER, worker_args
from tests.unit.project.test_dashboard import board
from tests.unit.project.test_deploy import PROM, parse_duration_s, promtool

FOR_SCALE = 60
# A second chroot: a gateway configured with it reads other feature levels, as one
# pointed at the wrong chroot (or cut off from ZooKeeper) keeps an old epoch.
OTHER_CHROOT = "/kafka-gateway-elsewhere"
# Gated requests in the burst: KafkaGatewayRejectedRequestsSpike needs more than 1/s
# over its 5 minute window, i.e. more than 300 in it.
BURST = 600


def rules_for_tests(source: Path, dest: Path) -> dict[str, Any]:
    """Write ``source`` to ``dest`` with every rule's ``for`` divided by FOR_SCALE."""
    rules = yaml.safe_load(source.read_text())
    for group in rules["groups"]:
        for rule in group["rules"]:
            if "for" in rule:
                rule["for"] = f"{parse_duration_s(rule['for']) / FOR_SCALE:g}s"
    dest.write_text(yaml.safe_dump(rules, sort_keys=False))
    return rules


def dashboard_query(prometheus: PrometheusProcess, expr: str) -> list[dict[str, Any]]:
    """An instant query of the dashboard, with every option of its variables selected."""
    variables = resolve_variables(board(), prometheus)
    concrete = interpolate(
        expr,
        variables,
        step_s=prometheus.interval_s,
        scrape_interval_s=prometheus.interval_s,
        range_s=60,
    )
    return prometheus.query(concrete)


def dashboard_values(prometheus: PrometheusProcess, title: str) -> list[float]:
    """The current values of the dashboard panel titled ``title`` (its first query)."""
    (panel,) = [p for p in panels(board()) if p["title"] == title]
    result = dashboard_query(prometheus, panel["targets"][0]["expr"])
    return [float(r["value"][1]) for r in result]


def test_the_test_copy_differs_from_alerts_yml_only_in_shorter_for_durations(
    tmp_path: Path,
) -> None:
    original = yaml.safe_load((PROM / "alerts.yml").read_text())
    copy = rules_for_tests(PROM / "alerts.yml", tmp_path / "alerts.yml")
    assert yaml.safe_load((tmp_path / "alerts.yml").read_text()) == copy
    pairs = [
        (a, b)
        for ga, gb in zip(original["groups"], copy["groups"], strict=True)
        for a, b in zip(ga["rules"], gb["rules"], strict=True)
    ]
    assert any("for" in a for a, _ in pairs)
    for a, b in pairs:
        assert {k: v for k, v in a.items() if k != "for"} == {
            k: v for k, v in b.items() if k != "for"
        }
        if "for" in a:
            assert parse_duration_s(b["for"]) * FOR_SCALE == parse_duration_s(a["for"])
    # Still a valid rule file for the Prometheus that loads it.
    check = subprocess.run(
        [promtool(), "check", "rules", str(tmp_path / "alerts.yml")],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert check.returncode == 0, check.stdout + check.stderr


@pytest.fixture
def alerting_prometheus(tmp_path: Path) -> Iterator[PrometheusProcess]:
    """A real Prometheus evaluating alerts.yml's rules with FOR_SCALE-times shorter ``for``."""
    require_tool("prometheus")
    workdir = tmp_path / "prometheus"
    workdir.mkdir()
    rules = workdir / "alerts-for-tests.yml"
    rules_for_tests(PROM / "alerts.yml", rules)
    server = PrometheusProcess(
        workdir, rule_files=[rules], target_labels={"kafka_cluster": KAFKA_CLUSTER}
    )
    server.start()
    try:
        yield server
    finally:
        server.stop()


def test_epoch_divergence_fires_when_gateways_serve_different_epochs_and_resolves(
    alerting_prometheus: PrometheusProcess,
    gateway_factory: GatewayFactory,
    zookeeper: ZooKeeperProcess,
    store: FeatureStore,
    tmp_path: Path,
    tansu_broker: TansuBroker,
) -> None:
    """In front of Tansu whatever the session's broker: this pins the gateways' own epochs,
    and a broker that reports no features of its own (Tansu) keeps them the gateways'
    (Kafka 4.4's KRaft metadata offset, merged in, moves on its own;
    tests/integration/test_upstream_features.py covers that merge)."""
    prometheus = alerting_prometheus
    upstream = tansu_broker.bootstrap
    a = start_gateway(
        gateway_factory, zookeeper, tmp_path, "gw-a", CATALOGUE_A, *worker_args(), upstream=upstream
    )
    b = start_gateway(
        gateway_factory,
        zookeeper,
        tmp_path,
        "gw-b",
        CATALOGUE_A,
        *worker_args(),
        "--zookeeper-chroot",  # the last one given wins: gw-b reads OTHER_CHROOT
        OTHER_CHROOT,
        upstream=upstream,
    )
    prometheus.set_targets([a.metrics_address, b.metrics_address])
    prometheus.wait_targets_up()
    # Both at epoch -1 (nothing finalized anywhere): no divergence.
    prometheus.wait_for("count(kafka_gateway_feature_finalized_epoch == -1) == 2")
    (rule,) = [
        r
        for r in prometheus.rules_evaluated_since(time.time())
        if r["name"] == "KafkaGatewayFeatureEpochDivergence"
    ]
    assert rule["state"] == "inactive" and rule["health"] == "ok"

    epoch = store.write({FEATURE: 1}, -1)  # reaches gw-a only
    wait_for(lambda: features_of(a)[0].epoch == epoch, what="gw-a on the new epoch")
    assert features_of(b)[0].epoch == -1
    alert = prometheus.wait_for_alert(
        "KafkaGatewayFeatureEpochDivergence", kafka_cluster=KAFKA_CLUSTER, severity="warning"
    )
    assert float(alert["value"]) == epoch  # the highest epoch, as the description says
    assert f"(highest is {epoch})" in alert["annotations"]["description"]
    # The dashboard shows it: its divergence panel reads 1 (red from 1 up), and the
    # alert is among its annotations.
    assert dashboard_values(prometheus, "Feature epoch divergence") == [epoch - -1]
    annotation = dashboard_query(prometheus, board()["annotations"]["list"][0]["expr"])
    assert "KafkaGatewayFeatureEpochDivergence" in {a["metric"]["alertname"] for a in annotation}

    # gw-b's chroot gets the same epoch: the gateways agree again and the alert resolves.
    other = FeatureStore(store.client, OTHER_CHROOT)
    assert other.write({FEATURE: 1}, -1) == epoch
    wait_for(lambda: features_of(b)[0].epoch == epoch, what="gw-b on the same epoch")
    prometheus.wait_for(f"count(kafka_gateway_feature_finalized_epoch == {epoch}) == 2")
    wait_for(
        lambda: (
            not [
                r
                for r in prometheus.rules_evaluated_since(time.time())
                if r["name"] == "KafkaGatewayFeatureEpochDivergence" and r["state"] != "inactive"
            ]
        ),
        timeout=30,
        what="the divergence alert to resolve",
    )
    assert dashboard_values(prometheus, "Feature epoch divergence") == [0]


def test_a_burst_of_gated_requests_fires_the_rejected_requests_alert_for_its_reason(
    alerting_prometheus: PrometheusProcess,
    gateway_factory: GatewayFactory,
    zookeeper: ZooKeeperProcess,
    tmp_path: Path,
) -> None:
    prometheus = alerting_prometheus
    gw = start_gateway(gateway_factory, zookeeper, tmp_path, "gw-a", CATALOGUE_A, *worker_args())
    prometheus.set_targets([gw.metrics_address])
    prometheus.wait_targets_up()
    # DescribeCluster v1 is withheld until test.version 1 is finalized: each request is
    # answered UNSUPPORTED_VERSION and counted as gated_by_feature; the connection stays.
    with KafkaConnection(gw.host, gw.port) as conn:
        conn.api_versions(3)
        # The first refusal makes its series (reason, API, version, client); once
        # Prometheus holds it, the rest count in rate() (a series' first sample does not).
        assert describe_cluster_v1(conn) == UNSUPPORTED_VERSION
        prometheus.wait_for('kafka_gateway_rejected_requests_total{reason="gated_by_feature"} == 1')
        for _ in range(BURST - 1):
            assert describe_cluster_v1(conn) == UNSUPPORTED_VERSION
    prometheus.wait_for(
        f'kafka_gateway_rejected_requests_total{{reason="gated_by_feature"}} == {BURST}'
    )
    alert = prometheus.wait_for_alert(
        "KafkaGatewayRejectedRequestsSpike",
        instance=gw.metrics_address,
        reason="gated_by_feature",
        kafka_cluster=KAFKA_CLUSTER,
    )
    assert float(alert["value"]) > 1
    assert "reason gated_by_feature" in alert["annotations"]["description"]
    # Only the reason that was caused: the other reasons' counters stayed at 0.
    spikes = [
        a
        for a in prometheus.firing_alerts()
        if a["labels"]["alertname"] == "KafkaGatewayRejectedRequestsSpike"
    ]
    assert {a["labels"]["reason"] for a in spikes} == {"gated_by_feature"}
