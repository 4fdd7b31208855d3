"""What one upstream read gives the client goes out in one write call, in order.

uvloop's ``writelines`` is one ``writev``: eight pipelined Produce v10+ answers (each
walked for its NodeEndpoints, so each a separate item) were eight sends, which cost
more than everything else the gateway did with them. The transports here are stand-ins
that record each write call, because how many calls carried the bytes cannot be seen
from the other end of a real socket (TCP merges them); the connection, its readers, the
interceptors and the event loop are the real ones.
"""

from __future__ import annotations

import asyncio
import struct

import uvloop

from tests.unit._connection import RecordingTransport, client_read, connected, upstream_read
from tests.unit._kafka import produce
from tests.unit.gateway.protocol.test_streams import produce_response

DESCRIBE_GROUPS = 15


class CallsTransport(RecordingTransport):
    """Records each write call as the list of buffers it carried."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[list[bytes]] = []

    def write(self, data: bytes | bytearray | memoryview) -> None:
        self.calls.append([bytes(data)])

    def writelines(self, frames: list[bytes | bytearray | memoryview]) -> None:
        self.calls.append([bytes(f) for f in frames])


def describe_groups(correlation_id: int) -> tuple[bytes, bytes]:
    """(request, response) of DescribeGroups v0, forwarded untouched both ways."""
    client_id = b"writes"
    head = struct.pack(">hhih", DESCRIBE_GROUPS, 0, correlation_id, len(client_id)) + client_id
    request = head + struct.pack(">i", 0)
    response = struct.pack(">ii", correlation_id, 0)  # no groups
    return (
        struct.pack(">i", len(request)) + request,
        struct.pack(">i", len(response)) + response,
    )


def test_pipelined_produce_answers_go_out_in_one_call_in_order() -> None:
    async def main() -> None:
        conn, client, upstream = connected(CallsTransport)
        ids = range(1, 9)
        requests = [produce(11, i, acks=1, transactional_id=None).frame for i in ids]
        client_read(conn, b"".join(requests))
        assert len(upstream.calls) == 1  # the eight requests, forwarded as read
        answers = [produce_response(11, i).frame for i in ids]
        upstream_read(conn, b"".join(answers))
        assert len(client.calls) == 1
        # Each walked, none changed, in request order: the scanner takes them all, and
        # they go out as they came, one buffer.
        assert client.calls[0] == [b"".join(answers)]
        assert len(conn.inflight) == 0

    uvloop.run(main())


def test_what_a_handler_answers_goes_out_in_its_turn_in_the_same_call() -> None:
    """The gateway's own request (its answer goes to a handler, which answers the
    client itself, as DescribeCluster's does) sits between two client requests in one
    upstream read: the handler's answer follows what came before it, and the whole
    read still goes out in one call."""

    async def main() -> None:
        conn, client, upstream = connected(CallsTransport)
        first, first_answer = describe_groups(1)
        second, second_answer = describe_groups(2)
        client_read(conn, first)
        local = conn.inflight.add(DESCRIBE_GROUPS, 0, 5, to_upstream=False)
        internal_id = 0

        def build(correlation_id: int) -> tuple[int, bytes]:
            nonlocal internal_id
            internal_id = correlation_id
            return 0, describe_groups(correlation_id)[0]

        def handler(payload: memoryview) -> None:
            assert client.calls == []  # nothing of the read went out before it ended
            conn.exchange.answer(local, struct.pack(">ii", 5, 0))

        conn.exchange.ask_upstream(DESCRIBE_GROUPS, build, handler)
        client_read(conn, second)
        assert upstream.calls == [[first], [describe_groups(internal_id)[0]], [second]]
        internal_answer = describe_groups(internal_id)[1]
        upstream_read(conn, first_answer + internal_answer + second_answer)
        assert client.calls == [[first_answer, describe_groups(5)[1], second_answer]]
        assert len(conn.inflight) == 0

    uvloop.run(main())


def test_an_answer_a_task_makes_goes_out_without_a_read() -> None:
    """As UpdateFeatures answers once ZooKeeper did (``exchange.spawn``): no read of
    either socket comes to send it, the pair tells its adapter."""

    async def main() -> None:
        conn, client, _ = connected(CallsTransport)
        entry = conn.inflight.add(DESCRIBE_GROUPS, 0, 3, to_upstream=False)
        done = asyncio.Event()

        async def answer_later() -> None:
            await asyncio.sleep(0)  # as a wait on ZooKeeper
            conn.exchange.answer(entry, struct.pack(">ii", 3, 0))
            done.set()

        conn.exchange.spawn(answer_later())
        await done.wait()
        assert client.calls == [[describe_groups(3)[1]]]
        assert len(conn.inflight) == 0

    uvloop.run(main())


def test_a_close_goes_out_after_what_came_before_it_and_an_abort_at_once() -> None:
    conn, client, upstream = connected(CallsTransport)
    asked, _ = describe_groups(1)
    client_read(conn, asked + struct.pack(">i", -5) + bytes(8))  # a negative size
    assert upstream.calls == [[asked]]  # the whole frame before the bad one, then closed
    assert client.closed and upstream.closed and not client.aborted

    conn, client, upstream = connected(CallsTransport)
    conn.abort()  # a limit's close, outside any read
    assert client.aborted and upstream.aborted
