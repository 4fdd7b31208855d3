"""The gateway core on the wire: pipelining, acks=0, limits, outages, client aborts.

Raw sockets through a real gateway process in front of a real Tansu broker.
"""

from __future__ import annotations

import datetime
import io
import time

import pytest
from confluent_kafka.admin import AdminClient, NewTopic
from kio.records.schema import NewRecordBatch, Record
from kio.records.writers import write_batch
from kio.schema.api_versions.v3.request import ApiVersionsRequest
from kio.schema.metadata.v9.request import MetadataRequest
from kio.schema.produce.v7.request import PartitionProduceData, ProduceRequest, TopicProduceData
from kio.static.primitive import i8, i16, i32, i64

from tests.harness.kafka_wire import ConnectionClosed, KafkaConnection
from tests.harness.ports import port_accepts

NOW = datetime.datetime.now(datetime.UTC)


def record_batch(value: bytes) -> bytes:
    batch = NewRecordBatch(
        producer_id=i64(-1),
        producer_epoch=i16(-1),
        base_sequence=i32(-1),
        attributes=i16(0),
        records=(
            Record(
                attributes=i8(0), timestamp=NOW, offset=i64(0), key=None, value=value, headers=()
            ),
        ),
    )
    buf = io.BytesIO()
    write_batch(buf, batch)
    return buf.getvalue()


def produce(topic: str, acks: int, value: bytes) -> ProduceRequest:
    return ProduceRequest(
        transactional_id=None,
        acks=i16(acks),
        timeout=datetime.timedelta(seconds=5),
        topic_data=(
            TopicProduceData(
                name=topic,
                partition_data=(PartitionProduceData(index=i32(0), records=record_batch(value)),),
            ),
        ),
    )


def create_topic(bootstrap: str, topic: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics([NewTopic(topic, 1, 1)]).values():
        future.result(timeout=20)


def test_pipelined_mixed_requests_get_each_response_once_in_order(gateway, unique_topic):
    """≥1000 requests on one connection, acks=0 produces among them: every awaited
    response arrives once, in order, and nothing arrives for acks=0 (Tansu does answer
    those; the gateway must drop them)."""
    create_topic(f"127.0.0.1:{gateway.port}", unique_topic)
    conn = KafkaConnection("127.0.0.1", gateway.port, timeout=20)
    metadata = MetadataRequest(
        topics=None,
        allow_auto_topic_creation=False,
        include_cluster_authorized_operations=False,
        include_topic_authorized_operations=False,
    )
    versions = ApiVersionsRequest(client_software_name="pipeline", client_software_version="1")
    expected: list[int] = []
    for i in range(1200):
        kind = i % 4
        if kind == 0:
            expected.append(conn.send(3, 9, metadata))
        elif kind == 1:
            expected.append(conn.send(18, 3, versions))
        elif kind == 2:
            conn.send(0, 7, produce(unique_topic, 0, b"fire-and-forget %d" % i))
        else:
            expected.append(conn.send(0, 7, produce(unique_topic, -1, b"acked %d" % i)))
    received = [conn.recv(flexible_header=False).correlation_id for _ in expected]
    assert received == expected
    with pytest.raises(TimeoutError):
        conn.recv_frame(timeout=1.0)  # nothing extra: the acks=0 answers were dropped
    # Recognised as answers to acks=0 produces (by order), so not logged as uncorrelated.
    assert "response.dropped_uncorrelated" not in gateway.log_text()


def test_oversize_frame_closes_only_that_connection(gateway_factory):
    gw = gateway_factory("--max-frame-bytes", "4096")
    conn = KafkaConnection("127.0.0.1", gw.port)
    conn.send_frame(b"\x00\x03\x00\x09\x00\x00\x00\x01" + b"\x00" * 5000)
    with pytest.raises(ConnectionClosed):
        conn.recv_frame(timeout=5)
    gw.wait_for_log("oversize_frame")
    other = KafkaConnection("127.0.0.1", gw.port)
    versions = ApiVersionsRequest(client_software_name="after", client_software_version="1")
    assert other.request(18, 3, versions).body[:2] == b"\x00\x00"


def test_upstream_outage_closes_clients_cleanly_and_recovers(gateway_factory, isolated_broker):
    gw = gateway_factory(upstream=isolated_broker.bootstrap)
    versions = ApiVersionsRequest(client_software_name="outage", client_software_version="1")
    conn = KafkaConnection("127.0.0.1", gw.port)
    conn.request(18, 3, versions)
    isolated_broker.stop()
    with pytest.raises(ConnectionClosed):
        conn.recv_frame(timeout=10)  # the pair closes with its upstream
    down = KafkaConnection("127.0.0.1", gw.port)
    with pytest.raises(ConnectionClosed):
        down.request(18, 3, versions, timeout=15)  # broker down: closed, not hung
    gw.wait_for_log("upstream.connect_failed")
    assert gw.running
    isolated_broker.start()
    again = KafkaConnection("127.0.0.1", gw.port)
    assert again.request(18, 3, versions).body[:2] == b"\x00\x00"


def test_client_abort_mid_request_leaves_gateway_serving(gateway):
    conn = KafkaConnection("127.0.0.1", gateway.port)
    versions = ApiVersionsRequest(client_software_name="abort", client_software_version="1")
    conn.request(18, 3, versions)
    # A frame announcing 1000 bytes, then only 20 of them, then the socket goes.
    conn._sock.sendall(b"\x00\x00\x03\xe8" + b"\x00\x03\x00\x09\x00\x00\x00\x07" + b"\x00" * 12)
    time.sleep(0.2)
    conn._sock.close()
    gateway.wait_for_log("client_aborted_mid_request")
    assert port_accepts("127.0.0.1", gateway.port)
    other = KafkaConnection("127.0.0.1", gateway.port)
    assert other.request(18, 3, versions).body[:2] == b"\x00\x00"
