"""Cluster mode: a bootstrap listener plus one listener per broker, opened as Metadata
reveals the brokers. Real Tansu (advertising its own reachable address), real client."""

from __future__ import annotations

import time
import urllib.request
import uuid

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from tests.harness.ports import free_port, port_accepts


# With workers, each worker opens the broker listeners itself (SO_REUSEPORT) when it
# sees them in Metadata; /metrics sums the workers.
@pytest.mark.parametrize("workers", ["1", "2"])
def test_cluster_mode_opens_a_listener_per_broker_and_clients_use_it(
    gateway_factory, broker_factory, tmp_path, workers
):
    tansu = broker_factory(advertised_host="127.0.0.1")
    broker_port = free_port()
    config = tmp_path / "cluster.toml"
    config.write_text(f'mode = "cluster"\n[cluster.ports]\n111 = {broker_port}\n')
    gw = gateway_factory(
        "--config", str(config), "--workers", workers, upstream=tansu.bootstrap, metrics=True
    )
    bootstrap = f"127.0.0.1:{gw.port}"
    assert not port_accepts("127.0.0.1", broker_port)  # not before Metadata named it

    admin = AdminClient({"bootstrap.servers": bootstrap})
    brokers = admin.list_topics(timeout=15).brokers
    assert {b.id: (b.host, b.port) for b in brokers.values()} == {111: ("127.0.0.1", broker_port)}
    gw.wait_for_log("broker-111")
    deadline = time.monotonic() + 10
    while not port_accepts("127.0.0.1", broker_port) and time.monotonic() < deadline:
        time.sleep(0.05)

    topic = f"cluster-{uuid.uuid4().hex[:8]}"
    for future in admin.create_topics([NewTopic(topic, 1, 1)]).values():
        future.result(timeout=20)
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all"})
    for i in range(5):
        producer.produce(topic, b"v%d" % i)
    assert producer.flush(15) == 0
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": topic, "enable.auto.commit": False}
    )
    consumer.assign([TopicPartition(topic, 0, 0)])
    got: list[bytes] = []
    deadline = time.monotonic() + 20
    while len(got) < 5 and time.monotonic() < deadline:
        message = consumer.poll(0.5)
        if message is not None and not message.error():
            got.append(message.value())
    consumer.close()
    assert got == [b"v%d" % i for i in range(5)]
    # The data path went through the per-broker listener, not only the bootstrap one.
    metrics = urllib.request.urlopen(gw.metrics_url, timeout=5).read().decode()
    line = next(
        x
        for x in metrics.splitlines()
        if x.startswith('kafka_gateway_connections_total{listener="broker-111"}')
    )
    assert float(line.split()[-1]) >= 1
