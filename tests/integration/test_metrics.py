"""Metric names and labels pinned against a live gateway's /metrics, plus the other
operator endpoints (/healthz, /readyz, /connections) and the request log.

A real librdkafka client produces and consumes through a gateway that enforces
feature levels from a real ZooKeeper; the test then reads what an operator would.
"""

from __future__ import annotations

import json
import urllib.request
from pathlib import Path

import confluent_kafka
import pytest
from prometheus_client.parser import text_string_to_metric_families

from gateway.protocol import protocol_data
from tests.conftest import GatewayFactory
from tests.harness import ZooKeeperProcess
from tests.integration.test_clients import ConfluentDriver

TRAFFIC = [
    "listener",
    "api_key",
    "api",
    "api_version",
    "client_software_name",
    "client_software_version",
]
# name -> (type, label names); the contract dashboards, alerts and the planner rely on.
PINNED: dict[str, tuple[str, list[str]]] = {
    "kafka_gateway_requests": ("counter", TRAFFIC),
    "kafka_gateway_responses": ("counter", TRAFFIC),
    # Derived from kafka_gateway_requests when upgrade_target_release is set (empty else).
    "kafka_gateway_requests_below_target_release": (
        "counter",
        ["release", "api_key", "api", "api_version", *TRAFFIC[-2:]],
    ),
    "kafka_gateway_request_latency_seconds": ("histogram", ["api"]),
    "kafka_gateway_client_received_bytes": ("counter", ["listener"]),
    "kafka_gateway_client_sent_bytes": ("counter", ["listener"]),
    "kafka_gateway_connections_active": (
        "gauge",
        ["listener", "client_software_name", "client_software_version"],
    ),
    "kafka_gateway_connections": ("counter", ["listener"]),
    "kafka_gateway_rejected_requests": (
        "counter",
        ["listener", "reason", "api_key", "api", "api_version", *TRAFFIC[-2:]],
    ),
    "kafka_gateway_upstream_connect_errors": ("counter", ["upstream"]),
    "kafka_gateway_dropped_responses": ("counter", []),
    "kafka_gateway_rewrite_errors": ("counter", ["api"]),
    "kafka_gateway_node_endpoints_dropped": ("counter", ["api"]),
    "kafka_gateway_client_aborts": ("counter", []),
    "kafka_gateway_sni_refused": ("counter", ["reason"]),
    "kafka_gateway_unknown_api_keys": ("counter", ["action"]),
    # the versions of the APIs it decodes that its codec handles (server/negotiation.py)
    "kafka_gateway_api_version_limit": ("gauge", ["api_key", "api"]),
    "kafka_gateway_feature_finalized_level": ("gauge", ["feature"]),
    "kafka_gateway_feature_finalized_epoch": ("gauge", []),
    "kafka_gateway_feature_supported_min_level": ("gauge", ["feature"]),
    "kafka_gateway_feature_supported_max_level": ("gauge", ["feature"]),
    # what the upstream broker finalized, beside what the gateways hold (broker_levels.py)
    "kafka_gateway_feature_broker_finalized_level": ("gauge", ["feature", "upstream"]),
    # connections drained after a level change withdrew a version (server/withdrawn.py)
    "kafka_gateway_connections_renegotiated": ("counter", ["reason"]),
    "kafka_gateway_zookeeper_connected": ("gauge", []),
    "kafka_gateway_zookeeper_staleness_seconds": ("gauge", []),
    "kafka_gateway_healthy": ("gauge", []),
    "kafka_gateway_event_loop_lag_seconds": ("histogram", []),
    "kafka_gateway_event_loop_lag_busy_seconds": ("histogram", []),
    # connection limits (gateway/server/limits.py)
    "kafka_gateway_connections_refused": ("counter", ["reason"]),
    "kafka_gateway_connections_closed": ("counter", ["reason"]),
    "kafka_gateway_client_reads_paused": ("counter", []),
    "kafka_gateway_connections_throttled": ("counter", []),
    "kafka_gateway_client_software_labels_overflow": ("counter", []),
    "kafka_gateway_queued_bytes": ("gauge", []),
    "kafka_gateway_config_reloads": ("counter", ["result"]),
    "kafka_gateway_info": (
        "gauge",
        [
            "gateway_id",
            "gateway_version",
            "broker_software_name",
            "broker_software_version",
            "upstream",
            "protocol_kafka",
        ],
    ),
    "kafka_gateway_worker_restarts": ("counter", []),
    # the version bridge (gateway/bridge/)
    "kafka_gateway_bridged_requests": ("counter", ["api", "from_version", "to_version"]),
    "kafka_gateway_bridged_connections": ("gauge", []),
    "kafka_gateway_bridge_cpu_seconds": ("counter", []),
    "kafka_gateway_bridge_headers_dropped": ("counter", []),
    "kafka_gateway_bridge_capped_answers": ("counter", []),
}


