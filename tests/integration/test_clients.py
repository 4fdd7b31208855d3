"""Real Kafka clients through the gateway, against a broker advertising an unresolvable host.

The broker (Tansu) listens on 127.0.0.1 but tells clients to use
``unreachable.invalid:<port>``. Every client below bootstraps from the gateway and then
follows the addresses it is given (Metadata leader, controller, group coordinator,
DescribeCluster). So each of these tests passes only if the gateway rewrote *every*
address it forwarded to point back at itself; a missed one makes the client fail fast
with a DNS error. ``test_premise_*`` check that premise without a gateway.

Three client stacks with independent protocol code are covered: librdkafka (via
confluent-kafka), kafka-python and aiokafka. Each driver uses short timeouts so a broken
gateway fails a test in seconds instead of hanging. Group tests set low session and
rebalance timeouts: with librdkafka defaults a group join on Tansu takes ~20 s.

Client libraries also log (at ERROR) protocol trouble they recover from, for example a
response with an unknown correlation id, which Tansu sends for acks=0 Produce and a
gateway must swallow. Tests fail on such log records too (``client_errors``).
"""

from __future__ import annotations

import asyncio
import logging
import re
import subprocess
import time
import urllib.request
import uuid
from collections.abc import Coroutine, Iterator
from dataclasses import dataclass
from typing import Any, Literal, Self, TypeVar

import pytest
from kio.schema.metadata.v12.request import MetadataRequest
from prometheus_client.parser import text_string_to_metric_families

from tests.conftest import require_tool
from tests.harness import (
    UNREACHABLE_HOST,
    Broker,
    GatewayProcess,
    KafkaConnection,
)

Acks = Literal["all", 0]
T = TypeVar("T")

#: Upper bound for one client operation (connect, create, produce, fetch, describe).
OP_TIMEOUT_S = 10.0
#: Upper bound for joining a consumer group and reading from it.
GROUP_TIMEOUT_S = 30.0
#: Group timings small enough for a test, large enough for a 2-core CI machine.
SESSION_TIMEOUT_MS = 6000
HEARTBEAT_INTERVAL_MS = 500
MAX_POLL_INTERVAL_MS = 10000
#: After an acks=0 round, keep the producer open this long so that a (wrong) response
#: to it reaches the client while it still reads from the connection.
STRAY_RESPONSE_WAIT_S = 0.5
#: Records for the streaming test: several Fetch responses well above the 64 KiB from
#: which the gateway streams them, within every client's default fetch sizes.
LARGE_RECORDS = 24
LARGE_RECORD_BYTES = 100 * 1024


# --------------------------------------------------------------------------------------
# One interface over three client libraries
# --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class BrokerAddress:
    node_id: int
    host: str
    port: int


class ClientDriver:
    """The handful of operations each client library must manage through the gateway."""

    name: str = "abstract"

    def __init__(self, timeout: float = OP_TIMEOUT_S) -> None:
        #: Upper bound (seconds) for one operation; group joins get GROUP_TIMEOUT_S.
        self.timeout = timeout

    def with_timeout(self, timeout: float) -> Self:
        return type(self)(timeout)

    def create_topic(self, bootstrap: str, topic: str) -> None:
        raise NotImplementedError

    def produce(self, bootstrap: str, topic: str, values: list[bytes], acks: Acks) -> None:
        """Produce *values* to partition 0 in two rounds on one producer.

        Two rounds, because a stray response to the first acks=0 request (which Kafka
        never sends) disturbs the connection while the second is under way.
        """
        raise NotImplementedError

    def consume_assigned(self, bootstrap: str, topic: str, count: int) -> list[bytes]:
        """Assign partition 0, read from the beginning until *count* values or timeout."""
        raise NotImplementedError

    def consume_group(
        self, bootstrap: str, topic: str, group: str, count: int
    ) -> tuple[list[bytes], int]:
        """Subscribe in *group*, read *count* values, commit; return values and committed."""
        raise NotImplementedError

    def describe_cluster(self, bootstrap: str) -> list[BrokerAddress]:
        raise NotImplementedError


