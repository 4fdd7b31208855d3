"""What a connection pair gives its two sockets: the bytes for each and how it closes.

The pair (``pair.Pair``, sans-I/O) puts what a read, or an answer made later, gives
each socket in its one ``Outbox`` and returns it; its reads (``_lane.pyx``,
``_lane_py.py``: ``Reads.send``) send it, one write call a side, then close as it
says. ``write_all``, ``linger_close`` and ``shut`` are how, for both builds of the reads.
"""

from __future__ import annotations

import asyncio

Buffers = list[bytes | bytearray | memoryview]

# How the pair closes (``Outbox.closing``): not; both sockets, each after what it
# buffered; the client's as ``linger_close`` does (a drained connection); both at once,
# dropping what is unsent (a limit's close, shutdown's end).
OPEN, CLOSE, LINGER, ABORT = 0, 1, 2, 3


class Outbox:
    """What the pair's sockets are to be given, in order, since it was last sent."""

    __slots__ = ("client", "closing", "upstream")

    def __init__(self) -> None:
        self.client: Buffers = []
        self.upstream: Buffers = []
        self.closing = OPEN

    def __repr__(self) -> str:
        return f"Outbox(client={self.client!r}, upstream={self.upstream!r}, closing={self.closing})"


def write_all(transport: asyncio.Transport, out: Buffers) -> None:
    """Write ``out`` in one call (one system call when the socket takes it all); empty it."""
    if len(out) == 1:
        transport.write(out[0])
    elif out:
        transport.writelines(out)
    else:
        return
    out.clear()


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


def shut(
    closing: int, client: asyncio.Transport | None, upstream: asyncio.Transport | None
) -> None:
    """Close both sockets as ``closing`` says (after what was written to them)."""
    if closing == ABORT:
        for transport in (client, upstream):
            if transport is not None:
                transport.abort()
        return
    if client is not None:
        linger_close(client) if closing == LINGER else client.close()
    if upstream is not None:
        upstream.close()


__all__ = ["ABORT", "CLOSE", "LINGER", "OPEN", "Outbox", "linger_close", "shut", "write_all"]
