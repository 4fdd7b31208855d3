"""Clients that speak the protocol versions Kafka 4.0 removed (KIP-896), as test parts.

Each is a real client library pinned to an old protocol, as they are found in the field:
kafka-python with ``api_version=(0, 10)`` or ``(0, 9)`` (no ApiVersions; Produce v2/v1,
Fetch v2/v1, Metadata v0/v1, ListOffsets v0), and librdkafka (confluent-kafka) with
``api.version.request=false`` and ``broker.version.fallback=0.9.0`` (the same old
versions, chosen from the fallback release). Kafka 3.9 serves them; Kafka 4.x refuses
them. Kept free of pytest.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Any

TIMEOUT_S = 30.0

Record = tuple[bytes | None, bytes]  # (key, value)
Read = tuple[int, bytes | None, bytes]  # (offset, key, value)


@dataclass(frozen=True)
class OldClient:
    """One old-protocol client: ``produce`` then ``consume`` a topic's partition 0."""

    name: str
    library: str  # "kafka-python" or "librdkafka"
    settings: dict[str, Any] = field(default_factory=dict)  # the producer's and consumer's
    compression: str | None = None  # the producer's codec; None: the library's default

    def produce(self, bootstrap: str, topic: str, values: list[bytes]) -> int:
        """Send ``values`` with acks=all; the count the broker acknowledged."""
        return self.produce_records(bootstrap, topic, [(None, v) for v in values])

    def produce_records(self, bootstrap: str, topic: str, records: list[Record]) -> int:
        """Send keyed ``records`` with acks=all; the count the broker acknowledged."""
        if self.library == "kafka-python":
            settings = dict(self.settings)
            if self.compression is not None:
                settings["compression_type"] = self.compression
            return _kafka_python_produce(bootstrap, topic, records, settings)
        settings = dict(self.settings)
        if self.compression is not None:
            settings["compression.codec"] = self.compression
        return _librdkafka_produce(bootstrap, topic, records, settings)

    def consume(self, bootstrap: str, topic: str, count: int) -> list[bytes]:
        """Partition 0 from its beginning, until ``count`` values or the timeout."""
        return [v for _, _, v in self.consume_records(bootstrap, topic, count)]

    def consume_records(
        self, bootstrap: str, topic: str, count: int, linger_s: float = 0.0
    ) -> list[Read]:
        """Partition 0 from its beginning, as (offset, key, value), until ``count`` records
        or the timeout; then ``linger_s`` longer, for any beyond ``count`` (a duplicate)."""
        if self.library == "kafka-python":
            return _kafka_python_consume(bootstrap, topic, count, linger_s, self.settings)
        return _librdkafka_consume(bootstrap, topic, count, linger_s, self.settings)


OLD_CLIENTS = (
    OldClient("kafka-python-0.10", "kafka-python", {"api_version": (0, 10)}),
    OldClient("kafka-python-0.9", "kafka-python", {"api_version": (0, 9)}),
    OldClient(
        "librdkafka-fallback-0.9.0",
        "librdkafka",
        {"api.version.request": False, "broker.version.fallback": "0.9.0"},
    ),
)


def _kafka_python_produce(
    bootstrap: str, topic: str, records: list[Record], settings: dict[str, Any]
) -> int:
    from kafka import KafkaProducer

    producer = KafkaProducer(
        bootstrap_servers=bootstrap,
        acks="all",
        request_timeout_ms=int(TIMEOUT_S * 1000),
        max_block_ms=int(TIMEOUT_S * 1000),
        reconnect_backoff_max_ms=1000,
        **settings,
    )
    try:
        futures = [producer.send(topic, key=k, value=v, partition=0) for k, v in records]
        producer.flush(timeout=TIMEOUT_S)
        acknowledged = 0
        for future in futures:
            try:
                future.get(timeout=1)
                acknowledged += 1
            except Exception:  # a refused or timed-out record: counted as not delivered
                pass
        return acknowledged
    finally:
        producer.close(timeout=5)


def _kafka_python_consume(
    bootstrap: str, topic: str, count: int, linger_s: float, settings: dict[str, Any]
) -> list[Read]:
    got = kafka_python_records(bootstrap, topic, count, linger_s, settings)
    return [(r.offset, r.key, r.value) for r in got]


def kafka_python_records(
    bootstrap: str, topic: str, count: int, linger_s: float, settings: dict[str, Any]
) -> list[Any]:
    """Partition 0 from its beginning as kafka-python's ConsumerRecords (offsets, keys,
    values, timestamps and their type), until ``count`` or the timeout, then ``linger_s``."""
    from kafka import KafkaConsumer, TopicPartition

    consumer = KafkaConsumer(
        bootstrap_servers=bootstrap,
        enable_auto_commit=False,
        request_timeout_ms=int(TIMEOUT_S * 1000),
        reconnect_backoff_max_ms=1000,
        **settings,
    )
    try:
        partition = TopicPartition(topic, 0)
        consumer.assign([partition])
        consumer.seek_to_beginning(partition)
        got: list[Any] = []
        deadline = time.monotonic() + TIMEOUT_S
        while len(got) < count and time.monotonic() < deadline:
            for records in consumer.poll(timeout_ms=500).values():
                got.extend(records)
        if linger_s:
            for records in consumer.poll(timeout_ms=int(linger_s * 1000)).values():
                got.extend(records)
        return got
    finally:
        consumer.close()


def _librdkafka_produce(
    bootstrap: str, topic: str, records: list[Record], settings: dict[str, Any]
) -> int:
    from confluent_kafka import Producer

    acknowledged = 0

    def on_delivery(err: object, _msg: object) -> None:
        nonlocal acknowledged
        if err is None:
            acknowledged += 1

    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "acks": "all",
            "message.timeout.ms": int(TIMEOUT_S * 1000),
            **settings,
        }
    )
    for key, value in records:
        producer.produce(topic, key=key, value=value, partition=0, on_delivery=on_delivery)
    producer.flush(TIMEOUT_S + 5)
    return acknowledged


def _librdkafka_consume(
    bootstrap: str, topic: str, count: int, linger_s: float, settings: dict[str, Any]
) -> list[Read]:
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"old-{topic}",  # required by the API; assign() joins no group
            "enable.auto.commit": False,
            **settings,
        }
    )
    try:
        consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
        got: list[Read] = []

        def take(seconds: float, enough: float) -> None:
            deadline = time.monotonic() + seconds
            while len(got) < enough and time.monotonic() < deadline:
                message = consumer.poll(0.5)
                if message is not None and message.error() is None:
                    got.append((message.offset(), message.key(), message.value()))

        take(TIMEOUT_S, count)
        take(linger_s, math.inf)
        return got
    finally:
        consumer.close()
