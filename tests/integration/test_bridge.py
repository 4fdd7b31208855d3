"""The version bridge against Kafka 4.4 (the session's ``apache_kafka``): clients pinned
to the versions Kafka 4.0 removed (KIP-896) produce and read back through the gateway,
while direct to the broker they fail (the control), and a modern client beside them is
unaffected."""

from __future__ import annotations

import json
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import GatewayFactory
from tests.harness import GatewayProcess
from tests.harness.apache_kafka import ApacheKafkaBroker
from tests.harness.old_clients import OldClient, kafka_python_records
from tests.integration.test_clients import DRIVERS

RECORDS = 200
TIMEOUT_S = 30.0


def bridging(
    factory: GatewayFactory,
    kafka: ApacheKafkaBroker,
    tmp_path: Path | None = None,
    bridge: str = "",
) -> GatewayProcess:
    """A gateway in front of Kafka 4.x, with metrics; ``bridge``: its ``[bridge]`` section's
    lines, if any (a config file in ``tmp_path``). Skipped in front of Kafka 3.9."""
    if kafka.zookeeper_mode:
        pytest.skip("the bridge is for Kafka 4.x, which removed the old versions")
    options: tuple[str, ...] = ()
    if tmp_path is not None:
        config = tmp_path / "bridge.toml"
        config.write_text(f"[bridge]\n{bridge}\n")
        options = ("--config", str(config))
    return factory(*options, upstream=kafka.bootstrap, metrics=True)


@pytest.fixture
def bridged(gateway_factory: GatewayFactory, apache_kafka: ApacheKafkaBroker) -> GatewayProcess:
    return bridging(gateway_factory, apache_kafka)


def _records(tag: str) -> list[tuple[bytes | None, bytes]]:
    # Keys null now and then, values of several sizes: byte-identical both ways.
    return [
        (
            None if i % 9 == 4 else f"{tag}-key-{i}".encode(),
            f"{tag}-value-{i}-".encode() * (1 + i % 5),
        )
        for i in range(RECORDS)
    ]


def old_client(
    api_version: tuple[int, int], compression: str | None = None, **settings: Any
) -> OldClient:
    """kafka-python pinned to ``api_version``, as ``tests/harness/old_clients`` has it."""
    name = "kafka-python-" + ".".join(map(str, api_version))
    return OldClient(name, "kafka-python", {"api_version": api_version, **settings}, compression)


def _read(
    old: OldClient, bootstrap: str, topic: str, count: int
) -> list[tuple[int, bytes | None, bytes]]:
    # A second longer than ``count`` takes: anything beyond it would be a duplicate.
    return old.consume_records(bootstrap, topic, count, linger_s=1.0)


def assert_refused(bootstrap: str, topic: str, **settings: Any) -> None:
    """One record from kafka-python 0.10, not retried, and not acknowledged."""
    from kafka import KafkaProducer

    producer = KafkaProducer(
        bootstrap_servers=bootstrap,
        acks="all",
        api_version=(0, 10),
        request_timeout_ms=5000,
        max_block_ms=5000,
        retries=0,
        **settings,
    )
    try:
        future = producer.send(topic, key=b"k", value=b"no", partition=0)
        producer.flush(timeout=10)
        with pytest.raises(Exception):  # noqa: B017 - any failure: the broker refused it
            future.get(timeout=1)
    finally:
        producer.close(timeout=5)


def direct_address(kafka: ApacheKafkaBroker) -> str:
    """The Kafka 4.x broker's own address, for a control without the gateway (it advertises
    itself there). Skipped in front of Kafka 3.9, which still serves the old versions."""
    if kafka.zookeeper_mode:
        pytest.skip("Kafka 3.9 still serves the old versions")
    return f"127.0.0.1:{kafka.node.internal_port}"


def metrics_text(gw: GatewayProcess) -> str:
    with urllib.request.urlopen(gw.metrics_url, timeout=10) as response:
        text: str = response.read().decode()
    return text


