"""A level change reaches live connections (gateway/server/withdrawn.py).

Real ZooKeeper, Apache Kafka, a gateway process (the default supervised model) and
featurectl; confluent-kafka (librdkafka) clients. The catalogue gates Produce v10+ behind
``test.version`` 1, a name Kafka does not define, so the level is the gateways' alone.
A librdkafka producer (acks=all, idempotent) negotiated Produce v10+ while the level was
finalized; ``featurectl disable`` withdraws those versions. Before this, the producer kept
its versions and every record failed UNSUPPORTED_VERSION from then on; now its
connection is drained (in-flight requests answered, then closed), it reconnects at v9
and no record is lost or doubled. A change that withdraws no version closes nothing.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from gateway.features.store import FeatureStore
from tests.conftest import GatewayFactory
from tests.harness import GatewayProcess, ZooKeeperProcess
from tests.harness.apache_kafka import ApacheKafkaBroker
from tests.harness.consumers import ContinuousConsumer
from tests.integration.conftest import CHROOT
from tests.integration.test_features import catalogue, finalize, wait_for
from tests.integration.test_upgrade_in_place import (
    MAX_REBOOTSTRAP_GAP_S,
    ContinuousProducer,
    create_topic,
)

PRODUCE = 0
GATED_FROM = 10  # Produce v10+ (librdkafka 2.x uses up to v11 or more)
CATALOGUE = f"""
[features."test.version"]
levels.1 = ["Produce>={GATED_FROM}"]