def _deadline_loop(timeout: float) -> Iterator[float]:
    """Yield remaining seconds until *timeout* has passed."""
    deadline = time.monotonic() + timeout
    while (remaining := deadline - time.monotonic()) > 0:
        yield remaining


class ConfluentDriver(ClientDriver):
    """librdkafka through confluent-kafka; its log goes to the ``tests.librdkafka`` logger."""

    name = "confluent"

    def __init__(self, timeout: float = OP_TIMEOUT_S) -> None:
        super().__init__(timeout)
        self._logger = logging.getLogger("tests.librdkafka")

    def _conf(self, bootstrap: str, **extra: Any) -> dict[str, Any]:
        return {
            "bootstrap.servers": bootstrap,
            "socket.timeout.ms": int(self.timeout * 1000),
            "logger": self._logger,
            **extra,
        }

    def create_topic(self, bootstrap: str, topic: str) -> None:
        from confluent_kafka.admin import AdminClient, NewTopic

        admin = AdminClient(self._conf(bootstrap))
        futures = admin.create_topics(
            [NewTopic(topic, num_partitions=1, replication_factor=1)],
            operation_timeout=self.timeout,
            request_timeout=self.timeout,
        )
        futures[topic].result(timeout=self.timeout + 5)

    def produce(self, bootstrap: str, topic: str, values: list[bytes], acks: Acks) -> None:
        from confluent_kafka import KafkaError, Message, Producer

        producer = Producer(
            self._conf(
                bootstrap,
                acks=str(acks),
                **{"message.timeout.ms": int(self.timeout * 1000), "linger.ms": 5},
            )
        )
        errors: list[KafkaError] = []
        delivered: list[Message] = []

        def on_delivery(err: KafkaError | None, msg: Message) -> None:
            if err is not None:
                errors.append(err)
            else:
                delivered.append(msg)

        half = len(values) // 2
        for chunk in (values[:half], values[half:]):
            for value in chunk:
                producer.produce(topic, value=value, partition=0, on_delivery=on_delivery)
            remaining = producer.flush(self.timeout + 5)
            assert remaining == 0, f"{remaining} messages still queued after flush"
            if acks == 0:
                time.sleep(STRAY_RESPONSE_WAIT_S)
        assert not errors, f"delivery errors: {errors}"
        assert len(delivered) == len(values)
        if acks == "all":
            offsets = [m.offset() for m in delivered]
            assert offsets == sorted(offsets) and offsets[0] >= 0, offsets

    def consume_assigned(self, bootstrap: str, topic: str, count: int) -> list[bytes]:
        from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

        consumer = Consumer(
            self._conf(
                bootstrap,
                **{"group.id": f"unused-{uuid.uuid4().hex[:8]}", "enable.auto.commit": False},
            )
        )
        try:
            consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
            got: list[bytes] = []
            for remaining in _deadline_loop(self.timeout):
                msg = consumer.poll(min(remaining, 0.5))
                if msg is None:
                    continue
                if msg.error():
                    raise AssertionError(f"consume error: {msg.error()}")
                got.append(msg.value())
                if len(got) >= count:
                    break
            return got
        finally:
            consumer.close()

    def consume_group(
        self, bootstrap: str, topic: str, group: str, count: int
    ) -> tuple[list[bytes], int]:
        from confluent_kafka import Consumer, TopicPartition

        consumer = Consumer(
            self._conf(
                bootstrap,
                **{
                    "group.id": group,
                    "auto.offset.reset": "earliest",
                    "enable.auto.commit": False,
                    "session.timeout.ms": SESSION_TIMEOUT_MS,
                    "heartbeat.interval.ms": HEARTBEAT_INTERVAL_MS,
                    "max.poll.interval.ms": MAX_POLL_INTERVAL_MS,
                },
            )
        )
        try:
            consumer.subscribe([topic])
            got: list[bytes] = []
            for remaining in _deadline_loop(GROUP_TIMEOUT_S):
                msg = consumer.poll(min(remaining, 0.5))
                if msg is None:
                    continue
                if msg.error():
                    raise AssertionError(f"consume error: {msg.error()}")
                got.append(msg.value())
                if len(got) >= count:
                    break
            if got:
                consumer.commit(asynchronous=False)
            committed = consumer.committed([TopicPartition(topic, 0)], timeout=self.timeout)
            return got, committed[0].offset
        finally:
            consumer.close()

    def describe_cluster(self, bootstrap: str) -> list[BrokerAddress]:
        from confluent_kafka.admin import AdminClient

        admin = AdminClient(self._conf(bootstrap))
        result = admin.describe_cluster(request_timeout=self.timeout).result(
            timeout=self.timeout + 5
        )
        return [BrokerAddress(n.id, n.host, n.port) for n in result.nodes]