@pytest.mark.parametrize(
    "compression",
    [None, "gzip", "snappy", "lz4"],
)
@pytest.mark.parametrize("api_version", [(0, 10), (0, 9)], ids=["0.10", "0.9"])
def test_old_kafka_python_is_carried_across_kafka_4(
    bridged: GatewayProcess,
    apache_kafka: ApacheKafkaBroker,
    unique_topic: str,
    api_version: tuple[int, int],
    compression: str | None,
) -> None:
    DRIVERS[0].create_topic(bridged.bootstrap, unique_topic)
    old = old_client(api_version, compression)
    sent = _records("old")
    assert old.produce_records(bridged.bootstrap, unique_topic, sent) == RECORDS
    got = _read(old, bridged.bootstrap, unique_topic, RECORDS)
    assert [(k, v) for _, k, v in got] == sent  # 200 of 200, byte-identical, no duplicate
    assert [o for o, _, _ in got] == list(range(RECORDS))
    # The broker stored record batches: a modern client reads the same records.
    modern = DRIVERS[0].consume_assigned(bridged.bootstrap, unique_topic, RECORDS)
    assert modern == [v for _, v in sent]
    text = metrics_text(bridged)
    produce_from = {(0, 10): "2", (0, 9): "1"}[api_version]
    assert (
        f'kafka_gateway_bridged_requests_total{{api="Produce",from_version="{produce_from}",to_version="3"}}'
        in text
    )
    assert 'api="Fetch"' in text and "kafka_gateway_bridge_cpu_seconds_total" in text
    log = bridged.log_text()
    assert '"bridge.client_bridged"' in log
    # /clients: the old client's identity (its client id) with the requests bridged.
    url = bridged.metrics_url.replace("/metrics", "/clients")
    with urllib.request.urlopen(url, timeout=10) as response:
        identities = json.loads(response.read())
    assert any(
        i["client_id"].startswith("kafka-python") and i["bridged_requests"] > 0 for i in identities
    ), identities
    assert '"request.rejected"' not in log and "rewrite_failed" not in log


def test_direct_to_kafka_4_the_old_client_fails(
    apache_kafka: ApacheKafkaBroker, unique_topic: str
) -> None:
    """The control: the same client, direct, gets nothing acknowledged."""
    direct = direct_address(apache_kafka)
    DRIVERS[0].create_topic(direct, unique_topic)
    assert_refused(direct, unique_topic, reconnect_backoff_max_ms=500)


def test_a_modern_client_beside_bridged_ones_is_untouched(
    bridged: GatewayProcess, unique_topic: str
) -> None:
    DRIVERS[0].create_topic(bridged.bootstrap, unique_topic)
    old = [(b"k%d" % i, b"old-%d" % i) for i in range(50)]
    assert old_client((0, 10)).produce_records(bridged.bootstrap, unique_topic, old) == 50
    modern = [b"modern-%d" % i for i in range(50)]
    DRIVERS[0].produce(bridged.bootstrap, unique_topic, modern, "all")
    assert (
        DRIVERS[0].consume_assigned(bridged.bootstrap, unique_topic, 100)
        == [v for _, v in old] + modern
    )
    got = _read(old_client((0, 10)), bridged.bootstrap, unique_topic, 100)
    assert [v for _, _, v in got] == [v for _, v in old] + modern
    # Only the old client's requests were bridged: confluent-kafka's went through as they came.
    text = metrics_text(bridged)
    assert "kafka_gateway_bridged_connections" in text


def test_acks_0_is_honoured_across_the_bridge(bridged: GatewayProcess, unique_topic: str) -> None:
    DRIVERS[0].create_topic(bridged.bootstrap, unique_topic)
    sent = _records("acks0")
    from kafka import KafkaProducer

    producer = KafkaProducer(bootstrap_servers=bridged.bootstrap, acks=0, api_version=(0, 10))
    try:
        for key, value in sent:
            producer.send(unique_topic, key=key, value=value, partition=0)
        producer.flush(timeout=TIMEOUT_S)
    finally:
        producer.close(timeout=5)
    got = _read(old_client((0, 10)), bridged.bootstrap, unique_topic, RECORDS)
    assert [(k, v) for _, k, v in got] == sent
    assert 'api="Produce",from_version="2",to_version="3"' in metrics_text(bridged)


#: A CreateTime far from any append time (2001): a reader shown it was shown the wrong one.
CREATE_TIME_MS = 1_000_000_000_000


