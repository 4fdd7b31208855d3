"""Metadata responses stream through the gateway with only their brokers rewritten.

Real Tansu, a real gateway process, every Metadata version both support: the response
through the gateway must be byte for byte what the buffered rewrite
(``rewrite_response`` on the whole body) makes of Tansu's own answer, in sidecar and in
cluster mode. The expected brokers come from the gateway's answer (where it advertises
each node is its routing's business, tested elsewhere); what this pins down is that
nothing else changed and that the streamed frame's length and encoding are exact.
A spoiled upstream frame (``MetadataFaultTap``, the one fake here) closes that client's
connection, with a log line, and nothing else.
"""

from __future__ import annotations

import socket
import struct
from typing import Any

import pytest
from kio.index import load_request_schema, load_response_schema

from gateway.interceptors.addresses import rewrite_response
from tests.harness import KafkaConnection
from tests.harness.kafka_wire import ConnectionClosed, decode, is_flexible
from tests.harness.ports import free_port

from .test_fetch_streaming import NodeEndpointsTap

METADATA = 3
API_VERSIONS = 18


class AnswerBook:
    """Advertises each node where the gateway's own answer put it."""

    generation = 0  # its answers never change

    def __init__(self, brokers: dict[int, tuple[str, int]]) -> None:
        self.brokers = brokers

    def advertise(self, node_id: int, host: str, port: int) -> tuple[str, int]:
        return self.brokers[node_id]


def _request(version: int) -> Any:
    cls = load_request_schema(METADATA, version)
    fields: dict[str, Any] = {"topics": () if version == 0 else None}
    names = set(cls.__dataclass_fields__)
    for flag in (
        "allow_auto_topic_creation",
        "include_cluster_authorized_operations",
        "include_topic_authorized_operations",
    ):
        if flag in names:
            fields[flag] = False
    return cls(**fields)


def _metadata(port: int, version: int) -> bytes:
    conn = KafkaConnection("127.0.0.1", port)
    return conn.request(METADATA, version, _request(version)).body


def _versions(port: int) -> list[int]:
    versions = []
    for version in range(0, 13):
        try:
            _metadata(port, version)
        except Exception:
            continue
        versions.append(version)
    return versions


def _assert_streamed_equals_buffered(direct_port: int, gateway_port: int) -> list[int]:
    versions = _versions(direct_port)
    assert versions, "the broker answered no Metadata version"
    for version in versions:
        direct = _metadata(direct_port, version)
        through = _metadata(gateway_port, version)
        # The same head again: now the compiled lane replaces it (the Python path
        # rewrote the first and recorded it; see gateway/server/_lane.pyx).
        assert _metadata(gateway_port, version) == through, f"Metadata v{version} again"
        schema = load_response_schema(METADATA, version)
        advertised = {b.node_id: (b.host, b.port) for b in decode(schema, through).brokers}
        original = {b.node_id: (b.host, b.port) for b in decode(schema, direct).brokers}
        assert advertised.keys() == original.keys()
        assert advertised != original, "the brokers were not rewritten"
        expected = bytes(rewrite_response(METADATA, version, direct, AnswerBook(advertised)))
        assert through == expected, f"Metadata v{version} (flexible={is_flexible(3, version)})"
    return versions


def test_sidecar_metadata_is_the_buffered_rewrite_byte_for_byte(gateway, broker) -> None:
    port = int(broker.bootstrap.rsplit(":", 1)[1])
    versions = _assert_streamed_equals_buffered(port, gateway.port)
    assert 0 in versions and max(versions) >= 9  # classic and flexible


def test_cluster_mode_metadata_is_the_buffered_rewrite_byte_for_byte(
    gateway_factory, broker_factory, tmp_path
) -> None:
    tansu = broker_factory(advertised_host="127.0.0.1")
    config = tmp_path / "cluster.toml"
    config.write_text(f'mode = "cluster"\n[cluster.ports]\n111 = {free_port()}\n')
    gw = gateway_factory("--config", str(config), upstream=tansu.bootstrap)
    _assert_streamed_equals_buffered(int(tansu.bootstrap.rsplit(":", 1)[1]), gw.port)


class MetadataFaultTap(NodeEndpointsTap):
    """Relay between the gateway and Tansu that spoils Metadata v1 responses (a fault
    injector: Tansu never sends a bad frame). ``lie``: the brokers count claims 1000
    brokers; ``truncate``: the frame's first 10 bytes go out, then the connection closes."""

    def __init__(self, upstream: tuple[str, int], fault: str) -> None:
        super().__init__(upstream, host="unused")
        self.fault = fault

    def _responses(self, src: socket.socket, dst: socket.socket, awaited: dict) -> None:
        while (payload := self._frame(src)) is not None:
            (correlation_id,) = struct.unpack_from(">i", payload)
            key, _ = awaited.pop(correlation_id, (-1, -1))
            frame = struct.pack(">i", len(payload)) + payload
            try:
                if key != METADATA:
                    dst.sendall(frame)
                elif self.fault == "lie":  # v1: the brokers count follows the correlation id
                    dst.sendall(frame[:8] + struct.pack(">i", 1000) + frame[12:])
                else:
                    # Cut inside the head (length, correlation id, half the brokers
                    # count), so that no byte of it may reach the client.
                    dst.sendall(frame[:10])
                    dst.shutdown(socket.SHUT_RDWR)
                    return
            except OSError:
                return


@pytest.mark.parametrize(
    ("fault", "log_line"),
    [
        ("lie", "Metadata v1 response.*connection.protocol_violation"),
        ("truncate", '"mid_response": true.*upstream.closed'),
    ],
)
def test_a_spoiled_upstream_metadata_closes_that_connection_only(
    broker, gateway_factory, fault: str, log_line: str
) -> None:
    if broker.external:
        pytest.skip("the tap relays to Tansu; an external broker is not needed here")
    tap = MetadataFaultTap((broker.host, broker.port), fault)
    try:
        gw = gateway_factory(upstream=f"127.0.0.1:{tap.port}")
        victim = KafkaConnection("127.0.0.1", gw.port)
        victim.send(METADATA, 1, _request(1))
        # Nothing of the spoiled frame reaches the client: its head was held back.
        with pytest.raises(ConnectionClosed, match="after 0 of 4 bytes"):
            victim.recv_frame()
        gw.wait_for_log(log_line)
        # The gateway stays up: a new connection is served.
        other = KafkaConnection("127.0.0.1", gw.port)
        assert other.request(API_VERSIONS, 0, b"").body[:2] == b"\x00\x00"
    finally:
        tap.close()
