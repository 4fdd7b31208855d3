"""Every refusal attributed, and who connected from where since when (/clients).

Real clients through a real gateway in front of the session's broker (Apache Kafka 4.x
by default):

- kafka-python pinned to api_version (0, 10) produces with Produce v2, which Kafka 4
  removed, and the version bridge's policy refuses it (as an operator who wants the
  client moved says): every attempt is refused and its connection closed, so it reconnects. Its
  refusals must show under api="Produce", api_version="2" and its client-id identity in
  /metrics, and in /clients with its peer address, several connections and the refused
  version; its Metadata traffic under the same identity.
- confluent-kafka (librdkafka) names itself (KIP-511): identified by that name.
- kafka-python pinned to (2, 0) sends no KIP-511 name: its live connections are
  labelled by its client id, not "unknown".

And ``featurectl collect`` writes the /clients records into the dataset, which
``read_clients`` returns.
"""

from __future__ import annotations

import json
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from featurectl import cli
from featurectl.plan.readers import read_clients
from tests.conftest import GatewayFactory
from tests.harness import GatewayProcess
from tests.integration.test_clients import ConfluentDriver

kafka = pytest.importorskip("kafka")

OLD_CLIENT_ID = "legacy-app-7"  # "-7": a per-instance suffix the label drops
OLD_IDENTITY = "client-id:legacy-app"
# confluent-kafka's KIP-511 name (librdkafka's version inside its version).
CONFLUENT = "confluent-kafka-python"


def get_json(gw: GatewayProcess, path: str) -> Any:
    url = gw.metrics_url.replace("/metrics", path)
    with urllib.request.urlopen(url, timeout=10) as response:
        return json.loads(response.read())


def samples(gw: GatewayProcess, family: str) -> list[Any]:
    with urllib.request.urlopen(gw.metrics_url, timeout=10) as response:
        text = response.read().decode()
    for f in text_string_to_metric_families(text):
        if f.name == family:
            return [s for s in f.samples if not s.name.endswith("_created")]
    return []


def wait_until(check: Callable[[], Any], what: str, timeout: float = 20.0) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        result = check()
        if result:
            return result
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.2)


def produce_pinned_0_10(bootstrap: str, topic: str, seconds: float) -> None:
    """kafka-python (0, 10): Produce v2 only; each attempt is refused and retried."""
    producer = kafka.KafkaProducer(
        bootstrap_servers=bootstrap,
        api_version=(0, 10),
        client_id=OLD_CLIENT_ID,
        retries=1000,
        retry_backoff_ms=100,
        reconnect_backoff_ms=50,
        request_timeout_ms=int(seconds * 1000),
        delivery_timeout_ms=int(seconds * 1000),
        linger_ms=0,
        max_block_ms=5000,
    )
    try:
        future = producer.send(topic, b"lost")
        with pytest.raises(Exception):  # noqa: B017 - whatever the library raises
            future.get(timeout=seconds + 10)
    finally:
        producer.close(timeout=5)


def refusing_config(tmp_path: Path) -> str:
    """A config whose version bridge refuses the pinned client (gateway/bridge/policy.py)."""
    path = tmp_path / "refuse-legacy.toml"
    path.write_text(f'[bridge]\npolicy = ["client_id=^{OLD_CLIENT_ID}$ -> refuse"]\n')
    return str(path)


def record_of(records: list[dict[str, Any]], client_id: str) -> dict[str, Any] | None:
    return next((r for r in records if r["client_id"] == client_id), None)


