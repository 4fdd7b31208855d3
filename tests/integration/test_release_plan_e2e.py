"""Issue 42 end to end: which clients will Kafka 4.0 refuse, asked before the roll.

A gateway in front of Kafka 3.9 (ZooKeeper mode), declaring ``upgrade_target_release =
"4.0"``, serves old-protocol clients (kafka-python pinned to ``api_version=(0, 10)`` and
``(0, 9)``, librdkafka with ``api.version.request=false``: ``tests/harness/old_clients``)
and a modern one (confluent-kafka-python, which negotiates). ``featurectl collect``
gathers the metrics and client records; then:

* the live signal already names them: ``kafka_gateway_requests_below_target_release_total``
  counts only the old clients, and /clients marks them ``breaks_on`` 4.0;
* ``featurectl plan --release 4.0`` names exactly the old ones, with API and version,
  and exits 1;
* the brokers "roll": a gateway in front of Kafka 4.x serves the modern client, and
  refuses every client the plan named (no record of theirs is acknowledged).
"""

from __future__ import annotations

import json
import os
import sys
import urllib.request
import uuid
from pathlib import Path
from typing import Any

import pytest
from kafka.errors import KafkaTimeoutError
from prometheus_client.parser import text_string_to_metric_families

from tests.conftest import GatewayFactory
from tests.harness import GatewayProcess
from tests.harness.apache_kafka import ApacheKafkaBroker
from tests.harness.featurectl_collect import featurectl_collect, rounds
from tests.harness.featurectl_plan import featurectl_plan
from tests.harness.old_clients import OLD_CLIENTS, OldClient
from tests.integration.test_clients import ConfluentDriver
from tests.integration.test_features import wait_for
from tests.integration.test_kafka_zookeeper_mode import ZooKeeperModeKafka, kafka39

__all__ = ["kafka39"]  # the module fixture of test_kafka_zookeeper_mode, used here by name

pytestmark = pytest.mark.slow

RUN_TIMEOUT_S = 300
RECORDS = 20


def get(url: str) -> str:
    with urllib.request.urlopen(url, timeout=10) as response:
        return str(response.read().decode())


def below_target(gw: GatewayProcess) -> dict[tuple[str, str, str], float]:
    """kafka_gateway_requests_below_target_release_total: (client, api, version) -> count."""
    families = text_string_to_metric_families(get(gw.metrics_url))
    (family,) = [f for f in families if f.name == "kafka_gateway_requests_below_target_release"]
    return {
        (s.labels["client_software_name"], s.labels["api"], s.labels["api_version"]): s.value
        for s in family.samples
        if s.name.endswith("_total") and s.labels["release"] == "4.0"
    }


def clients(gw: GatewayProcess) -> list[dict[str, Any]]:
    entries: list[dict[str, Any]] = json.loads(
        get(gw.metrics_url.removesuffix("metrics") + "clients")
    )
    return entries


