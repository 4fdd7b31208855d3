"""``gateway/server/_lane.pyx``'s interface in Python: every read takes the Python path
(``data_received``, ``upstream_data``), whose readers call the scanner's twin first.
What runs where it was not compiled, or with ``KAFKA_GATEWAY_PURE_PYTHON=1``.
"""

from __future__ import annotations

from typing import Any

COMPILED = False

# The most one socket read takes (see gateway/server/proxy.py, READ_BYTES).
READ_BYTES = 120_000
# One receive buffer for every connection of the process (see proxy.py).
RECV = memoryview(bytearray(READ_BYTES))


class Reads:
    """Base of ``ClientConnection``: the state the compiled reads keep in C."""

    __slots__ = (
        "budget_on",
        "bytes_in",
        "bytes_out",
        "charged",
        "client",
        "counts",
        "draining",
        "entries",
        "inflight",
        "limits",
        "max_frame_bytes",
        "observer",
        "partial",
        "scan_requests_ok",
        "scan_responses_ok",
        "table",
        "upstream",
    )

    # Defined by ClientConnection.
    data_received: Any
    read_filled_client: Any

    def get_buffer(self, sizehint: int) -> memoryview:
        return RECV

    def buffer_updated(self, nbytes: int) -> None:
        if nbytes == READ_BYTES:
            self.read_filled_client()
        self.data_received(RECV[:nbytes].tobytes())

    def recharge_writes(self) -> None:
        now = self.partial
        if self.client is not None:
            now += self.client.get_write_buffer_size()
        if self.upstream is not None:
            now += self.upstream.get_write_buffer_size()
        if now != self.charged:
            self.limits.charge(self, self.charged, now)
            self.charged = now


class UpstreamReads:
    """Base of ``UpstreamConnection``: hands each read to its pair."""

    __slots__ = ("pair",)

    def __init__(self, pair: Any) -> None:
        self.pair = pair

    def get_buffer(self, sizehint: int) -> memoryview:
        return RECV

    def buffer_updated(self, nbytes: int) -> None:
        if nbytes == READ_BYTES:
            self.pair.read_filled_upstream()
        self.pair.upstream_data(RECV[:nbytes].tobytes())
