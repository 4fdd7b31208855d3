"""A broker's answer that changes reaches live connections (gateway/server/upstream_recheck.py).

Real ZooKeeper, Apache Kafka 4.x (a broker of this test's own: its features change),
Kafka's own kafka-features.sh, a gateway process; confluent-kafka (librdkafka) clients.
The catalogue gates Produce v10+ behind ``transaction.version`` 1, and the gateways'
level is 1. The gateway enforces its levels lowered to the broker's own (the broker
finalizes transaction.version 2 at first), so a librdkafka producer (acks=all,
idempotent) negotiates Produce v10+. Then ``kafka-features.sh downgrade --feature
transaction.version=0`` runs against the broker itself, not the gateway: the broker's
ApiVersions reports the feature gone, and a new connection through the gateway is
offered Produce v9 at most. The gateway learns it by asking a live connection's broker
ApiVersions again (every ``upstream_api_versions_check_ms``); the connections that lost
a version are drained, the producer reconnects at v9, and no record is lost or doubled.
Nothing is drained while the broker's answer stays the same.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from gateway.features.store import FeatureStore
from tests.conftest import GatewayFactory
from tests.harness import GatewayProcess, ZooKeeperProcess
from tests.harness.apache_kafka import ApacheKafkaBroker
from tests.harness.ports import LOOPBACK
from tests.integration.conftest import CHROOT
from tests.integration.test_features import catalogue, finalize, wait_for
from tests.integration.test_kafka_features_tool import kafka_features
from tests.integration.test_level_change import (
    DRAINED,
    GATED_FROM,
    keeps_delivering,
    live_traffic,
    log_events,
    nothing_lost,
    produce_versions,
    total,
)
from tests.integration.test_upgrade_in_place import MAX_REBOOTSTRAP_GAP_S

CATALOGUE = f"""
[features."transaction.version"]
levels.1 = ["Produce>={GATED_FROM}"]
"""
CHECK_MS = 300
REASON = "upstream_api_versions"


@pytest.fixture
def own_kafka(tmp_path: Path) -> Iterator[ApacheKafkaBroker]:
    # Reachable as it advertises itself, for kafka-features.sh (clients only ever see the
    # gateway's addresses, which it rewrites Metadata to).
    kafka = ApacheKafkaBroker(tmp_path, name="kafka-own", advertised_host=LOOPBACK)
    kafka.start()
    try:
        yield kafka
    finally:
        kafka.stop()


@pytest.fixture(params=[1, 2], ids=["one-process", "two-workers"])
def gateway(
    request: pytest.FixtureRequest,
    gateway_factory: GatewayFactory,
    own_kafka: ApacheKafkaBroker,
    zookeeper: ZooKeeperProcess,
    store: FeatureStore,
    tmp_path: Path,
) -> GatewayProcess:
    finalize(store, transaction_version=1)
    config = tmp_path / "recheck.toml"
    config.write_text(f"upstream_api_versions_check_ms = {CHECK_MS}\n")
    return gateway_factory(
        "--config", str(config),
        "--workers", str(request.param),
        "--zookeeper", zookeeper.connect_string,
        "--zookeeper-chroot", CHROOT,
        "--features-catalogue", catalogue(tmp_path, "tv-gates-produce", CATALOGUE),
        upstream=own_kafka.bootstrap,
        metrics=True,
    )  # fmt: skip


def test_a_feature_downgraded_on_the_broker_drains_the_connections_that_lost_a_version(
    gateway: GatewayProcess, own_kafka: ApacheKafkaBroker, unique_topic: str
) -> None:
    producer, consumer = live_traffic(gateway, unique_topic)

    # Asked again many times over, the broker's answer is the same: nothing drained.
    time.sleep(10 * CHECK_MS / 1000)
    assert total(gateway, DRAINED) == 0
    assert not log_events(gateway, "upstream.answer_changed")

    done = kafka_features(own_kafka.bootstrap, "downgrade", "--feature", "transaction.version=0")
    assert done.returncode == 0 and "downgraded to 0" in done.stdout, done
    sent_after = keeps_delivering(producer)
    wait_for(lambda: total(gateway, DRAINED, reason=REASON) >= 1, 15, "a connection drained")
    time.sleep(2.0)
    producer.stop()
    versions = produce_versions(gateway)
    drained = total(gateway, DRAINED, reason=REASON)  # summed over the workers
    refused = total(gateway, "kafka_gateway_rejected_requests_total")

    nothing_lost(producer, consumer, sent_after)

    assert refused == 0, "no request was refused"
    assert any(v < GATED_FROM and n > 0 for v, n in versions.items()), versions
    assert total(gateway, DRAINED, reason="feature_levels") == 0
    changed = log_events(gateway, "upstream.answer_changed")
    assert changed and all(line["upstream"] == own_kafka.bootstrap for line in changed)
    lines = [e for e in log_events(gateway, "connection.draining") if e["reason"] == REASON]
    assert lines and all(line["withdrawn"]["Produce"].startswith("v10-") for line in lines)
    assert producer.largest_gap_s() < MAX_REBOOTSTRAP_GAP_S
    print(
        f"\nproduced {producer.sent}, acknowledged {len(producer.acked)}, consumed "
        f"{len(consumer.values)}; connections drained {drained:g}; largest gap between "
        f"acks {producer.largest_gap_s():.2f} s; Produce requests by version "
        f"{dict(sorted(versions.items()))}"
    )