@pytest.mark.parametrize("compression", [None, "gzip"])
def test_log_append_time_reaches_an_old_reader(
    bridged: GatewayProcess, unique_topic: str, compression: str | None
) -> None:
    """A topic whose broker stamps each batch (``message.timestamp.type=LogAppendTime``):
    kafka-python 0.10 (Produce v2, Fetch v2: magic 1) is acknowledged and reads the
    broker's append time, marked as such (timestamp type 1), not its own CreateTime;
    kafka-python 0.9 (magic 0, no timestamps) reads the same keys and values."""
    from confluent_kafka.admin import AdminClient, NewTopic
    from kafka import KafkaProducer

    admin = AdminClient({"bootstrap.servers": bridged.bootstrap})
    config = {"message.timestamp.type": "LogAppendTime"}
    admin.create_topics([NewTopic(unique_topic, 1, 1, config=config)])[unique_topic].result(
        TIMEOUT_S
    )
    sent = _records("lat")
    before_ms = int(time.time() * 1000)
    producer = KafkaProducer(
        bootstrap_servers=bridged.bootstrap,
        acks="all",
        api_version=(0, 10),
        compression_type=compression,
    )
    try:
        futures = [
            producer.send(unique_topic, key=k, value=v, partition=0, timestamp_ms=CREATE_TIME_MS)
            for k, v in sent
        ]
        producer.flush(timeout=TIMEOUT_S)
        acknowledged = [f.get(timeout=1) for f in futures]
    finally:
        producer.close(timeout=5)
    after_ms = int(time.time() * 1000)
    # Produce v2's answer carries the append time (the bridge brings it down from v3).
    assert all(before_ms <= m.timestamp <= after_ms for m in acknowledged), acknowledged[0]
    got = kafka_python_records(
        bridged.bootstrap, unique_topic, RECORDS, 1.0, {"api_version": (0, 10)}
    )
    assert [(r.key, r.value) for r in got] == sent
    assert {r.timestamp_type for r in got} == {1}
    assert all(before_ms <= r.timestamp <= after_ms for r in got), got[0]
    magic0 = _read(old_client((0, 9)), bridged.bootstrap, unique_topic, RECORDS)
    assert [(k, v) for _, k, v in magic0] == sent
    assert 'api="Fetch",from_version="2"' in metrics_text(bridged)


@pytest.mark.parametrize("fallback", ["0.8.2", "0.9.0", "0.10.0"])
def test_librdkafka_with_an_old_fallback_is_carried(
    bridged: GatewayProcess, unique_topic: str, fallback: str
) -> None:
    old = OldClient(
        f"librdkafka-{fallback}",
        "librdkafka",
        {"api.version.request": False, "broker.version.fallback": fallback},
    )
    DRIVERS[0].create_topic(bridged.bootstrap, unique_topic)
    sent = [f"rdkafka-{fallback}-{i}".encode() for i in range(RECORDS)]
    assert old.produce(bridged.bootstrap, unique_topic, sent) == RECORDS
    assert old.consume(bridged.bootstrap, unique_topic, RECORDS) == sent
    text = metrics_text(bridged)
    sent_versions = {
        "0.8.2": (("Produce", 0), ("Fetch", 0), ("ListOffsets", 0)),
        "0.9.0": (("Produce", 1), ("Fetch", 1), ("ListOffsets", 0)),
    }
    if fallback in sent_versions:  # all bridged
        for api, version in sent_versions[fallback]:
            assert f'api="{api}",from_version="{version}"' in text, api
    else:
        # librdkafka asks ApiVersions for any fallback from 0.10 on (its documentation of
        # broker.version.fallback), and then speaks versions Kafka 4 kept: nothing to bridge.
        assert "kafka_gateway_bridged_requests_total{" not in text
    assert '"request.rejected"' not in bridged.log_text()


def _group_read(bootstrap: str, topic: str, group: str, count: int, **settings: Any) -> list[bytes]:
    """Join ``group`` (classic protocol), read ``count`` values, commit, leave."""
    from kafka import KafkaConsumer

    consumer = KafkaConsumer(
        topic,
        bootstrap_servers=bootstrap,
        group_id=group,
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        max_poll_records=count,
        request_timeout_ms=int(TIMEOUT_S * 1000) + 1000,
        session_timeout_ms=10000,
        heartbeat_interval_ms=1000,
        **settings,
    )
    try:
        got: list[bytes] = []
        deadline = time.monotonic() + TIMEOUT_S
        while len(got) < count and time.monotonic() < deadline:
            for batch in consumer.poll(timeout_ms=500, max_records=count - len(got)).values():
                got.extend(r.value for r in batch)
        consumer.commit()
        return got
    finally:
        consumer.close()


