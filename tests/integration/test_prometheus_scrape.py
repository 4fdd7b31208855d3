"""A real Prometheus scrapes a real gateway (the harness other Prometheus tests build on)."""

from __future__ import annotations

from tests.conftest import GatewayFactory
from tests.harness.prometheus import PrometheusProcess


def test_prometheus_scrapes_gateway_metrics(
    prometheus: PrometheusProcess, gateway_factory: GatewayFactory
) -> None:
    gateway = gateway_factory(metrics=True)
    prometheus.set_targets([gateway.metrics_address])
    prometheus.wait_targets_up()
    up = prometheus.wait_for(f'up{{instance="{gateway.metrics_address}"}} == 1')
    assert up[0]["metric"]["job"] == "kafka-gateway"
    # A gateway series, not just Prometheus' own `up`: the scrape parsed the exposition.
    series = prometheus.wait_for("kafka_gateway_info")
    assert series[0]["metric"]["instance"] == gateway.metrics_address
