"""Deploying the gateway changes nothing a client sees (issue 41, item 4).

A fresh Apache Kafka 4.x cluster finalizes group.version 1, transaction.version 2 and
share.version 2 at format time. A gateway fleet with an empty ZooKeeper store in front of
it adopts those levels once (gateway/features/adoption.py), so a KIP-848 consumer
(librdkafka ``group.protocol=consumer``) and a transactional producer work through it
with nothing finalized by hand; a second gateway, a restart, or a store the operator
changed since, adopt nothing. The unit rules are in tests/unit/gateway/features.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from gateway.features.catalogue import load_catalogue
from gateway.features.store import FeatureStore
from tests.conftest import GatewayFactory
from tests.harness import GatewayProcess, ZooKeeperProcess
from tests.harness.apache_kafka import ApacheKafkaBroker
from tests.harness.consumers import ContinuousConsumer
from tests.harness.java_clients import JavaProbe
from tests.integration.conftest import CHROOT
from tests.integration.test_features import fleet_member, metric, wait_for
from tests.integration.test_java_clients import probe
from tests.integration.test_kafka_features_tool import kafka_features
from tests.integration.test_upgrade_in_place import create_topic
from tests.integration.test_upstream_features import (
    CONSUMER_GROUP_HEARTBEAT,
    UNSUPPORTED_VERSION,
    features,
    heartbeat_error,
)
from tests.integration.test_upstream_level_change import own_kafka

PRODUCE = 0
RECORDS = 20
JAVA_RECORDS = 12

# Fixtures of test_java_clients and test_upstream_level_change, used here by name.
__all__ = ["own_kafka", "probe"]


@pytest.fixture
def kraft(apache_kafka: ApacheKafkaBroker) -> ApacheKafkaBroker:
    if apache_kafka.zookeeper_mode:
        pytest.skip(f"needs Apache Kafka 4.x (KRaft); the session runs {apache_kafka.version}")
    return apache_kafka


def adopting_gateway(
    factory: GatewayFactory,
    kafka: ApacheKafkaBroker,
    zookeeper: ZooKeeperProcess,
    name: str,
    *extra: str,
) -> GatewayProcess:
    return factory(
        *fleet_member(zookeeper, name),
        "--adopt-broker-features",  # the default; the harness turns it off for other tests
        *extra,
        upstream=kafka.bootstrap,
        metrics=True,
        name=name,
    )


def log_lines(gw: GatewayProcess, event: str) -> list[dict[str, Any]]:
    lines = (json.loads(line) for line in gw.log_text().splitlines() if line.startswith("{"))
    return [line for line in lines if line.get("event") == event]


def brokers_levels(kafka: ApacheKafkaBroker) -> dict[str, int]:
    """What the broker finalized of the catalogue's features, each at most the level the
    built-in catalogue lists (Kafka 4.4's levels are all listed)."""
    direct, _ = features(kafka.host, kafka.port)
    catalogue = load_catalogue(None)
    return {
        name: min(high, catalogue[name].max_level)
        for name, (_, high) in direct.finalized.items()
        if name in catalogue and high >= 1
    }


def transactional_produce(bootstrap: str, topic: str) -> None:
    from confluent_kafka import Producer

    producer = Producer(
        {"bootstrap.servers": bootstrap, "transactional.id": f"txn-{uuid.uuid4().hex[:8]}"}
    )
    producer.init_transactions(30)
    producer.begin_transaction()
    for i in range(RECORDS):
        producer.produce(topic, str(i).encode())
    producer.commit_transaction(30)


def kip848_consume(bootstrap: str, topic: str) -> ContinuousConsumer:
    consumer = ContinuousConsumer(
        bootstrap,
        topic,
        {
            "group.id": f"kip848-{uuid.uuid4().hex[:8]}",
            "group.protocol": "consumer",
            "auto.offset.reset": "earliest",
            "isolation.level": "read_committed",
        },
    )
    try:
        wait_for(lambda: len(consumer.values) >= RECORDS, timeout=60, what="the records")
    finally:
        consumer.stop()
    return consumer


def featurectl(zookeeper: ZooKeeperProcess, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "featurectl", *args, "--zookeeper", zookeeper.connect_string,
         "--chroot", CHROOT],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip


def test_clients_that_work_against_the_cluster_work_through_a_fresh_fleet(
    gateway_factory: GatewayFactory,
    kraft: ApacheKafkaBroker,
    zookeeper: ZooKeeperProcess,
    store: FeatureStore,
    unique_topic: str,
) -> None:
    expected = brokers_levels(kraft)
    assert expected.get("group.version") == 1, expected  # what a fresh Kafka 4.x has
    assert store.read().epoch == -1  # nothing finalized, nothing by hand
    gw = adopting_gateway(gateway_factory, kraft, zookeeper, "gw-a")

    # Adopted before the first client: the store holds the broker's levels, said once.
    held = store.read()
    assert (dict(held.levels), held.epoch) == (expected, 0)
    [audit] = log_lines(gw, "features.adopted")
    assert audit["upstream"] == kraft.bootstrap
    assert audit["new_levels"] == expected
    assert audit["epoch"] == "-1 -> 0"
    assert "metadata.version" in audit["skipped"]

    # What clients are offered: the KIP-848 heartbeat answered, Produce v12+ (txn v2).
    through, keys = features(gw.host, gw.port)
    assert through.finalized["group.version"] == (1, 1)
    assert heartbeat_error(gw) != UNSUPPORTED_VERSION
    _, direct_keys = features(kraft.host, kraft.port)
    assert keys[CONSUMER_GROUP_HEARTBEAT] == direct_keys[CONSUMER_GROUP_HEARTBEAT]
    if expected.get("transaction.version", 0) >= 2:
        assert keys[PRODUCE][1] == direct_keys[PRODUCE][1] >= 12  # not withheld

    # Real clients: a transactional producer, and a KIP-848 consumer reading it back.
    create_topic(gw.bootstrap, unique_topic)
    transactional_produce(gw.bootstrap, unique_topic)
    consumer = kip848_consume(gw.bootstrap, unique_topic)
    assert sorted(consumer.values) == list(range(RECORDS))
    assert not [e for e in consumer.errors if "UNSUPPORTED" in e.upper()], consumer.errors

    # A second gateway of the fleet finds the store and adopts nothing.
    other = adopting_gateway(gateway_factory, kraft, zookeeper, "gw-b")
    wait_for(lambda: len(store.registrations()) == 2, what="both registrations")
    assert log_lines(other, "features.adopted") == []
    assert store.read().epoch == 0
    assert heartbeat_error(other) != UNSUPPORTED_VERSION


def test_a_store_the_operator_changed_stays_so_across_a_restart(
    gateway_factory: GatewayFactory,
    kraft: ApacheKafkaBroker,
    zookeeper: ZooKeeperProcess,
    store: FeatureStore,
) -> None:
    gw = adopting_gateway(gateway_factory, kraft, zookeeper, "gw-a")
    assert store.read().level("group.version") == 1
    done = featurectl(zookeeper, "disable", "--feature", "group.version", "--allow-downgrade")
    assert done.returncode == 0, done.stderr
    operators = store.read()
    assert "group.version" not in operators.levels

    gw.restart()
    time.sleep(0.5)  # the restarted gateway's watch and first answers
    assert store.read() == operators  # not adopted into again
    assert len(log_lines(gw, "features.adopted")) == 1  # the first start's (one log file)
    assert heartbeat_error(gw) == UNSUPPORTED_VERSION  # withheld, as the operator chose

    # ...but not silently: the metric, the log line and featurectl describe say so.
    labels = f'feature="group.version",upstream="{kraft.bootstrap}"'
    name = f"kafka_gateway_feature_broker_finalized_level{{{labels}}}"
    assert wait_for(lambda: metric(gw, name), what=name) == 1
    # One line from the first process when the disable reached it, one from the restart.
    ahead = log_lines(gw, "features.broker_ahead")
    assert [line["feature"] for line in ahead].count("group.version") == 2
    assert {line["action"] for line in ahead if line["feature"] == "group.version"} == {
        "featurectl finalize --feature group.version=1"
    }

    def described() -> str | None:
        out = featurectl(zookeeper, "describe").stdout
        return out if "brokers finalized" in out else None

    assert "group.version: brokers finalized 1, gateways hold 0" in wait_for(described)


def test_a_gateway_of_several_workers_adopts_once(
    gateway_factory: GatewayFactory,
    kraft: ApacheKafkaBroker,
    zookeeper: ZooKeeperProcess,
    store: FeatureStore,
) -> None:
    expected = brokers_levels(kraft)
    gw = adopting_gateway(gateway_factory, kraft, zookeeper, "gw-w", "--workers", "2")
    assert store.read().levels == expected
    # The supervisor adopted before its workers started; they found the store.
    assert len(log_lines(gw, "features.adopted")) == 1
    assert heartbeat_error(gw) != UNSUPPORTED_VERSION


@pytest.mark.parametrize("workers", ["1", "2"], ids=["one-process", "two-workers"])
def test_a_level_the_brokers_raise_later_is_not_withheld_silently(
    gateway_factory: GatewayFactory,
    own_kafka: ApacheKafkaBroker,
    zookeeper: ZooKeeperProcess,
    store: FeatureStore,
    tmp_path: Path,
    workers: str,
) -> None:
    done = kafka_features(own_kafka.bootstrap, "downgrade", "--feature", "group.version=0")
    assert done.returncode == 0, done
    config = tmp_path / "check.toml"
    config.write_text("readiness_upstream_check_ms = 300\n")  # the supervisor's probe
    gw = adopting_gateway(
        gateway_factory, own_kafka, zookeeper, "gw-a", "--config", str(config), "--workers", workers
    )
    [audit] = log_lines(gw, "features.adopted")
    assert "group.version" not in audit["new_levels"]  # the broker had none of it then
    adopted = store.read()

    done = kafka_features(own_kafka.bootstrap, "upgrade", "--feature", "group.version=1")
    assert done.returncode == 0, done

    # The registration (the supervisor's, with workers) follows the broker: describe says.
    def described() -> str | None:
        out = featurectl(zookeeper, "describe").stdout
        return out if "group.version: brokers finalized 1" in out else None

    assert "group.version: brokers finalized 1, gateways hold 0" in wait_for(described, 30)
    wait_for(
        lambda: [
            x for x in log_lines(gw, "features.broker_ahead") if x["feature"] == "group.version"
        ],
        what="the broker_ahead line",
    )
    # A client's connection: still withheld (the store is the operator's, adopted once),
    # and the worker that served it measures the broker's level.
    assert heartbeat_error(gw) == UNSUPPORTED_VERSION
    labels = f'feature="group.version",upstream="{own_kafka.bootstrap}"'
    name = f"kafka_gateway_feature_broker_finalized_level{{{labels}}}"
    assert wait_for(lambda: metric(gw, name), what=name) == 1
    assert store.read() == adopted
    assert len(log_lines(gw, "features.adopted")) == 1


def test_java_kip848_share_and_transactional_clients_move_behind_a_fresh_fleet(
    gateway_factory: GatewayFactory,
    own_kafka: ApacheKafkaBroker,
    zookeeper: ZooKeeperProcess,
    store: FeatureStore,
    probe: JavaProbe,
    unique_topic: str,
) -> None:
    """Kafka's own Java client, as it runs against a 4.4 cluster (a KIP-848 consumer
    group, a KIP-932 share group, a transactional producer), does the same through a
    gateway put in front of it with an empty store: nothing finalized by hand."""

    def clients(bootstrap: str, tag: str) -> None:
        topic = f"{unique_topic}-{tag}"
        made = probe.run("produce", bootstrap, topic=topic, count=JAVA_RECORDS, prefix=tag)
        assert not made.errors, made.describe()
        want = sorted(f"{tag}-{i}" for i in range(JAVA_RECORDS))
        for scenario, options in (("consume", {"protocol": "consumer"}), ("share", {})):
            run = probe.run(
                scenario, bootstrap, topic=topic, expect=JAVA_RECORDS, group=f"{scenario}-{tag}",
                **options,
            )  # fmt: skip
            assert not run.errors, (scenario, run.describe())
            assert sorted(r["value"] for r in run.of("record")) == want, scenario
        txn = probe.run(
            "transactions", bootstrap, topic=f"{topic}-txn", count=4, transactional_id=topic
        )
        assert not txn.errors, txn.describe()
        assert [t["outcome"] for t in txn.of("transaction")] == ["committed", "aborted"]

    clients(own_kafka.bootstrap, "direct")  # the control: the cluster as it runs
    assert store.read().epoch == -1
    gw = adopting_gateway(gateway_factory, own_kafka, zookeeper, "gw-java")
    clients(gw.bootstrap, "gateway")
    assert [line["upstream"] for line in log_lines(gw, "features.adopted")] == [own_kafka.bootstrap]
    assert '"request.rejected"' not in gw.log_text()
