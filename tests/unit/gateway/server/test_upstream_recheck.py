"""When the gateway may put a request of its own on a live connection's upstream
(gateway.server.upstream_recheck.may_ask): between two of the client's requests, once
the client is past authenticating, never inside a SASL exchange; and an ApiVersions
asked for is written only then. A real ``ClientConnection`` between recording
transports: what reached the upstream, and when, cannot be seen otherwise."""

from __future__ import annotations

import asyncio
import struct

from gateway.server.upstream_recheck import UpstreamRecheck, may_ask
from tests.unit._connection import RecordingTransport, client_read, connected
from tests.unit._kafka import kio_request, request

API_VERSIONS, SASL_HANDSHAKE, METADATA, PRODUCE = 18, 17, 3, 0


class Frames(RecordingTransport):
    """Keeps the API key of each request frame written to it."""

    def __init__(self) -> None:
        super().__init__()
        self.keys: list[int] = []

    def write(self, data: bytes | bytearray | memoryview) -> None:
        super().write(data)
        data = bytes(data)
        while len(data) >= 6:
            size = struct.unpack_from(">i", data)[0]
            self.keys.append(struct.unpack_from(">h", data, 4)[0])
            data = data[4 + size :]


def metadata(correlation_id: int) -> bytes:
    return kio_request("metadata", 12, correlation_id, topics=None,
                       allow_auto_topic_creation=False,
                       include_topic_authorized_operations=False).frame  # fmt: skip


def test_not_while_nothing_of_the_client_is_in_flight() -> None:
    conn, _, _ = connected(Frames)
    assert not may_ask(conn), "an idle client may be between two SASL steps"
    client_read(conn, metadata(1))
    assert may_ask(conn)


def test_not_inside_a_sasl_exchange() -> None:
    conn, _, _ = connected(Frames)
    handshake = request(SASL_HANDSHAKE, 1, 1, struct.pack(">h", 5) + b"PLAIN", header_version=1)
    client_read(conn, handshake.frame)
    assert not may_ask(conn)
    client_read(conn, metadata(2))  # even with another request behind it
    assert not may_ask(conn)


def test_not_in_the_middle_of_a_request_frame() -> None:
    conn, _, _ = connected(Frames)
    client_read(conn, metadata(1))
    whole = metadata(2)
    client_read(conn, whole[:9])
    assert not may_ask(conn)
    client_read(conn, whole[9:])
    assert may_ask(conn)


def test_not_once_draining() -> None:
    conn, _, _ = connected(Frames)
    client_read(conn, metadata(1))
    conn.drain()
    assert not may_ask(conn)


def test_an_api_versions_goes_out_only_between_two_requests() -> None:
    async def run() -> list[int]:
        conn, _, upstream = connected(Frames)
        recheck = UpstreamRecheck(conn.gateway, lambda: [conn], 60.0)
        whole = metadata(2)
        client_read(conn, metadata(1) + whole[:9])  # one whole, one begun
        recheck.ask(conn, sweep=True)
        assert upstream.keys == [METADATA], "nothing inside the begun frame"
        client_read(conn, whole[9:])
        await asyncio.sleep(0.2)  # it is looked at again every 50 ms
        return upstream.keys

    assert asyncio.run(run()) == [METADATA, METADATA, API_VERSIONS]