@pytest.mark.parametrize("workers", [1, 2], ids=["one-process", "two-workers"])
def test_refusals_are_attributed_and_clients_are_recorded(
    gateway_factory: GatewayFactory, unique_topic: str, workers: int, tmp_path: Path
) -> None:
    config = refusing_config(tmp_path)
    gw = gateway_factory("--config", config, "--workers", str(workers), metrics=True)
    confluent = ConfluentDriver()
    confluent.create_topic(gw.bootstrap, unique_topic)
    confluent.produce(gw.bootstrap, unique_topic, [b"a"], acks="all")

    produce_pinned_0_10(gw.bootstrap, unique_topic, seconds=4)

    # /metrics: the refusals under the real API, version and client identity.
    def refused_produce() -> list[Any]:
        return [
            s
            for s in samples(gw, "kafka_gateway_rejected_requests")
            if s.labels["api"] == "Produce" and s.value > 0
        ]

    refused = wait_until(refused_produce, "refused Produce requests in /metrics")
    assert {
        (
            s.labels["api_key"],
            s.labels["api_version"],
            s.labels["reason"],
            s.labels["client_software_name"],
            s.labels["client_software_version"],
        )
        for s in refused
    } == {("0", "2", "unsupported_version", OLD_IDENTITY, "unknown")}
    assert sum(s.value for s in refused) >= 2
    assert all(s.labels["listener"] for s in refused)
    # No refusal went to the unattributed series, no traffic to api_key=-1.
    assert not [
        s
        for s in samples(gw, "kafka_gateway_rejected_requests")
        if s.labels["api_key"] == "-1" and s.value > 0
    ]
    requests = samples(gw, "kafka_gateway_requests")
    assert not [s for s in requests if s.labels["api_key"] == "-1"]
    legacy = {
        (s.labels["api"], s.labels["api_version"])
        for s in requests
        if s.labels["client_software_name"] == OLD_IDENTITY
    }
    assert ("Produce", "2") in legacy and any(api == "Metadata" for api, _ in legacy), legacy
    # confluent-kafka (librdkafka): by its KIP-511 name; no traffic "unknown".
    software = {s.labels["client_software_name"] for s in requests}
    assert CONFLUENT in software
    assert "unknown" not in software, software

    # /clients: who, where, since when.
    records = get_json(gw, "/clients")
    old = record_of(records, OLD_CLIENT_ID)
    assert old is not None, records
    assert old["software_name"] == "unknown" and old["identity"] == OLD_IDENTITY
    assert old["peers"][0]["ip"] == "127.0.0.1"
    assert old["connections_opened"] > 1, old
    assert old["first_seen"] <= old["last_seen"] <= time.time()
    refusals = {
        (r["api_key"], r["api"], r["api_version"], r["reason"]) for r in old["versions_refused"]
    }
    assert refusals == {(0, "Produce", 2, "unsupported_version")}
    assert sum(r["count"] for r in old["versions_refused"]) == sum(s.value for s in refused)
    used = {(u["api"], u["api_version"]) for u in old["versions_used"]}
    assert ("Produce", 2) in used and any(api == "Metadata" for api, _ in used), used
    assert old["fingerprint"]
    rdkafka = [r for r in records if r["software_name"] == CONFLUENT]
    assert rdkafka and all(r["identity"] == CONFLUENT for r in rdkafka), records
    assert all(r["peers"][0]["ip"] == "127.0.0.1" for r in rdkafka)
    assert "127.0.0.1" not in json.dumps([s.labels for s in requests])  # no address labels


def test_a_client_without_a_kip511_name_is_labelled_by_its_client_id(
    gateway_factory: GatewayFactory, unique_topic: str
) -> None:
    gw = gateway_factory(metrics=True)
    ConfluentDriver().create_topic(gw.bootstrap, unique_topic)
    # Pinned to (2, 0), kafka-python sends no ApiVersions, so no KIP-511 name (the
    # version issue 31's operator ran).
    consumer = kafka.KafkaConsumer(
        bootstrap_servers=gw.bootstrap,
        client_id="orders-consumer-3",
        api_version=(2, 0),
        request_timeout_ms=10000,
    )
    try:
        consumer.assign([kafka.TopicPartition(unique_topic, 0)])

        def labelled() -> dict[tuple[str, str], float] | None:
            consumer.poll(timeout_ms=200)  # fetching: its connection stays open
            active = {
                (s.labels["client_software_name"], s.labels["client_software_version"]): s.value
                for s in samples(gw, "kafka_gateway_connections_active")
            }
            return active if active.get(("client-id:orders-consumer", "unknown"), 0) else None

        active = wait_until(labelled, "a live connection labelled by client id")
        assert active.get(("unknown", "unknown"), 0) == 0, active
    finally:
        consumer.close()
    records = get_json(gw, "/clients")
    mine = record_of(records, "orders-consumer-3")
    assert mine is not None and mine["identity"] == "client-id:orders-consumer", records


def test_collect_writes_the_clients_dataset_and_read_clients_returns_it(
    gateway_factory: GatewayFactory, unique_topic: str, tmp_path: Path, monkeypatch
) -> None:
    gw = gateway_factory("--config", refusing_config(tmp_path), metrics=True)
    confluent = ConfluentDriver()
    confluent.create_topic(gw.bootstrap, unique_topic)
    produce_pinned_0_10(gw.bootstrap, unique_topic, seconds=2)
    out = tmp_path / "dataset"
    monkeypatch.delenv("KAFKA_GATEWAY_ZOOKEEPER", raising=False)
    code = cli.main(
        [
            "collect",
            "--gateway",
            gw.metrics_url,
            "--rounds",
            "2",
            "--interval",
            "0.5",
            "--out",
            str(out),
        ]
    )
    assert code == 0
    assert list((out / "clients").glob("date=*/*.parquet"))
    rows = read_clients(str(out))
    old = record_of(rows, OLD_CLIENT_ID)
    assert old is not None, rows
    assert old["gateway_id"] and old["identity"] == OLD_IDENTITY
    assert old["peers"] == ["127.0.0.1"] and old["connections_opened"] > 1
    assert {(r["api"], r["api_version"], r["reason"]) for r in old["versions_refused"]} == {
        ("Produce", 2, "unsupported_version")
    }
    assert isinstance(old["first_seen"], float) and old["first_seen"] <= old["last_seen"]
    assert any(r["software_name"] == CONFLUENT for r in rows)