class KafkaPythonDriver(ClientDriver):
    """kafka-python (pure Python, its own protocol code and connection manager)."""

    name = "kafka-python"

    @property
    def _common(self) -> dict[str, Any]:
        return {"request_timeout_ms": int(self.timeout * 1000), "reconnect_backoff_max_ms": 1000}

    def _admin(self, bootstrap: str) -> Any:
        from kafka.admin import KafkaAdminClient

        return KafkaAdminClient(
            bootstrap_servers=bootstrap,
            bootstrap_timeout_ms=int(self.timeout * 1000),
            **self._common,
        )

    def create_topic(self, bootstrap: str, topic: str) -> None:
        from kafka.admin import NewTopic

        admin = self._admin(bootstrap)
        try:
            admin.create_topics([NewTopic(topic, num_partitions=1, replication_factor=1)])
        finally:
            admin.close()

    def produce(self, bootstrap: str, topic: str, values: list[bytes], acks: Acks) -> None:
        from kafka import KafkaProducer

        producer = KafkaProducer(
            bootstrap_servers=bootstrap,
            acks=acks,
            linger_ms=5,
            max_block_ms=int(self.timeout * 1000),
            **self._common,
        )
        try:
            half = len(values) // 2
            for chunk in (values[:half], values[half:]):
                futures = [producer.send(topic, value=v, partition=0) for v in chunk]
                producer.flush(timeout=self.timeout)
                metadata = [f.get(timeout=self.timeout) for f in futures]
                if acks == "all":
                    offsets = [m.offset for m in metadata]
                    assert offsets == sorted(offsets) and offsets[0] >= 0, offsets
                else:
                    time.sleep(STRAY_RESPONSE_WAIT_S)
        finally:
            producer.close(timeout=5)

    def consume_assigned(self, bootstrap: str, topic: str, count: int) -> list[bytes]:
        from kafka import KafkaConsumer, TopicPartition

        consumer = KafkaConsumer(
            bootstrap_servers=bootstrap, enable_auto_commit=False, **self._common
        )
        try:
            partition = TopicPartition(topic, 0)
            consumer.assign([partition])
            consumer.seek_to_beginning(partition)
            got: list[bytes] = []
            for _ in _deadline_loop(self.timeout):
                for records in consumer.poll(timeout_ms=500).values():
                    got.extend(r.value for r in records)
                if len(got) >= count:
                    break
            return got
        finally:
            consumer.close()

    def consume_group(
        self, bootstrap: str, topic: str, group: str, count: int
    ) -> tuple[list[bytes], int]:
        from kafka import KafkaConsumer, TopicPartition

        consumer = KafkaConsumer(
            topic,
            bootstrap_servers=bootstrap,
            group_id=group,
            auto_offset_reset="earliest",
            enable_auto_commit=False,
            session_timeout_ms=SESSION_TIMEOUT_MS,
            heartbeat_interval_ms=HEARTBEAT_INTERVAL_MS,
            max_poll_interval_ms=MAX_POLL_INTERVAL_MS,
            request_timeout_ms=SESSION_TIMEOUT_MS + 5000,
            reconnect_backoff_max_ms=1000,
        )
        try:
            got: list[bytes] = []
            for _ in _deadline_loop(GROUP_TIMEOUT_S):
                for records in consumer.poll(timeout_ms=500).values():
                    got.extend(r.value for r in records)
                if len(got) >= count:
                    break
            if got:
                consumer.commit()
            committed = consumer.committed(TopicPartition(topic, 0))
            return got, -1 if committed is None else int(committed)
        finally:
            consumer.close()

    def describe_cluster(self, bootstrap: str) -> list[BrokerAddress]:
        admin = self._admin(bootstrap)
        try:
            result = admin.describe_cluster()
        finally:
            admin.close()
        return [BrokerAddress(b["broker_id"], b["host"], b["port"]) for b in result["brokers"]]


