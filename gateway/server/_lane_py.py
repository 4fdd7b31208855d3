"""``gateway/server/_lane.pyx``'s interface in Python: every read takes the Python path
(the owner's ``data_received``, ``upstream_data``), whose readers call the scanner's
twin first, and what the owner returns is sent (``send``). What runs where it was not
compiled, or with ``KAFKA_GATEWAY_PURE_PYTHON=1``.
"""

from __future__ import annotations

from typing import Any

from .outbox import ABORT, OPEN, Outbox, shut, write_all

COMPILED = False

# The most one socket read takes (see gateway/server/reads.py, READ_BYTES).
READ_BYTES = 120_000
# One receive buffer for every connection of the process (see reads.py).
RECV = memoryview(bytearray(READ_BYTES))


def get_buffer(sizehint: int) -> memoryview:
    """Every protocol's ``get_buffer``: the shared receive buffer."""
    return RECV


class Reads:
    """One connection's reads, both sides, and the state the compiled ones keep in C."""

    __slots__ = (
        "budget_on",
        "bytes_in",
        "bytes_out",
        "charged",
        "client",
        "counts",
        "draining",
        "entries",
        "flow",
        "limited",
        "limits",
        "max_frame_bytes",
        "observer",
        "owner",
        "partial",
        "scan_requests_ok",
        "scan_responses_ok",
        "table",
        "upstream",
    )

    def __init__(
        self,
        owner: Any,
        flow: Any,
        inflight: Any,
        max_frame_bytes: int,
        limits: Any = None,
        limited: Any = None,
    ) -> None:
        self.owner = owner
        self.flow = flow
        self.entries = inflight.entries
        self.counts = inflight.counts
        self.max_frame_bytes = max_frame_bytes
        self.limits = limits
        self.limited = limited
        self.budget_on = limits is not None and bool(limits.budget)
        self.client: Any = None
        self.upstream: Any = None
        self.observer: Any = None
        self.table: Any = None
        self.bytes_in = self.bytes_out = self.charged = self.partial = 0
        self.draining = self.scan_requests_ok = self.scan_responses_ok = False

    def client_read(self, nbytes: int) -> None:
        if nbytes == READ_BYTES:
            self.flow.read_filled_client()
        self.send(self.owner.data_received(RECV[:nbytes].tobytes()))

    def upstream_read(self, nbytes: int) -> None:
        if nbytes == READ_BYTES:
            self.flow.read_filled_upstream()
        self.send(self.owner.upstream_data(RECV[:nbytes].tobytes()))

    def send(self, out: Outbox) -> None:
        # The writes and the charge written out here, not called: this runs every read.
        if out.closing:
            self._shut(out)
        else:
            pending = out.upstream
            if pending and (transport := self.upstream) is not None:
                if len(pending) == 1:
                    transport.write(pending[0])
                else:
                    transport.writelines(pending)
                pending.clear()
            pending = out.client
            if pending and (transport := self.client) is not None:
                if len(pending) == 1:
                    transport.write(pending[0])
                else:
                    transport.writelines(pending)
                pending.clear()
        if self.budget_on:
            now = self.partial
            if (transport := self.client) is not None:
                now += transport.get_write_buffer_size()
            if (transport := self.upstream) is not None:
                now += transport.get_write_buffer_size()
            if now != self.charged:
                self.limits.charge(self.limited, self.charged, now)
                self.charged = now

    def _shut(self, out: Outbox) -> None:
        closing, out.closing = out.closing, OPEN
        if closing != ABORT:
            if self.upstream is not None:
                write_all(self.upstream, out.upstream)
            if self.client is not None:
                write_all(self.client, out.client)
        out.upstream.clear()
        out.client.clear()
        shut(closing, self.client, self.upstream)
