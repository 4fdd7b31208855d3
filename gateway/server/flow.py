"""Flow control of a connection's two sides: how much each may buffer, and why its
reading is paused (uvicorn's protocols pause and resume reading the same way)."""

from __future__ import annotations

import asyncio

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


class Pauses:
    """Why one side's reading is paused (the bits above): it reads again once no reason
    is left, so lifting one pause never lifts another."""

    __slots__ = ("reasons",)

    def __init__(self) -> None:
        self.reasons = 0

    def pause(self, transport: asyncio.Transport | None, reason: int) -> None:
        if transport is not None:
            if not self.reasons:
                transport.pause_reading()
            self.reasons |= reason

    def resume(self, transport: asyncio.Transport | None, reason: int, closed: bool) -> None:
        if self.reasons & reason:
            self.reasons &= ~reason
            if not self.reasons and transport is not None and not closed:
                transport.resume_reading()