def _run(coro: Coroutine[Any, Any, T], timeout: float) -> T:
    """Run an aiokafka coroutine with a hard timeout (a hung client fails, not hangs)."""
    return asyncio.run(asyncio.wait_for(coro, timeout))


class AIOKafkaDriver(ClientDriver):
    """aiokafka (asyncio; protocol code shared in part with old kafka-python)."""

    name = "aiokafka"

    @property
    def _common(self) -> dict[str, Any]:
        return {"request_timeout_ms": int(self.timeout * 1000)}

    def create_topic(self, bootstrap: str, topic: str) -> None:
        async def go() -> None:
            from aiokafka.admin import AIOKafkaAdminClient, NewTopic

            admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap, **self._common)
            await admin.start()
            try:
                response = await admin.create_topics([NewTopic(topic, 1, 1)])
            finally:
                await admin.close()
            errors = [e for e in response.topic_errors if e[1] != 0]
            assert not errors, f"CreateTopics errors: {errors}"

        _run(go(), self.timeout + 5)

    def produce(self, bootstrap: str, topic: str, values: list[bytes], acks: Acks) -> None:
        async def go() -> None:
            from aiokafka import AIOKafkaProducer

            producer = AIOKafkaProducer(
                bootstrap_servers=bootstrap, acks=acks, linger_ms=5, **self._common
            )
            await producer.start()
            try:
                half = len(values) // 2
                for chunk in (values[:half], values[half:]):
                    futures = [await producer.send(topic, v, partition=0) for v in chunk]
                    results = await asyncio.gather(*futures)
                    if acks == "all":
                        offsets = [r.offset for r in results]
                        assert offsets == sorted(offsets) and offsets[0] >= 0, offsets
                    else:
                        await asyncio.sleep(STRAY_RESPONSE_WAIT_S)
            finally:
                await producer.stop()

        _run(go(), self.timeout + 5)

    def consume_assigned(self, bootstrap: str, topic: str, count: int) -> list[bytes]:
        async def go() -> list[bytes]:
            from aiokafka import AIOKafkaConsumer, TopicPartition

            consumer = AIOKafkaConsumer(
                bootstrap_servers=bootstrap, enable_auto_commit=False, **self._common
            )
            await consumer.start()
            try:
                partition = TopicPartition(topic, 0)
                consumer.assign([partition])
                await consumer.seek_to_beginning(partition)
                got: list[bytes] = []
                for _ in _deadline_loop(self.timeout):
                    batches = await consumer.getmany(timeout_ms=500)
                    for records in batches.values():
                        got.extend(r.value for r in records if r.value is not None)
                    if len(got) >= count:
                        break
                return got
            finally:
                await consumer.stop()

        return _run(go(), self.timeout + 10)

    def consume_group(
        self, bootstrap: str, topic: str, group: str, count: int
    ) -> tuple[list[bytes], int]:
        async def go() -> tuple[list[bytes], int]:
            from aiokafka import AIOKafkaConsumer, TopicPartition

            consumer = AIOKafkaConsumer(
                topic,
                bootstrap_servers=bootstrap,
                group_id=group,
                auto_offset_reset="earliest",
                enable_auto_commit=False,
                session_timeout_ms=SESSION_TIMEOUT_MS,
                heartbeat_interval_ms=HEARTBEAT_INTERVAL_MS,
                max_poll_interval_ms=MAX_POLL_INTERVAL_MS,
                rebalance_timeout_ms=SESSION_TIMEOUT_MS,
                request_timeout_ms=SESSION_TIMEOUT_MS + 5000,
            )
            await consumer.start()
            try:
                got: list[bytes] = []
                for _ in _deadline_loop(GROUP_TIMEOUT_S):
                    batches = await consumer.getmany(timeout_ms=500)
                    for records in batches.values():
                        got.extend(r.value for r in records if r.value is not None)
                    if len(got) >= count:
                        break
                if got:
                    await consumer.commit()
                committed = await consumer.committed(TopicPartition(topic, 0))
                return got, -1 if committed is None else int(committed)
            finally:
                await consumer.stop()

        return _run(go(), GROUP_TIMEOUT_S + 15)

    def describe_cluster(self, bootstrap: str) -> list[BrokerAddress]:
        async def go() -> dict[str, Any]:
            from aiokafka.admin import AIOKafkaAdminClient

            admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap, **self._common)
            await admin.start()
            try:
                return await admin.describe_cluster()
            finally:
                await admin.close()

        result = _run(go(), self.timeout + 5)
        return [BrokerAddress(b["node_id"], b["host"], b["port"]) for b in result["brokers"]]


