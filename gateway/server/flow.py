"""Flow control of a connection's two sides: how much each may buffer, and why its
reading is paused (uvicorn's protocols pause and resume reading the same way).

The one part of a pair that acts on its sockets itself, not through the pair's outbox: a
pause takes effect at once, from within a read (the lane's yield, bytes held before
negotiation), the limits' sweep or a write buffer's callback alike, and is idempotent per
reason; returned as actions, every read would carry them for the rare one that pauses."""

from __future__ import annotations

import asyncio
from typing import Protocol

from .reads import lane

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

    # Its reads, which hold the two sockets (``client``, ``upstream``) once made.
    reads: lane.Reads

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
        client = self._conn.reads.client
        if client is not None:
            if not self._client:
                client.pause_reading()
            self._client |= reason

    def resume_client(self, reason: int) -> None:
        if self._client & reason:
            self._client &= ~reason
            conn = self._conn
            client = conn.reads.client
            if not self._client and client is not None and not conn.closed:
                client.resume_reading()

    def pause_upstream(self, reason: int) -> None:
        upstream = self._conn.reads.upstream
        if upstream is not None:
            if not self._upstream:
                upstream.pause_reading()
            self._upstream |= reason

    def resume_upstream(self, reason: int) -> None:
        if self._upstream & reason:
            self._upstream &= ~reason
            conn = self._conn
            upstream = conn.reads.upstream
            if not self._upstream and upstream is not None and not conn.closed:
                upstream.resume_reading()

    def read_filled_client(self) -> None:
        """A client read filled the buffer: libuv would read this socket again in this
        turn; the loop's other work goes first (``reads.READ_BYTES``)."""
        self.pause_client(SLICE)
        asyncio.get_running_loop().call_soon(self.resume_client, SLICE)

    def read_filled_upstream(self) -> None:
        """The same for an upstream read."""
        self.pause_upstream(SLICE)
        asyncio.get_running_loop().call_soon(self.resume_upstream, SLICE)
