"""Fetch v16+ responses with KIP-951 NodeEndpoints, streamed and gathered, on real sockets.

Tansu answers every Fetch v16+ with an *empty* NodeEndpoints list; a real Kafka fills it
after a leader change. No real part here can be made to send it, so ``NodeEndpointsTap``
(a fault injector, the only fake in this file) relays between the gateway and Tansu and
puts one endpoint for the broker into each Fetch v16+ response, with a host name of a
chosen length. Everything else is real: Tansu, the gateway process, librdkafka.

What is checked: a large (streamed) response keeps its length prefix, so a rewritten
NodeEndpoints that comes out shorter is padded with an unknown tag, and one that would
come out longer is dropped; a small (gathered) response is rewritten freely. In every
case the broker's own host never reaches the client, the records arrive byte for byte,
and librdkafka consumes through it all.
"""

from __future__ import annotations

import dataclasses
import datetime
import socket
import struct
import threading
import urllib.request
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from kio.index import load_response_schema
from kio.schema.fetch.v16.request import FetchPartition, FetchRequest, FetchTopic
from kio.schema.fetch.v16.response import NodeEndpoint
from kio.schema.metadata.v12.request import MetadataRequest, MetadataRequestTopic
from kio.static.primitive import i32
from prometheus_client.parser import text_string_to_metric_families

from gateway.wire import strip_unknown_tags
from tests.harness import LOOPBACK, TANSU_NODE_ID, Broker, GatewayProcess, KafkaConnection
from tests.harness.kafka_wire import decode, encode, read_tagged_fields, skip_tagged_fields

FETCH = 1
FETCH_VERSION = 16
LARGE_RECORDS = 12
LARGE_RECORD_BYTES = 100 * 1024
#: The gateway streams Fetch responses from this size on (gateway.server.proxy).
STREAM_FROM = 64 * 1024
PAD_TAG = 10_000  # gateway.interceptors.addresses.PAD_TAGS[0]


class NodeEndpointsTap:
    """Relay that sets NodeEndpoints in every Fetch v16+ response (fault injector)."""

    def __init__(self, upstream: tuple[str, int], host: str) -> None:
        self.upstream = upstream
        self.host = host
        self.injected = 0
        self._server = socket.create_server(("127.0.0.1", 0))
        self.port = self._server.getsockname()[1]
        self._sockets: list[socket.socket] = [self._server]
        threading.Thread(target=self._accept, daemon=True).start()

    def close(self) -> None:
        for sock in self._sockets:
            sock.close()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._server.accept()
            except OSError:
                return
            upstream = socket.create_connection(self.upstream)
            self._sockets += [client, upstream]
            awaited: dict[int, tuple[int, int]] = {}
            threading.Thread(target=self._requests, args=(client, upstream, awaited)).start()
            threading.Thread(target=self._responses, args=(upstream, client, awaited)).start()

    @staticmethod
    def _frame(sock: socket.socket) -> bytes | None:
        def exact(size: int) -> bytes | None:
            buf = bytearray()
            while len(buf) < size:
                try:
                    chunk = sock.recv(size - len(buf))
                except OSError:
                    return None
                if not chunk:
                    return None
                buf += chunk
            return bytes(buf)

        head = exact(4)
        if head is None:
            return None
        return exact(struct.unpack(">i", head)[0])

    def _requests(self, src: socket.socket, dst: socket.socket, awaited: dict) -> None:
        while (payload := self._frame(src)) is not None:
            key, version, correlation_id = struct.unpack_from(">hhi", payload)
            awaited[correlation_id] = (key, version)  # before the broker can answer
            try:
                dst.sendall(struct.pack(">i", len(payload)) + payload)
            except OSError:
                return

    def _responses(self, src: socket.socket, dst: socket.socket, awaited: dict) -> None:
        while (payload := self._frame(src)) is not None:
            (correlation_id,) = struct.unpack_from(">i", payload)
            key, version = awaited.pop(correlation_id, (-1, -1))
            if key == FETCH and version >= 16:
                payload = self._inject(payload, version)
            try:
                dst.sendall(struct.pack(">i", len(payload)) + payload)
            except OSError:
                return

    def _inject(self, payload: bytes, version: int) -> bytes:
        offset = skip_tagged_fields(payload, 4)
        schema = load_response_schema(FETCH, version)
        response = decode(schema, payload[offset:])
        # kio's v16 NodeEndpoint encodes the same as the v17 one (same fields).
        endpoint = NodeEndpoint(
            node_id=TANSU_NODE_ID, host=self.host, port=i32(self.upstream[1]), rack=None
        )
        response = dataclasses.replace(response, node_endpoints=(endpoint,))
        self.injected += 1
        return payload[:offset] + encode(response)