KAFKA_PYTHON = KafkaPythonDriver()
DRIVERS: list[ClientDriver] = [ConfluentDriver(), KAFKA_PYTHON, AIOKafkaDriver()]


# --------------------------------------------------------------------------------------
# Fixtures
# --------------------------------------------------------------------------------------


@pytest.fixture(params=DRIVERS, ids=lambda d: d.name)
def client(request: pytest.FixtureRequest) -> ClientDriver:
    """Each test runs once per client library."""
    driver: ClientDriver = request.param
    return driver


class ClientLog:
    """ERROR records the client libraries logged during the test (see ``client_log``)."""

    def __init__(self, caplog: pytest.LogCaptureFixture) -> None:
        self._caplog = caplog

    def errors(self) -> list[logging.LogRecord]:
        return [
            r
            for r in self._caplog.get_records("setup") + self._caplog.get_records("call")
            if r.levelno >= logging.ERROR and r.name.split(".")[0] in _CLIENT_LOGGER_ROOTS
        ]

    def assert_clean(self) -> None:
        errors = self.errors()
        assert not errors, "client libraries logged errors:\n" + "\n".join(
            f"{r.name} {r.levelname}: {r.getMessage()}" for r in errors
        )


_CLIENT_LOGGER_ROOTS = {"kafka", "aiokafka", "tests"}  # "tests.librdkafka" for librdkafka


@pytest.fixture
def client_log(caplog: pytest.LogCaptureFixture) -> ClientLog:
    """Client library log records; tests end with ``client_log.assert_clean()``.

    Clients recover from some protocol violations (they drop the connection and
    reconnect) but log them at ERROR; such a recovery through a gateway is still a bug.
    """
    caplog.set_level(logging.INFO, logger="tests.librdkafka")
    return ClientLog(caplog)


def _values(topic: str, tag: str, count: int) -> list[bytes]:
    """Distinct payloads, so a test can tell its records from anything else."""
    return [f"{topic}/{tag}/{i}".encode() for i in range(count)]


# --------------------------------------------------------------------------------------
# Premise: without the gateway, clients cannot work (so the tests below can fail)
# --------------------------------------------------------------------------------------


