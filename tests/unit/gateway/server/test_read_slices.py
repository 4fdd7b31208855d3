"""A connection side whose read filled the receive buffer (READ_BYTES, when libuv would
read the same socket again at once) yields the event loop for a turn, and that yield
never lifts a pause that has another reason (back-pressure, the memory budget,
draining); a socket read is at most READ_BYTES.

In the slice tests the transports are stand-ins that record pause_reading and
resume_reading: whether a real socket is being read at a given moment cannot be
observed from outside, and the order of these calls is what is under test. The
connection, its readers and the event loop (uvloop, the gateway's) are the real ones.
"""

from __future__ import annotations

import asyncio
import socket
import struct
from collections.abc import Awaitable, Callable

import uvloop

from gateway.protocol import InFlight
from gateway.server import proxy
from gateway.server.outbox import Outbox
from gateway.server.proxy import READ_BYTES, ClientConnection, UpstreamConnection
from gateway.server.reads import lane
from tests.unit._connection import RecordingTransport, connected

DESCRIBE_GROUPS = 15


def _request(correlation_id: int) -> bytes:
    """DescribeGroups v0 for no group: forwarded untouched."""
    client_id = b"slices"
    body = struct.pack(">hhih", DESCRIBE_GROUPS, 0, correlation_id, len(client_id)) + client_id
    body += struct.pack(">i", 0)
    return struct.pack(">i", len(body)) + body


def _large_response(correlation_id: int, size: int) -> bytes:
    """A response frame of ``size`` bytes in all (its body is not looked at)."""
    return struct.pack(">ii", size - 4, correlation_id) + bytes(size - 8)


def _run(test: Callable[[], Awaitable[None]]) -> None:
    uvloop.run(test())


async def _next_turn() -> None:
    await asyncio.sleep(0)
    await asyncio.sleep(0)


def _read(side: ClientConnection | UpstreamConnection, data: bytes) -> None:
    """What the transport does for one socket read of ``data``."""
    proxy._RECV[: len(data)] = data
    side.buffer_updated(len(data))


def test_a_large_response_yields_the_loop_after_each_full_read_and_arrives_whole() -> None:
    async def main() -> None:
        conn, client, upstream = connected(RecordingTransport)
        side = UpstreamConnection(conn)
        _read(conn, _request(1))
        response = _large_response(1, 4 * READ_BYTES + 100)
        for start in range(0, 4 * READ_BYTES, READ_BYTES):
            _read(side, response[start : start + READ_BYTES])
            assert not upstream.reading  # yielded: the next read waits for the next turn
            await _next_turn()
            assert upstream.reading
        _read(side, response[4 * READ_BYTES :])
        assert upstream.reading  # a short read ends the socket's turn by itself
        assert client.written == len(response)
        assert len(conn.inflight) == 0

    _run(main)


def test_a_yield_does_not_lift_back_pressure() -> None:
    async def main() -> None:
        conn, _client, upstream = connected(RecordingTransport)
        _read(conn, _request(1))
        conn.pause_writing()  # the client's write buffer is full
        assert not upstream.reading
        _read(UpstreamConnection(conn), _large_response(1, 2 * READ_BYTES)[:READ_BYTES])
        await _next_turn()
        assert not upstream.reading, "the yield's end resumed a back-pressured upstream"
        conn.resume_writing()
        assert upstream.reading

    _run(main)


def test_client_yields_keep_the_memory_pause_and_draining() -> None:
    async def main() -> None:
        conn, client, _upstream = connected(RecordingTransport)
        requests = b"".join(_request(i) for i in range(2 * READ_BYTES // 20))
        conn.budget.memory_pause(True)
        assert not client.reading
        _read(conn, requests[:READ_BYTES])
        await _next_turn()
        assert not client.reading, "the yield's end resumed a client over the memory budget"
        conn.budget.memory_pause(False)
        assert client.reading

        _read(conn, requests[READ_BYTES : 2 * READ_BYTES])
        assert not client.reading  # its own yield
        conn.drain()
        await _next_turn()
        assert not client.reading, "a draining connection read again"

    _run(main)


class RecordingPair:
    """What an UpstreamConnection hands its reads to (a ClientConnection's parts): reads
    with the scanner off, whose owner and flow this is."""

    def __init__(self) -> None:
        self.data: list[bytes] = []
        self.lost = asyncio.get_running_loop().create_future()
        self.reads = lane.Reads(self, self, InFlight(), 1 << 20)
        self.outbox = Outbox()
        self.flow = self

    def upstream_data(self, data: bytes) -> Outbox:
        self.data.append(data)
        return self.outbox  # nothing for the sockets

    def upstream_lost(self, exc: Exception | None) -> None:
        self.lost.set_result(exc)

    def read_filled_upstream(self) -> None:
        pass  # the yield itself is tested above


def test_reads_come_in_units_of_read_bytes_and_outlive_the_shared_buffer() -> None:
    """Over a real socket: every read is at most READ_BYTES, is ``bytes`` of its own (the
    receive buffer is shared by every connection and reused by the next read), and the
    reads put together are what was sent."""

    async def main() -> None:
        loop = asyncio.get_running_loop()
        ours, theirs = socket.socketpair()
        pair = RecordingPair()
        await loop.create_connection(
            lambda: UpstreamConnection(pair),  # type: ignore[arg-type]
            sock=ours,
        )
        sent = bytes(range(256)) * (6 * READ_BYTES // 256 + 7)
        await loop.sock_sendall(theirs, sent)
        theirs.close()
        await asyncio.wait_for(pair.lost, 10)
        assert all(isinstance(read, bytes) for read in pair.data)
        assert max(len(read) for read in pair.data) <= READ_BYTES
        assert b"".join(pair.data) == sent

    _run(main)