@pytest.fixture
def tapped(
    request: pytest.FixtureRequest, broker: Broker, gateway_factory: Any
) -> Iterator[tuple[NodeEndpointsTap, GatewayProcess]]:
    if broker.external:
        pytest.skip("the tap injects what Tansu leaves out; an external broker is not Tansu")
    tap = NodeEndpointsTap((broker.host, broker.port), request.param)
    try:
        yield tap, gateway_factory(upstream=f"127.0.0.1:{tap.port}", metrics=True)
    finally:
        tap.close()


def _produce(bootstrap: str, topic: str, values: list[bytes]) -> None:
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(15)
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5})
    for value in values:
        producer.produce(topic, value=value, partition=0)
    assert producer.flush(15) == 0


def _topic_id(conn: KafkaConnection, topic: str) -> uuid.UUID:
    metadata = conn.request_entity(
        MetadataRequest(
            topics=(MetadataRequestTopic(topic_id=None, name=topic),),
            allow_auto_topic_creation=False,
            include_topic_authorized_operations=False,
        )
    )
    return metadata.topics[0].topic_id


def _fetch(conn: KafkaConnection, topic_id: uuid.UUID) -> tuple[bytes, Any, dict[int, bytes]]:
    """(the raw frame payload, the response as a client that skips unknown tags reads
    it, the top-level tags as sent)."""
    request = FetchRequest(
        max_wait=datetime.timedelta(milliseconds=100),
        min_bytes=1,
        max_bytes=i32(16 << 20),
        topics=(
            FetchTopic(
                topic_id=topic_id,
                partitions=(
                    FetchPartition(
                        partition=i32(0), fetch_offset=0, partition_max_bytes=i32(16 << 20)
                    ),
                ),
            ),
        ),
        forgotten_topics_data=(),
    )
    response = conn.request(FETCH, FETCH_VERSION, request, timeout=10)
    body = response.body
    schema = load_response_schema(FETCH, FETCH_VERSION)
    decoded = decode(schema, strip_unknown_tags(FETCH, FETCH_VERSION, body))
    # The top-level tagged section follows the non-tagged part, which re-encoding the
    # response without tags measures (the encoding ends in one byte: no tags).
    bare = encode(dataclasses.replace(decoded, node_endpoints=()))
    tags, _ = read_tagged_fields(body, len(bare) - 1)
    return response.frame, decoded, tags


def _records(response: Any) -> list[bytes | None]:
    return [p.records for t in response.responses for p in t.partitions]


LONG_HOST = "a-long-broker-hostname.internal"  # the rewrite shrinks: padded
SHORT_HOST = "b"  # the rewrite would grow: dropped
# The rewrite shrinks by 1 or 2 bytes, less than the smallest pad: a wider tag count.
NEAR_HOSTS = ["h" * (len(LOOPBACK) + 1), "h" * (len(LOOPBACK) + 2)]  # gateways advertise LOOPBACK