def test_premise_broker_advertises_unreachable_host(broker: Broker) -> None:
    """Tansu's own Metadata names the unresolvable host, not the port we can reach."""
    if broker.external:
        pytest.skip("external broker advertises whatever it is configured to")
    with KafkaConnection(broker.host, broker.port) as conn:
        metadata = conn.request_entity(
            MetadataRequest(
                topics=(),
                allow_auto_topic_creation=False,
                include_topic_authorized_operations=False,
            )
        )
    assert [(b.host, b.port) for b in metadata.brokers] == [(UNREACHABLE_HOST, broker.port)]


def test_premise_clients_fail_without_gateway(
    client: ClientDriver, broker: Broker, unique_topic: str
) -> None:
    """Talking to the broker directly, each client follows the bad address and fails."""
    if broker.external:
        pytest.skip("an external broker is normally reachable at its advertised address")
    impatient = client.with_timeout(3.0)
    started = time.monotonic()
    with pytest.raises(Exception):  # noqa: B017 - each library raises its own types
        impatient.create_topic(broker.bootstrap, unique_topic)
        impatient.produce(broker.bootstrap, unique_topic, [b"x", b"y"], acks="all")
    assert time.monotonic() - started < 20, "clients should fail fast, not hang"


# --------------------------------------------------------------------------------------
# Through the gateway
# --------------------------------------------------------------------------------------


def test_produce_acks_all_and_consume_assigned(
    client: ClientDriver,
    gateway: GatewayProcess,
    unique_topic: str,
    client_log: ClientLog,
) -> None:
    """Create a topic (controller), produce with acks=all and fetch it (partition leader)."""
    client.create_topic(gateway.bootstrap, unique_topic)
    values = _values(unique_topic, "acks-all", 10)
    client.produce(gateway.bootstrap, unique_topic, values, acks="all")
    assert client.consume_assigned(gateway.bootstrap, unique_topic, len(values)) == values
    client_log.assert_clean()


def test_produce_acks_0(
    client: ClientDriver,
    gateway: GatewayProcess,
    unique_topic: str,
    client_log: ClientLog,
) -> None:
    """acks=0 records arrive, and no stray Produce response reaches the client.

    Kafka never answers an acks=0 Produce; Tansu does. A gateway passing that answer on
    makes kafka-python and aiokafka log an unknown-correlation-id error and reconnect.
    """
    client.create_topic(gateway.bootstrap, unique_topic)
    values = _values(unique_topic, "acks-0", 10)
    client.produce(gateway.bootstrap, unique_topic, values, acks=0)
    # Follow-up traffic on a fresh producer proves the gateway is still in sync.
    tail = _values(unique_topic, "after", 2)
    client.produce(gateway.bootstrap, unique_topic, tail, acks="all")
    got = client.consume_assigned(gateway.bootstrap, unique_topic, len(values) + len(tail))
    client_log.assert_clean()  # first: it names the cause when records went missing
    assert got == values + tail


@pytest.mark.slow
def test_consumer_group(
    client: ClientDriver,
    gateway: GatewayProcess,
    unique_topic: str,
    client_log: ClientLog,
) -> None:
    """Join a group (FindCoordinator address), read everything, commit, read the commit."""
    client.create_topic(gateway.bootstrap, unique_topic)
    values = _values(unique_topic, "group", 6)
    client.produce(gateway.bootstrap, unique_topic, values, acks="all")
    group = f"g-{unique_topic}"
    got, committed = client.consume_group(gateway.bootstrap, unique_topic, group, len(values))
    assert got == values
    assert committed == len(values)
    client_log.assert_clean()