@pytest.mark.parametrize("api_version", [(0, 10), (0, 9)], ids=["0.10", "0.9"])
def test_a_classic_group_commits_and_resumes_across_the_bridge(
    bridged: GatewayProcess, unique_topic: str, api_version: tuple[int, int]
) -> None:
    DRIVERS[0].create_topic(bridged.bootstrap, unique_topic)
    first = [(None, b"first-%d" % i) for i in range(100)]
    second = [(None, b"second-%d" % i) for i in range(100)]
    old = old_client(api_version)
    assert old.produce_records(bridged.bootstrap, unique_topic, first) == 100
    group = f"g-{unique_topic}"
    assert _group_read(bridged.bootstrap, unique_topic, group, 100, api_version=api_version) == [
        v for _, v in first
    ]
    assert old.produce_records(bridged.bootstrap, unique_topic, second) == 100
    # A restart: the group's committed offset, read back, is where the second read starts.
    assert _group_read(bridged.bootstrap, unique_topic, group, 100, api_version=api_version) == [
        v for _, v in second
    ]
    assert '"request.rejected"' not in bridged.log_text()


def test_a_policy_refuses_one_client_and_bridges_another(
    gateway_factory: GatewayFactory,
    apache_kafka: ApacheKafkaBroker,
    unique_topic: str,
    tmp_path: Path,
) -> None:
    policy = 'policy = ["client_id=^legacy- -> refuse"]'
    gw = bridging(gateway_factory, apache_kafka, tmp_path, policy)
    DRIVERS[0].create_topic(gw.bootstrap, unique_topic)
    sent = [(b"k", b"v%d" % i) for i in range(10)]
    assert (
        old_client((0, 10), client_id="app").produce_records(gw.bootstrap, unique_topic, sent) == 10
    )
    assert_refused(gw.bootstrap, unique_topic, client_id="legacy-1")  # as Kafka 4 refuses it
    assert DRIVERS[0].consume_assigned(gw.bootstrap, unique_topic, 10) == [v for _, v in sent]
    text = metrics_text(gw)
    refused_line = next(
        line
        for line in text.splitlines()
        if line.startswith("kafka_gateway_rejected_requests_total{")
        and 'api="Produce"' in line
        and 'api_version="2"' in line
    )
    assert float(refused_line.rsplit(" ", 1)[1]) >= 1
    assert 'kafka_gateway_bridged_requests_total{api="Produce",from_version="2"' in text


def test_librdkafka_0_8_2_commits_through_offset_commit_v1(
    bridged: GatewayProcess, unique_topic: str
) -> None:
    """librdkafka with fallback 0.8.2 commits an assigned partition's offset with
    OffsetCommit v1 (removed by Kafka 4.0: bridged to v2) and reads it back (v1)."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    DRIVERS[0].create_topic(bridged.bootstrap, unique_topic)
    DRIVERS[0].produce(bridged.bootstrap, unique_topic, [b"a", b"b", b"c"], "all")
    conf = {
        "bootstrap.servers": bridged.bootstrap,
        "group.id": f"g-{unique_topic}",
        "enable.auto.commit": False,
        "api.version.request": False,
        "broker.version.fallback": "0.8.2",
    }
    consumer = Consumer(conf)
    try:
        consumer.assign([TopicPartition(unique_topic, 0, OFFSET_BEGINNING)])
        got: list[bytes] = []
        deadline = time.monotonic() + TIMEOUT_S
        while len(got) < 3 and time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is not None and not message.error():
                got.append(message.value())
        assert got == [b"a", b"b", b"c"]
        (committed,) = consumer.commit(asynchronous=False) or []
        assert committed.error is None and committed.offset == 3
    finally:
        consumer.close()
    again = Consumer(conf)
    try:
        (stored,) = again.committed([TopicPartition(unique_topic, 0)], timeout=TIMEOUT_S)
        assert stored.offset == 3
    finally:
        again.close()
    assert 'api="OffsetCommit",from_version="1",to_version="2"' in metrics_text(bridged)


def test_the_policy_file_is_reloaded_on_sighup(
    gateway_factory: GatewayFactory,
    apache_kafka: ApacheKafkaBroker,
    unique_topic: str,
    tmp_path: Path,
) -> None:
    from tests.integration.test_reload import reloads

    rules = tmp_path / "bridge-policy.txt"
    rules.write_text("client_id=^legacy- -> refuse\n")
    gw = bridging(gateway_factory, apache_kafka, tmp_path, f'policy_file = "{rules}"')
    DRIVERS[0].create_topic(gw.bootstrap, unique_topic)
    assert_refused(gw.bootstrap, unique_topic, client_id="legacy-1")
    rules.write_text("# every client is bridged now\n")
    reloads(gw, "ok", 1)
    sent = [(b"k", b"v%d" % i) for i in range(10)]
    legacy = old_client((0, 10), client_id="legacy-1")
    assert legacy.produce_records(gw.bootstrap, unique_topic, sent) == 10
    assert '"bridge_policy_changed": true' in gw.log_text()
