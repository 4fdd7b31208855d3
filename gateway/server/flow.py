"""Flow control of a connection's two sides: how much each may buffer, and why its
reading is paused (uvicorn's protocols pause and resume reading the same way)."""

from __future__ import annotations

import asyncio
from typing import Protocol

# Large enough that a bulk fetch streams without stop-and-go (at 1 GB/s, 512 KiB is half
# a millisecond of data, and the kernel's socket buffers hold more), small enough that
# slow clients cannot make the gateway hold much of a broker's output: 64 clients pulling
# a 4.2 MB Metadata peaked at 167 MB RSS with 4 MiB here, 88-97 MB with 512 KiB (the
# target: 100 MB), at the same CPU per response (metadata_bench, --workers 1).
WRITE_BUFFER_HIGH = 512 * 1024
WRITE_BUFFER_LOW = 128 * 1024
# Client bytes held while the upstream handshake runs; above this the client is paused.
PENDING_HIGH = 1024 * 1024

# Why a side's reading is paused, as bits: it reads again once no reason is left.
HELD = 1  # client bytes wait for the upstream handshake (PENDING_HIGH)
BACKPRESSURE = 2  # the other side's write buffer is above its high-water mark
MEMORY = 4  # queued_max_request_bytes is spent (gateway/server/limits.py)
DRAINING = 8  # SIGTERM: no new requests, never resumed
SLICE = 16  # a read filled the buffer: the loop's other work goes first (READ_BYTES)
THROTTLED = 32  # held by max_connection_creation_rate until its token is due


class Flowing(Protocol):
    """What the flow reads of its connection (``pair.Pair``)."""

    client: asyncio.Transport | None
    upstream: asyncio.Transport | None

    @property
    def closed(self) -> bool: ...


class Flow:
    """Why each side of one connection is paused (the bits above): a side reads again
    once no reason is left, so lifting one pause never lifts another. One per
    connection, made and held by its ``pair.Pair``."""

    __slots__ = ("_client", "_conn", "_upstream")

    def __init__(self, conn: Flowing) -> None:
        self._conn = conn
        self._client = self._upstream = 0  # each side's reasons

    def pause_client(self, reason: int) -> None:
        client = self._conn.client
        if client is not None:
            if not self._client:
                client.pause_reading()
            self._client |= reason

    def resume_client(self, reason: int) -> None:
        if self._client & reason:
            self._client &= ~reason
            conn = self._conn
            if not self._client and conn.client is not None and not conn.closed:
                conn.client.resume_reading()

    def pause_upstream(self, reason: int) -> None:
        upstream = self._conn.upstream
        if upstream is not None:
            if not self._upstream:
                upstream.pause_reading()
            self._upstream |= reason

    def resume_upstream(self, reason: int) -> None:
        if self._upstream & reason:
            self._upstream &= ~reason
            conn = self._conn
            if not self._upstream and conn.upstream is not None and not conn.closed:
                conn.upstream.resume_reading()

    def read_filled_client(self) -> None:
        """A client read filled the buffer: libuv would read this socket again in this
        turn; the loop's other work goes first (``reads.READ_BYTES``)."""
        self.pause_client(SLICE)
        asyncio.get_running_loop().call_soon(self.resume_client, SLICE)

    def read_filled_upstream(self) -> None:
        """The same for an upstream read."""
        self.pause_upstream(SLICE)
        asyncio.get_running_loop().call_soon(self.resume_upstream, SLICE)


# How long a drained connection's client has to read the last answers and close its end
# before the gateway closes anyway (SIGTERM waits for it, within drain_timeout_s).
LINGER_S = 2.0


def linger_close(transport: asyncio.Transport) -> None:
    """Close a drained client's connection with a FIN after the last answer, not a reset.

    A drained connection stops reading requests, and a socket closed with bytes unread
    is reset (RFC 1122 4.2.2.13): the client sees "connection reset by peer" where a
    broker's close says "closed", and over a real network the reset discards whatever
    of the last answers the kernel had not yet sent. So the gateway half-closes once
    what is buffered went out, reads (and drops) what the client still sends, and
    closes when the client does (``eof_received``) or after ``LINGER_S``.
    """
    if not transport.can_write_eof():  # TLS: close_notify, then the socket
        transport.close()
        return
    transport.write_eof()
    transport.resume_reading()
    asyncio.get_running_loop().call_later(LINGER_S, transport.close)


def write_all(transport: asyncio.Transport, out: list[bytes | bytearray | memoryview]) -> None:
    """Write ``out`` in one call (one system call when the socket takes it all); empty it."""
    if len(out) == 1:
        transport.write(out[0])
    elif out:
        transport.writelines(out)
    else:
        return
    out.clear()