def test_describe_cluster(
    client: ClientDriver,
    gateway: GatewayProcess,
    broker: Broker,
    client_log: ClientLog,
) -> None:
    """Every broker a client is told about is the gateway itself (sidecar: one broker)."""
    brokers = client.describe_cluster(gateway.bootstrap)
    assert brokers, "no brokers described"
    assert {(b.host, b.port) for b in brokers} == {(gateway.host, gateway.port)}
    if not broker.external:
        assert [b.node_id for b in brokers] == [broker.node_id]
    client_log.assert_clean()


def test_large_fetches_stream_through_intact(
    client: ClientDriver,
    gateway_factory: Any,
    broker: Broker,
    unique_topic: str,
    client_log: ClientLog,
) -> None:
    """Megabytes of records arrive byte for byte when Fetch responses stream through.

    Fetch responses of 64 KiB and more are not gathered: they stream through and only
    their tagged section is held back for the NodeEndpoints rewrite (Fetch v16+). The
    gateway's request counters show which Fetch versions each client used.
    """
    gateway = gateway_factory(upstream=broker.bootstrap, metrics=True)
    client.create_topic(gateway.bootstrap, unique_topic)
    values = [
        f"{unique_topic}/large/{i}/".encode() + bytes([i % 251]) * LARGE_RECORD_BYTES
        for i in range(LARGE_RECORDS)
    ]
    client.produce(gateway.bootstrap, unique_topic, values, acks="all")
    got = client.consume_assigned(gateway.bootstrap, unique_topic, len(values))
    client_log.assert_clean()
    assert [v[:40] for v in got] == [v[:40] for v in values]
    assert got == values
    text = urllib.request.urlopen(gateway.metrics_url, timeout=5).read().decode()
    fetch_versions = {
        int(sample.labels["api_version"])
        for family in text_string_to_metric_families(text)
        if family.name == "kafka_gateway_requests"
        for sample in family.samples
        if sample.labels.get("api") == "Fetch"
    }
    assert fetch_versions, "no Fetch went through the gateway"
    if client.name == "confluent":
        # librdkafka uses the newest Fetch offered; Tansu offers up to v17, so this is
        # the streamed path with a NodeEndpoints tag in every response.
        assert max(fetch_versions) >= 16, fetch_versions
    assert "response.rewrite_failed" not in gateway.log_text()


# --------------------------------------------------------------------------------------
# kcat (the Debian package; librdkafka 2.0.x)
# --------------------------------------------------------------------------------------

_KCAT_BROKER_LINE = re.compile(r"^\s*broker (-?\d+) at (\S+):(\d+)", re.MULTILINE)


def test_kcat_metadata_listing(gateway: GatewayProcess, unique_topic: str) -> None:
    """``kcat -L`` through the gateway lists the gateway as the (only) broker.

    Debian 12's kcat links librdkafka 2.0.2, which skips (size - 1) bytes per tagged
    field. It cannot parse Tansu's ApiVersions v3 response (four tags, sent even at
    default values) and fails the same way on any response with two or more tags that
    are longer than a byte. So against Tansu this also checks that the gateway hands
    clients an ApiVersions response old librdkafka can read.
    """
    kcat = require_tool("kcat")
    KAFKA_PYTHON.create_topic(gateway.bootstrap, unique_topic)
    result = subprocess.run(
        [kcat, "-b", gateway.bootstrap, "-L", "-m", "5"],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    hint = ""
    if "ApiVersionRequest failed: Local: Read underflow" in result.stderr:
        hint = (
            "\nHINT: kcat's librdkafka (2.0.x) mis-parsed the ApiVersions v3 response: it"
            " skips size-1 bytes per tagged field, so two or more non-trivial top-level tags"
            " (Tansu's 0-3, or tags a gateway adds) misalign it."
        )
    assert result.returncode == 0, f"kcat failed:{hint}\n{result.stdout}\n{result.stderr}"
    brokers = {(host, int(port)) for _, host, port in _KCAT_BROKER_LINE.findall(result.stdout)}
    assert brokers == {(gateway.host, gateway.port)}, result.stdout
    assert f'topic "{unique_topic}"' in result.stdout