def test_plan_release_4_names_the_old_clients_and_kafka_4_refuses_exactly_them(
    kafka39: ZooKeeperModeKafka,
    apache_kafka: ApacheKafkaBroker,
    gateway_factory: GatewayFactory,
    unique_topic: str,
    tmp_path: Path,
) -> None:
    if apache_kafka.version.startswith("3."):
        pytest.skip("the session's Apache Kafka is 3.x: nothing to roll to")
    chroot = f"/release-{uuid.uuid4().hex[:8]}"
    config = tmp_path / "gateway.toml"
    config.write_text('upgrade_target_release = "4.0"\n')
    gating = (
        "--config",
        str(config),
        "--zookeeper",
        kafka39.zookeeper,
        "--zookeeper-chroot",
        chroot,
    )
    gw = gateway_factory(*gating, upstream=kafka39.broker.bootstrap, metrics=True)
    modern = ConfluentDriver()

    metrics = tmp_path / "metrics"
    with featurectl_collect(kafka39.zookeeper, chroot, metrics, "--interval", "1"):
        wait_for(lambda: rounds(metrics) >= 1, what="collect's first round")
        modern.create_topic(gw.bootstrap, unique_topic)
        values = [f"{unique_topic}/{i}".encode() for i in range(RECORDS)]
        modern.produce(gw.bootstrap, unique_topic, values, acks="all")
        assert modern.consume_assigned(gw.bootstrap, unique_topic, RECORDS) == values
        for old in OLD_CLIENTS:
            assert old.produce(gw.bootstrap, unique_topic, values) == RECORDS, old.name
            assert len(old.consume(gw.bootstrap, unique_topic, RECORDS)) >= RECORDS, old.name
        done = rounds(metrics)
        wait_for(lambda: rounds(metrics) >= done + 2, what="two more rounds")

    # Who the old clients are, as the gateway names them: no KIP-511 software (they send
    # no ApiVersions), so their client ids; the modern client announces itself.
    # (A connection that sent no request, a probe, is an identity without versions.)
    records = [e for e in clients(gw) if e["versions_used"]]
    old_ids = {e["identity"] for e in records if e["software_name"] == "unknown"}
    assert old_ids and all(i.startswith("client-id:") for i in old_ids), records
    modern_ids = {e["identity"] for e in records} - old_ids
    assert "confluent-kafka-python" in modern_ids

    # The live signal, before the roll: the old clients, Produce below v3 among them.
    live = below_target(gw)
    assert {name for name, _, _ in live} == old_ids, live
    assert any(api == "Produce" and int(v) < 3 for _, api, v in live)
    marked = {e["identity"] for e in records if e.get("breaks_on")}
    assert marked == old_ids
    assert all(e["breaks_on"] is None for e in records if e["identity"] in modern_ids)

    plan = featurectl_plan(
        metrics, tmp_path / "plan", "--zookeeper", kafka39.zookeeper, "--chroot", chroot,
        "--release", "4.0", "--master", "local[1]",
        env={**os.environ, "PYSPARK_PYTHON": sys.executable}, timeout_s=RUN_TIMEOUT_S,
    )  # fmt: skip
    (release,) = plan["releases"]
    assert not release["safe"]
    breaking = {c["client_software_name"]: c for c in release["clients"]
                if c["verdict"] == "breaks on 4.0"}  # fmt: skip
    assert set(breaking) == old_ids, release["clients"]
    for c in breaking.values():  # each with what it used below 4.0's minimum, and the fix
        assert c["refused"], c
        assert all(r["needs"] is not None and r["api_version"] < r["needs"] for r in c["refused"])
        assert all(r["remedy"] for r in c["refused"])
    refused = {(r["api"], r["api_version"]) for c in breaking.values() for r in c["refused"]}
    assert {("Produce", 2), ("Produce", 1), ("Fetch", 1), ("ListOffsets", 0)} <= refused
    works = {c["client_software_name"] for c in release["clients"] if c["verdict"] == "works"}
    assert "confluent-kafka-python" in works
    assert [g["ready"] for g in release["gateways"]] == [True]
    kinds = [s["kind"] for s in release["steps"]]
    assert kinds[: len(old_ids)] == ["move client"] * len(old_ids) and "roll brokers" in kinds
    report = (tmp_path / "plan" / "report.md").read_text()
    assert "## Kafka 4.0 readiness" in report

    # The roll: the same clients through a gateway in front of Kafka 4.x, its version
    # bridge off (what Kafka 4 itself does), then on (the default: gateway/bridge).
    no_bridge = tmp_path / "no-bridge.toml"
    no_bridge.write_text("bridge_old_clients = false\n")
    rolled = gateway_factory(
        "--config", str(no_bridge), upstream=apache_kafka.bootstrap, name="gateway-kafka-4"
    )
    topic = f"{unique_topic}-4"
    modern.create_topic(rolled.bootstrap, topic)
    modern.produce(rolled.bootstrap, topic, values, acks="all")
    assert modern.consume_assigned(rolled.bootstrap, topic, RECORDS) == values
    for old in OLD_CLIENTS:  # every client the plan named: refused
        assert delivered(old, rolled.bootstrap, topic, values[:2]) == 0, old.name
    bridged = gateway_factory(upstream=apache_kafka.bootstrap, name="gateway-kafka-4-bridge")
    for old in OLD_CLIENTS:  # and carried across by the bridge
        assert delivered(old, bridged.bootstrap, topic, values[:2]) == 2, old.name


def delivered(old: OldClient, bootstrap: str, topic: str, values: list[bytes]) -> int:
    """Records ``old`` got acknowledged; 0 when the broker's refusal made it give up (Kafka
    4 closes the connection on Produce v0-2: kafka-python's flush then times out)."""
    try:
        return old.produce(bootstrap, topic, values)
    except KafkaTimeoutError:
        return 0
