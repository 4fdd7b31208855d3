"""unknown_api_keys: an API key the gateway does not know (a vendor's, like Confluent
Cloud's 10000) closes the connection, as Kafka does, or with ``forward`` passes through
opaque and its response comes back untouched, in request order.

Tansu, like Kafka, closes on an unknown key, so no real broker can answer one. A small
relay (``VendorRelay``) stands in front of Tansu and answers key 10000 itself, passing
every other request on to Tansu: the one fault-free part a real broker cannot play.
"""

from __future__ import annotations

import socket
import struct
import threading
from collections.abc import Iterator

import pytest
from kio.schema.metadata.v12.request import MetadataRequest

from tests.harness import LOOPBACK, Broker, GatewayProcess, KafkaConnection, free_port
from tests.harness.kafka_wire import ConnectionClosed
from tests.integration.test_features import metric

VENDOR_KEY = 10000
# A request header no schema describes: the "client id" length says 0x7fff bytes that
# are not there. A gateway that parsed past the correlation id would call it malformed.
VENDOR_REQUEST = struct.pack(">hhi", VENDOR_KEY, 3, 7) + b"\x7f\xff\x01\x02vendor-body"
VENDOR_ANSWER_BODY = b"\x00\x2avendor answer \xff\x00 opaque"


def _read_frame(sock: socket.socket) -> bytes | None:
    head = _read_exact(sock, 4)
    if head is None:
        return None
    (size,) = struct.unpack(">i", head)
    return _read_exact(sock, size)


def _read_exact(sock: socket.socket, size: int) -> bytes | None:
    data = b""
    while len(data) < size:
        chunk = sock.recv(size - len(data))
        if not chunk:
            return None
        data += chunk
    return data


class VendorRelay:
    """Relays to a broker one request at a time (so responses keep request order) and
    answers VENDOR_KEY itself with VENDOR_ANSWER_BODY after the correlation id."""

    def __init__(self, upstream: Broker) -> None:
        self.upstream = (upstream.host, upstream.port)
        self.port = free_port()
        self._server = socket.create_server((LOOPBACK, self.port))
        self._server.settimeout(0.2)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._accept, daemon=True)
        self.vendor_requests: list[bytes] = []

    @property
    def bootstrap(self) -> str:
        return f"{LOOPBACK}:{self.port}"

    def _accept(self) -> None:
        while not self._stop.is_set():
            try:
                client, _ = self._server.accept()
            except TimeoutError:
                continue
            threading.Thread(target=self._serve, args=(client,), daemon=True).start()

    def _serve(self, client: socket.socket) -> None:
        with client, socket.create_connection(self.upstream, timeout=10) as broker:
            while (request := _read_frame(client)) is not None:
                key, _, correlation_id = struct.unpack_from(">hhi", request)
                if key == VENDOR_KEY:
                    self.vendor_requests.append(request)
                    answer: bytes | None = struct.pack(">i", correlation_id) + VENDOR_ANSWER_BODY
                else:
                    broker.sendall(struct.pack(">i", len(request)) + request)
                    answer = _read_frame(broker)
                    if answer is None:
                        return
                client.sendall(struct.pack(">i", len(answer)) + answer)

    def __enter__(self) -> VendorRelay:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(5)
        self._server.close()


@pytest.fixture
def vendor_relay(broker: Broker) -> Iterator[VendorRelay]:
    with VendorRelay(broker) as relay:
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
    assert vendor_relay.vendor_requests == [VENDOR_REQUEST]  # the request went on untouched
    assert counted(gw, "forward") == 1
    assert counted(gw, "close") == 0
    gw.wait_for_log(r'"api_key": 10000.*request\.unknown_api_key_forwarded')


def test_close_is_the_default_and_counts(gateway_factory, vendor_relay):
    gw = gateway_factory(upstream=vendor_relay.bootstrap, metrics=True)
    for _ in range(3):
        with KafkaConnection(LOOPBACK, gw.port, timeout=10) as conn:
            conn.send_frame(VENDOR_REQUEST)
            with pytest.raises(ConnectionClosed):
                conn.recv_frame(timeout=5)
    assert vendor_relay.vendor_requests == []
    assert counted(gw, "close") == 3
    # Every close counted, one line logged: a client that uses a vendor key does so on
    # each connection.
    assert gw.log_text().count('"reason": "unknown_api_key"') == 1
    assert counted(gw, "forward") == 0
    # Only that connection closed.
    with KafkaConnection(LOOPBACK, gw.port, timeout=10) as conn:
        assert conn.api_versions(0).error_code == 0