@pytest.mark.parametrize("tapped", [LONG_HOST, *NEAR_HOSTS], indirect=True)
def test_streamed_fetch_pads_a_shorter_node_endpoints(
    tapped: tuple[NodeEndpointsTap, GatewayProcess], broker: Broker, unique_topic: str
) -> None:
    tap, gateway = tapped
    values = [bytes([i]) * LARGE_RECORD_BYTES for i in range(LARGE_RECORDS)]
    _produce(gateway.bootstrap, unique_topic, values)
    with KafkaConnection(gateway.host, gateway.port) as conn:
        topic_id = _topic_id(conn, unique_topic)
        frame, response, tags = _fetch(conn, topic_id)
    assert len(frame) >= STREAM_FROM and tap.injected >= 1
    assert [(e.node_id, e.host, e.port) for e in response.node_endpoints] == [
        (TANSU_NODE_ID, gateway.host, gateway.port)
    ]
    # Same length as the broker's section: padded, or with a wider tag count.
    assert (PAD_TAG in tags) == (tap.host == LONG_HOST)
    assert tap.host.encode() not in frame
    assert _dropped_counter(gateway) == 0
    with KafkaConnection(broker.host, broker.port) as direct:
        _, from_broker, _ = _fetch(direct, topic_id)
    assert _records(response) == _records(from_broker)
    assert "response.rewrite_failed" not in gateway.log_text()


@pytest.mark.parametrize("tapped", [SHORT_HOST], indirect=True)
def test_streamed_fetch_drops_a_node_endpoints_that_would_grow(
    tapped: tuple[NodeEndpointsTap, GatewayProcess], unique_topic: str
) -> None:
    tap, gateway = tapped
    values = [bytes([i]) * LARGE_RECORD_BYTES for i in range(LARGE_RECORDS)]
    _produce(gateway.bootstrap, unique_topic, values)
    with KafkaConnection(gateway.host, gateway.port) as conn:
        frame, response, tags = _fetch(conn, _topic_id(conn, unique_topic))
    assert len(frame) >= STREAM_FROM and tap.injected >= 1
    assert response.node_endpoints == ()
    assert 0 not in tags and PAD_TAG in tags
    assert _dropped_counter(gateway) >= 1


def _dropped_counter(gateway: GatewayProcess) -> float:
    text = urllib.request.urlopen(gateway.metrics_url, timeout=5).read().decode()
    return sum(
        sample.value
        for family in text_string_to_metric_families(text)
        if family.name == "kafka_gateway_node_endpoints_dropped"
        for sample in family.samples
        if sample.name.endswith("_total") and sample.labels == {"api": "Fetch"}
    )


@pytest.mark.parametrize("tapped", [SHORT_HOST], indirect=True)
def test_small_fetch_is_gathered_and_rewritten_whatever_the_length(
    tapped: tuple[NodeEndpointsTap, GatewayProcess], unique_topic: str
) -> None:
    tap, gateway = tapped
    _produce(gateway.bootstrap, unique_topic, [b"small"])
    with KafkaConnection(gateway.host, gateway.port) as conn:
        frame, response, tags = _fetch(conn, _topic_id(conn, unique_topic))
    assert len(frame) < STREAM_FROM and tap.injected >= 1
    assert [(e.host, e.port) for e in response.node_endpoints] == [(gateway.host, gateway.port)]
    assert PAD_TAG not in tags


@pytest.mark.parametrize("tapped", [LONG_HOST, *NEAR_HOSTS, SHORT_HOST], indirect=True)
def test_librdkafka_consumes_through_padded_and_dropped_node_endpoints(
    tapped: tuple[NodeEndpointsTap, GatewayProcess], unique_topic: str
) -> None:
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    tap, gateway = tapped
    values = [f"{i}/".encode() + bytes([i]) * LARGE_RECORD_BYTES for i in range(LARGE_RECORDS)]
    _produce(gateway.bootstrap, unique_topic, values)
    consumer = Consumer(
        {
            "bootstrap.servers": gateway.bootstrap,
            "group.id": f"unused-{uuid.uuid4().hex[:8]}",
            "enable.auto.commit": False,
        }
    )
    got: list[bytes] = []
    try:
        consumer.assign([TopicPartition(unique_topic, 0, OFFSET_BEGINNING)])
        for _ in range(60):
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            assert not msg.error(), msg.error()
            got.append(msg.value())
            if len(got) == len(values):
                break
    finally:
        consumer.close()
    assert got == values
    assert tap.injected >= 1
    assert "response.rewrite_failed" not in gateway.log_text()
