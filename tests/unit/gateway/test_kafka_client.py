"""The gateway's own Kafka client (gateway.kafka_client, public as gateway.wire): the
probes it makes of a broker, against a fake broker on a loopback socket."""

from __future__ import annotations

import asyncio
import datetime
import socket
import struct
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import pytest
from kio.schema.api_versions.v0.response import ApiVersion as ApiVersionV0
from kio.schema.api_versions.v0.response import ApiVersionsResponse as ApiVersionsV0
from kio.schema.api_versions.v3.response import ApiVersion as ApiVersionV3
from kio.schema.api_versions.v3.response import ApiVersionsResponse as ApiVersionsV3
from kio.schema.errors import ErrorCode
from kio.schema.metadata.v12.response import MetadataResponse, MetadataResponseBroker
from kio.static.primitive import i16, i32

from gateway.wire import (
    API_VERSIONS,
    METADATA,
    KafkaConnection,
    WrongAnswer,
    api_versions_request,
    encode_response,
    frame,
    metadata_version,
    parse_request_header,
    probe_api_versions,
    probe_metadata,
    request_header,
)

RANGES = {API_VERSIONS: (0, 3), METADATA: (1, 12)}

Answer = Callable[[int, int, int], bytes | None]


def versions_v0(error: ErrorCode) -> bytes:
    keys = tuple(
        ApiVersionV0(api_key=i16(k), min_version=i16(a), max_version=i16(b))
        for k, (a, b) in RANGES.items()
    )
    return encode_response(ApiVersionsV0(error_code=error, api_keys=keys))


def versions_v3() -> bytes:
    keys = tuple(
        ApiVersionV3(api_key=i16(k), min_version=i16(a), max_version=i16(b))
        for k, (a, b) in RANGES.items()
    )
    return encode_response(
        ApiVersionsV3(
            error_code=ErrorCode.none,
            api_keys=keys,
            throttle_time=datetime.timedelta(0),
            supported_features=(),
            finalized_features_epoch=-1,
            finalized_features=(),
            zk_migration_ready=False,
        )
    )


def metadata_v12() -> bytes:
    broker = MetadataResponseBroker(node_id=i32(7), host="b7.example", port=i32(9097), rack=None)
    return encode_response(
        MetadataResponse(
            throttle_time=datetime.timedelta(0),
            brokers=(broker,),
            cluster_id="c",
            controller_id=i32(7),
            topics=(),
        )
    )


def broker_answer(key: int, version: int, correlation_id: int) -> bytes | None:
    """A broker that knows ApiVersions up to v3 (a v4 request is answered in the v0
    layout with UNSUPPORTED_VERSION, as Kafka does) and Metadata v12."""
    if key == API_VERSIONS:
        body = versions_v3() if version == 3 else versions_v0(ErrorCode.unsupported_version)
        if version == 0:
            body = versions_v0(ErrorCode.none)
        return struct.pack(">i", correlation_id) + body
    if key == METADATA and version == 12:
        return struct.pack(">i", correlation_id) + b"\x00" + metadata_v12()
    return None


@contextmanager
def fake_broker(answer: Answer) -> Iterator[tuple[int, list[tuple[int, int, str | None]]]]:
    """A one-connection-at-a-time broker on a thread; yields its port and what it was asked
    (key, version, client id)."""
    listener = socket.create_server(("127.0.0.1", 0))
    asked: list[tuple[int, int, str | None]] = []

    def serve() -> None:
        while True:
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            with conn:
                while True:
                    head = conn.recv(4, socket.MSG_WAITALL)
                    if len(head) < 4:
                        break
                    payload = conn.recv(struct.unpack(">i", head)[0], socket.MSG_WAITALL)
                    header = parse_request_header(payload)
                    asked.append((header.api_key, header.api_version, header.client_id))
                    reply = answer(header.api_key, header.api_version, header.correlation_id)
                    if reply is None:
                        break
                    conn.sendall(frame(reply))

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield listener.getsockname()[1], asked
    finally:
        listener.close()


def test_the_probe_asks_newest_first_and_takes_the_first_version_answered() -> None:
    with fake_broker(broker_answer) as (port, asked):
        ranges, _features = asyncio.run(probe_api_versions("127.0.0.1", port))
    assert ranges == RANGES
    assert asked == [(API_VERSIONS, 4, "kafka-gateway"), (API_VERSIONS, 3, "kafka-gateway")]


def test_the_metadata_probe_reads_the_brokers_at_the_newest_version_offered() -> None:
    with fake_broker(broker_answer) as (port, asked):
        metadata = asyncio.run(probe_metadata("127.0.0.1", port, timeout_s=5))
    assert [(int(b.node_id), b.host, int(b.port)) for b in metadata.brokers] == [
        (7, "b7.example", 9097)
    ]
    assert [(key, version) for key, version, _ in asked] == [(API_VERSIONS, 0), (METADATA, 12)]


def test_an_answer_to_another_request_is_refused() -> None:
    def wrong(key: int, version: int, correlation_id: int) -> bytes | None:
        return broker_answer(key, version, correlation_id + 1)

    with fake_broker(wrong) as (port, _asked):
        with pytest.raises(WrongAnswer):
            asyncio.run(probe_api_versions("127.0.0.1", port))
        with (
            KafkaConnection.open("127.0.0.1", port, timeout_s=5) as conn,
            pytest.raises(WrongAnswer),
        ):
            conn.request(api_versions_request(3, "tool", "1"))


def test_the_blocking_connection_names_its_client_and_decodes_the_answer() -> None:
    with (
        fake_broker(broker_answer) as (port, asked),
        KafkaConnection.open("127.0.0.1", port, timeout_s=5, client_id="tool") as conn,
    ):
        answer = conn.request(api_versions_request(3, "tool", "1"))
    assert {int(k.api_key): (int(k.min_version), int(k.max_version)) for k in answer.api_keys} == (
        RANGES
    )
    assert asked == [(API_VERSIONS, 3, "tool")]


def test_request_headers_follow_the_version_unless_told() -> None:
    assert request_header(API_VERSIONS, 0, 5, "c") == struct.pack(">hhih", 18, 0, 5, 1) + b"c"
    assert request_header(API_VERSIONS, 3, 5, "c") == struct.pack(">hhih", 18, 3, 5, 1) + b"c\0"
    assert request_header(METADATA, 12, 5, None, header_version=1) == struct.pack(
        ">hhih", 3, 12, 5, -1
    )
    assert request_header(999, 0, 5, "c") == struct.pack(">hhih", 999, 0, 5, 1) + b"c"


def test_metadata_version_is_the_newest_both_sides_read_never_v0() -> None:
    assert metadata_version({METADATA: (0, 13)}) == 12
    assert metadata_version({METADATA: (0, 4)}) == 4
    assert metadata_version({METADATA: (0, 0)}) is None
    assert metadata_version({}) is None
