"""unknown_api_keys: an API key the gateway does not know (a vendor's, like Confluent
Cloud's 10000) closes the connection, as Kafka does, or with ``forward`` passes through
opaque and its response comes back untouched, in request order.

Tansu, like Kafka, closes on an unknown key, so no real broker can answer one. A small
relay (``tests.harness.relay.AnsweringRelay``) stands in front of Tansu and answers key
10000 itself, passing every other request on to Tansu: the one part a real broker
cannot play.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator

import pytest
from kio.schema.metadata.v12.request import MetadataRequest

from tests.harness import LOOPBACK, Broker, GatewayProcess, KafkaConnection
from tests.harness.kafka_wire import ConnectionClosed
from tests.harness.relay import AnsweringRelay
from tests.integration.test_features import metric

VENDOR_KEY = 10000
# A request header no schema describes: the "client id" length says 0x7fff bytes that
# are not there. A gateway that parsed past the correlation id would call it malformed.
VENDOR_REQUEST = struct.pack(">hhi", VENDOR_KEY, 3, 7) + b"\x7f\xff\x01\x02vendor-body"
VENDOR_ANSWER_BODY = b"\x00\x2avendor answer \xff\x00 opaque"


def vendor_answer(correlation_id: int, _request: bytes) -> bytes:
    return struct.pack(">i", correlation_id) + VENDOR_ANSWER_BODY


@pytest.fixture
def vendor_relay(broker: Broker) -> Iterator[AnsweringRelay]:
    with AnsweringRelay((broker.host, broker.port), {VENDOR_KEY: vendor_answer}) as relay:
        yield relay


def counted(gw: GatewayProcess, action: str) -> float | None:
    return metric(gw, f'kafka_gateway_unknown_api_keys_total{{action="{action}"}}')


def test_forward_passes_an_unknown_key_through_and_its_answer_back_untouched(
    gateway_factory, vendor_relay
):
    gw = gateway_factory(
        "--unknown-api-keys", "forward", upstream=vendor_relay.bootstrap, metrics=True
    )
    conn = KafkaConnection(LOOPBACK, gw.port, timeout=10)
    with conn:
        # Pipelined: an upstream request, the vendor's, one the gateway answers itself.
        metadata = conn.send(
            3,
            12,
            MetadataRequest(
                topics=(),
                allow_auto_topic_creation=False,
                include_topic_authorized_operations=False,
            ),
            correlation_id=6,
        )
        conn.send_frame(VENDOR_REQUEST)
        api_versions = conn.send(18, 0, b"", correlation_id=8)
        frames = [conn.recv_frame() for _ in range(3)]
    assert [struct.unpack_from(">i", f)[0] for f in frames] == [metadata, 7, api_versions]
    assert frames[1] == struct.pack(">i", 7) + VENDOR_ANSWER_BODY
    assert vendor_relay.answered == [VENDOR_REQUEST]  # the request went on untouched
    assert counted(gw, "forward") == 1
    assert counted(gw, "close") == 0
    gw.wait_for_log(r'"api_key": 10000.*request\.unknown_api_key_forwarded')


def test_close_is_the_default_and_counts(gateway_factory, vendor_relay, tmp_path):
    # One line per key per interval, so the count below is exact.
    config = tmp_path / "log.toml"
    config.write_text("[log]\nbad_input_burst = 1\n")
    gw = gateway_factory("--config", str(config), upstream=vendor_relay.bootstrap, metrics=True)
    for _ in range(3):
        with KafkaConnection(LOOPBACK, gw.port, timeout=10) as conn:
            conn.send_frame(VENDOR_REQUEST)
            with pytest.raises(ConnectionClosed):
                conn.recv_frame(timeout=5)
    assert vendor_relay.answered == []
    assert counted(gw, "close") == 3
    # Every close counted, one line logged: a client that uses a vendor key does so on
    # each connection.
    assert gw.log_text().count('"reason": "unknown_api_key"') == 1
    assert counted(gw, "forward") == 0
    # Only that connection closed.
    with KafkaConnection(LOOPBACK, gw.port, timeout=10) as conn:
        assert conn.api_versions(0).error_code == 0