[features."noop.version"]
levels.1 = []
"""
DRAINED = "kafka_gateway_connections_renegotiated_total"


def samples(gw: GatewayProcess) -> list[tuple[str, dict[str, str], float]]:
    text = urllib.request.urlopen(gw.metrics_url, timeout=5).read().decode()
    return [
        (s.name, s.labels, s.value)
        for family in text_string_to_metric_families(text)
        for s in family.samples
    ]


def total(gw: GatewayProcess, name: str, **labels: str) -> float:
    return sum(
        value
        for sample, have, value in samples(gw)
        if sample == name and all(have.get(k) == v for k, v in labels.items())
    )


def produce_versions(gw: GatewayProcess) -> dict[int, float]:
    """Produce requests forwarded so far, by version."""
    found: dict[int, float] = {}
    for name, labels, value in samples(gw):
        if name == "kafka_gateway_requests_total" and labels.get("api") == "Produce":
            version = int(labels["api_version"])
            found[version] = found.get(version, 0) + value
    return found


def log_events(gw: GatewayProcess, event: str) -> list[dict[str, Any]]:
    """The gateway's (and its workers') JSON log lines of ``event``."""
    lines = (line for line in gw.log_text().splitlines() if line.startswith("{"))
    return [entry for entry in map(json.loads, lines) if entry.get("event") == event]


def serving(gw: GatewayProcess, epoch: int, workers: int) -> bool:
    """Whether every process of ``gw`` applied the levels of ``epoch``."""
    found = log_events(gw, "features.finalized")
    return sum(1 for entry in found if entry["epoch"] == epoch) >= workers


def peers(gw: GatewayProcess) -> set[str]:
    url = gw.metrics_url.replace("/metrics", "/connections")
    return {c["peer"] for c in json.loads(urllib.request.urlopen(url, timeout=5).read())}


def featurectl(zookeeper: ZooKeeperProcess, *args: str) -> str:
    """featurectl as an operator runs it; its output (exit 0 asserted)."""
    where = ("--zookeeper", zookeeper.connect_string, "--chroot", CHROOT)
    done = subprocess.run(
        [sys.executable, "-m", "featurectl", *args, *where],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def live_traffic(
    gateway: GatewayProcess, topic: str
) -> tuple[ContinuousProducer, ContinuousConsumer]:
    """A producer (acks=all, idempotent) and a consumer of partition 0 from the start
    (assigned, not subscribed) running through ``gateway``, the producer at Produce v10+."""
    create_topic(gateway.bootstrap, topic)
    producer = ContinuousProducer(gateway.bootstrap, topic).start()
    consumer = ContinuousConsumer(
        gateway.bootstrap,
        topic,
        {"group.id": f"{topic}-reader", "enable.auto.commit": False},
        partition=0,
    )
    wait_for(lambda: len(consumer.values) > 50, 30, "the consumer's first records")
    assert max(produce_versions(gateway)) >= GATED_FROM, "the producer negotiated v10+"
    return producer, consumer


def keeps_delivering(producer: ContinuousProducer) -> int:
    """Wait until a record sent from now on is acknowledged; return its number."""
    sent_after = producer.sent
    deadline = time.monotonic() + 30
    while not any(v >= sent_after for _, v in producer.acked):
        assert time.monotonic() < deadline, (
            f"no record sent after the change was acknowledged in 30 s; "
            f"{len(producer.failed)} failed: {sorted(set(producer.failed))}"
        )
        time.sleep(0.02)
    return sent_after


def nothing_lost(
    producer: ContinuousProducer, consumer: ContinuousConsumer, sent_after: int
) -> None:
    """Every record (the producer stopped) acknowledged, and read back exactly once,
    those sent after the change included; the drained connection closed as a broker's
    does, not with a reset (``outbox.linger_close``)."""
    disconnects = [line for line in producer.log.lines if "Disconnected" in line]
    assert disconnects, "the producer's connection was drained"
    assert not [line for line in disconnects if "reset" in line], disconnects
    assert producer.failed == []
    assert sorted(v for _, v in producer.acked) == list(range(producer.sent))
    wait_for(lambda: len(consumer.values) >= producer.sent, 60, "every record read back")
    consumer.stop()
    assert sorted(consumer.values) == list(range(producer.sent))
    assert max(consumer.values) >= sent_after, "the consumer kept consuming"


@pytest.fixture(params=[1, 2], ids=["one-process", "two-workers"])
def gateway(
    request: pytest.FixtureRequest,
    gateway_factory: GatewayFactory,
    apache_kafka: ApacheKafkaBroker,
    zookeeper: ZooKeeperProcess,
    store: FeatureStore,
    tmp_path: Path,
) -> GatewayProcess:
    finalize(store, test_version=1, noop_version=1)
    return gateway_factory(
        "--workers",
        str(request.param),
        "--zookeeper",
        zookeeper.connect_string,
        "--zookeeper-chroot",
        CHROOT,
        "--features-catalogue",
        catalogue(tmp_path, "gated-produce", CATALOGUE),
        upstream=apache_kafka.bootstrap,
        metrics=True,
    )


def test_disabling_a_level_drains_the_connections_that_negotiated_its_versions(
    gateway: GatewayProcess,
    zookeeper: ZooKeeperProcess,
    store: FeatureStore,
    unique_topic: str,
) -> None:
    producer, consumer = live_traffic(gateway, unique_topic)

    argv = gateway.command()
    workers = int(argv[argv.index("--workers") + 1])

    # A change that withdraws no version (noop.version gates none) closes nothing.
    open_before = peers(gateway)
    assert len(open_before) >= 2  # the producer's and the consumer's at least
    featurectl(zookeeper, "disable", "--feature", "noop.version", "--allow-downgrade")
    epoch = store.read().epoch
    wait_for(lambda: serving(gateway, epoch, workers), 15, f"epoch {epoch} served")
    assert total(gateway, DRAINED) == 0
    assert open_before <= peers(gateway), "connections that lost nothing stay open"

    acked_before = len(producer.acked)
    out = featurectl(zookeeper, "disable", "--feature", "test.version", "--allow-downgrade")
    assert "test.version: 1 → 0" in out
    sent_after = keeps_delivering(producer)
    time.sleep(2.0)
    producer.stop()
    versions = produce_versions(gateway)
    drained = total(gateway, DRAINED, reason="feature_levels")  # summed over the workers
    refused = total(gateway, "kafka_gateway_rejected_requests_total", reason="gated_by_feature")

    nothing_lost(producer, consumer, sent_after)

    assert refused == 0, "no request was answered UNSUPPORTED_VERSION"
    assert any(v < GATED_FROM and n > 0 for v, n in versions.items()), versions
    # One line per process for the change, naming the feature; one per connection.
    summaries = log_events(gateway, "features.connections_draining")
    assert drained >= 1
    assert sum(line["drained"] for line in summaries) == drained
    assert {tuple(line["features"]) for line in summaries} == {("test.version>=1",)}
    assert all(line["withdrawn"]["Produce"].startswith("v10-") for line in summaries)
    assert log_events(gateway, "connection.draining")
    # Back within librdkafka's own re-bootstrap delay (test_upgrade_in_place).
    assert producer.largest_gap_s() < MAX_REBOOTSTRAP_GAP_S
    print(
        f"\nproduced {producer.sent}, acknowledged {len(producer.acked)} "
        f"({acked_before} before the change), consumed {len(consumer.values)}; "
        f"connections drained {drained:g}; largest gap between acks "
        f"{producer.largest_gap_s():.2f} s (at {producer.largest_gap_at()}, drained at "
        f"{summaries[0]['timestamp'][11:23]}); "
        f"Produce requests by version {dict(sorted(versions.items()))}"
    )