def get(url: str) -> tuple[int, str]:
    with urllib.request.urlopen(url, timeout=5) as response:
        return response.status, response.read().decode()


@pytest.fixture
def traffic(
    gateway_factory: GatewayFactory, zookeeper: ZooKeeperProcess, unique_topic: str, tmp_path: Path
):
    config = tmp_path / "log.toml"
    config.write_text('[log]\nrequests = 1.0\nrequest_level = "info"\n')
    gw = gateway_factory(
        "--zookeeper", zookeeper.connect_string, "--config", str(config), metrics=True
    )
    client = ConfluentDriver()
    client.create_topic(gw.bootstrap, unique_topic)
    client.produce(gw.bootstrap, unique_topic, [b"a", b"b", b"c"], acks="all")
    assert client.consume_assigned(gw.bootstrap, unique_topic, 3) == [b"a", b"b", b"c"]
    return gw


def test_metric_names_types_and_labels_are_pinned(traffic) -> None:
    status, text = get(traffic.metrics_url)
    assert status == 200
    families = {f.name: f for f in text_string_to_metric_families(text)}
    for name, (kind, labels) in PINNED.items():
        assert name in families, f"{name} missing from /metrics"
        family = families[name]
        assert family.type == kind, f"{name}: {family.type} != {kind}"
        for sample in family.samples:
            got = sorted(k for k in sample.labels if k != "le")
            assert got == sorted(labels), f"{sample.name}: labels {got} != {labels}"
    extra = {n for n in families if n.startswith("kafka_gateway_")} - set(PINNED)
    assert not extra, f"unpinned metrics (pin them here): {sorted(extra)}"


def test_traffic_is_counted_by_api_version_and_client_software(traffic) -> None:
    families = {f.name: f for f in text_string_to_metric_families(get(traffic.metrics_url)[1])}
    requests = families["kafka_gateway_requests"].samples
    produce = [s for s in requests if s.labels["api"] == "Produce"]
    assert produce, "no Produce requests counted"
    software = {
        (s.labels["client_software_name"], s.labels["client_software_version"]) for s in produce
    }
    # confluent-kafka-python announces itself (KIP-511), with librdkafka's version inside.
    [(name, version)] = software
    assert name == "confluent-kafka-python"
    assert version.startswith(confluent_kafka.version()[0])
    assert all(s.labels["api_key"] == "0" for s in produce)
    assert sum(s.value for s in produce) >= 1
    # ApiVersions is answered by the gateway and counted as a response too.
    responses = families["kafka_gateway_responses"].samples
    assert any(s.labels["api"] == "ApiVersions" and s.value >= 1 for s in responses)
    fetch_latency = [
        s
        for s in families["kafka_gateway_request_latency_seconds"].samples
        if s.labels.get("api") == "Fetch" and s.name.endswith("_count")
    ]
    assert fetch_latency and fetch_latency[0].value >= 1
    received = families["kafka_gateway_client_received_bytes"].samples
    assert received[0].labels == {"listener": "sidecar"} and received[0].value > 100
    info = families["kafka_gateway_info"].samples[0]
    assert info.labels["gateway_version"] and info.labels["upstream"]
    assert info.labels["protocol_kafka"] == protocol_data()["kafka"]
    assert families["kafka_gateway_zookeeper_connected"].samples[0].value == 1
    assert families["kafka_gateway_healthy"].samples[0].value == 1


def test_health_readiness_connections_and_request_log(traffic) -> None:
    base = traffic.metrics_url.removesuffix("/metrics")
    assert get(base + "/healthz") == (200, "ok\n")
    assert get(base + "/readyz") == (200, "ready\n")
    # The registry lists live connections; the drivers closed theirs, so open one now.
    from tests.harness import KafkaConnection

    with KafkaConnection(traffic.host, traffic.port) as conn:
        conn.api_versions(3)
        status, body = get(base + "/connections")
    assert status == 200
    rows = json.loads(body)
    assert {r["software_name"] for r in rows} >= {"kafka-gateway-tests"}
    assert all({"peer", "listener", "requests", "bytes_in"} <= set(r) for r in rows)
    line = traffic.wait_for_log(r'(?m)^(?=.*"event": "request.completed")(?=.*"api": "Produce").*$')
    entry = json.loads(line.group(0))
    for key in (
        "api",
        "api_version",
        "correlation_id",
        "client_id",
        "client_software_name",
        "client_software_version",
        "peer",
        "latency_ms",
        "request_bytes",
        "response_bytes",
        "outcome",
    ):
        assert key in entry, key
    assert entry["client_software_name"] == "confluent-kafka-python"
